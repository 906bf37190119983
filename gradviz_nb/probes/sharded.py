"""Statistics of sharded tensors (FSDP2's ``DTensor`` parameters and gradients) without gathering them.

A ``DTensor`` sharded over a device mesh holds one piece per rank (``to_local()``). Sums over the full
tensor (of squares, of values, counts) are the sums of the local pieces' sums, so every rank computes its
pieces' sums and one collective per process group its pieces are spread over adds them (with maxima: one
all-gather of the few sums and maxima per rank, added and maxed locally). No tensor is gathered. A dimension
where the tensor is replicated holds the same piece on every rank: it is not reduced (HSDP's replicate
dimension costs nothing). ``Partial`` placements (pending reductions) are reduced first (``redistribute`` to
``Replicate``), the only case with another collective.

Every rank of the mesh must make the same calls in the same order (as for any collective): the callers
reduce fixed-size buffers built from the model's structure, never from what one rank happens to hold.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["Spread", "all_reduce_rows", "is_dtensor", "local_part", "reshard_fsdp"]


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return None
    return DTensor


def is_dtensor(t: object) -> bool:
    """Whether ``t`` is a ``torch.distributed.tensor.DTensor`` (a sharded or replicated tensor)."""
    cls = _dtensor_type()
    return cls is not None and isinstance(t, cls)


class Spread:
    """The process groups a ``DTensor``'s pieces are spread over: one per mesh dimension where it is sharded
    (a replicated dimension holds the same piece on every rank, so its sums need no reduction)."""

    def __init__(self, groups: tuple[Any, ...]) -> None:
        self.groups = groups

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Spread) and len(other.groups) == len(self.groups) and all(
            a is b for a, b in zip(self.groups, other.groups, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(id(g) for g in self.groups))


def local_part(t: torch.Tensor) -> tuple[torch.Tensor, Spread | None, float]:
    """``(local values, the groups its pieces are spread over, weight of its sums)``; a plain tensor, or a
    ``DTensor`` replicated on every dimension, is ``(local, None, 1.0)``: nothing to reduce. The weight is 1:
    only sharded dimensions are reduced, each piece counted once."""
    if not is_dtensor(t):
        return t, None, 1.0
    d: Any = t.detach()
    if any(p.is_partial() for p in d.placements):
        from torch.distributed.tensor import Replicate

        d = d.redistribute(d.device_mesh, [Replicate() if p.is_partial() else p for p in d.placements])
    mesh = d.device_mesh
    groups = tuple(mesh.get_group(i) for i, p in enumerate(d.placements) if not p.is_replicate())
    local: torch.Tensor = d.to_local()
    return local, Spread(groups) if groups else None, 1.0


def all_reduce_rows(spreads: Sequence[Spread | None], sums: torch.Tensor, maxes: torch.Tensor | None = None) -> None:
    """In place: each row ``i`` of ``sums`` (and of ``maxes``) spread as ``spreads[i]`` becomes its sum (max)
    over the ranks holding its pieces; rows with ``None`` stay. One collective per distinct process group, in
    order of first appearance (a group shared by several meshes, as a 2-D mesh's outer dimension and the 1-D mesh
    sliced from it, is one collective): a ``SUM`` all-reduce of the sums alone, or, with ``maxes``, one
    all-gather of sums and maxima together (a few floats per rank), added and maxed here, in rank order, so
    every rank gets the same numbers."""
    import torch.distributed as dist

    groups: list[Any] = []
    for sp in spreads:
        for g in sp.groups if sp is not None else ():
            if not any(g is o for o in groups):
                groups.append(g)
    for group in groups:
        held = [i for i, sp in enumerate(spreads) if sp is not None and any(g is group for g in sp.groups)]
        rows = torch.tensor(held, dtype=torch.long)
        s = sums[rows].contiguous()
        if maxes is None:
            dist.all_reduce(s, dist.ReduceOp.SUM, group=group)
            sums[rows] = s
            continue
        mine = torch.cat([s.flatten(), maxes[rows].flatten()])
        parts = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, mine, group=group)
        every = torch.stack(parts)
        sums[rows] = every[:, : s.numel()].sum(dim=0).reshape(s.shape)
        maxes[rows] = every[:, s.numel():].amax(dim=0).reshape(maxes[rows].shape)


def reshard_fsdp(model: nn.Module) -> int:
    """Put FSDP2 modules left unsharded back to their sharded parameters; returns how many were resharded.

    A forward under ``fully_shard`` that is never backpropagated (a loss traced to look at, an evaluation)
    leaves the root's parameters all-gathered: ``model.named_parameters()`` then gives plain full tensors
    where it gives ``DTensor`` shards after a backward, and comparing or copying one kind onto the other
    crashes (``torch.equal`` of a ``DTensor`` and a plain tensor segfaults in torch 2.13). FSDP's own
    ``reshard()`` frees the all-gathered copies; the values are unchanged (the shards hold them).
    """
    fsdp = getattr(sys.modules.get("torch.distributed.fsdp"), "FSDPModule", None)
    if fsdp is None or all(is_dtensor(p) for p in model.parameters()):
        return 0
    modules = [m for m in model.modules() if isinstance(m, fsdp)]
    for m in modules:
        m.reshard()
    return len(modules)

"""Statistics of sharded tensors (FSDP2's ``DTensor`` parameters and gradients) without gathering them.

A ``DTensor`` sharded over a device mesh holds one piece per rank (``to_local()``). Sums over the full
tensor (of squares, of values, counts) are the sums of the local pieces' sums, so every rank computes
its pieces' sums and one collective per mesh dimension adds them (with maxima: one all-gather of the few sums
and maxima per rank, added and maxed locally). No tensor is gathered. Dimensions where the tensor is
replicated contribute each piece several times: their sums are weighted by ``1 / replicas``. ``Partial``
placements (pending reductions) are reduced first (``redistribute`` to ``Replicate``), the only case with
another collective.

Every rank of the mesh must make the same calls in the same order (as for any collective): the callers
reduce fixed-size buffers built from the model's structure, never from what one rank happens to hold.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["all_reduce_rows", "is_dtensor", "local_part", "reshard_fsdp"]


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


def local_part(t: torch.Tensor) -> tuple[torch.Tensor, Any, float]:
    """``(local values, device mesh, weight of its sums)``; a plain tensor is ``(t, None, 1.0)``."""
    if not is_dtensor(t):
        return t, None, 1.0
    d: Any = t.detach()
    if any(p.is_partial() for p in d.placements):
        from torch.distributed.tensor import Replicate

        d = d.redistribute(d.device_mesh, [Replicate() if p.is_partial() else p for p in d.placements])
    mesh = d.device_mesh
    replicas = math.prod(mesh.size(i) for i, p in enumerate(d.placements) if p.is_replicate())
    local: torch.Tensor = d.to_local()
    return local, mesh, 1.0 / replicas


def all_reduce_rows(meshes: Sequence[Any], sums: torch.Tensor, maxes: torch.Tensor | None = None) -> None:
    """In place: each row ``i`` of ``sums`` (and of ``maxes``) with a mesh in ``meshes[i]`` becomes its sum
    (max) over that mesh's ranks; rows with ``None`` stay. One collective per dimension of each distinct mesh, in
    order of first appearance: a ``SUM`` all-reduce of the sums alone, or, with ``maxes``, one all-gather of sums
    and maxima together (a few floats per rank), added and maxed here, so a record never costs two collectives
    per dimension."""
    import torch.distributed as dist

    distinct: list[Any] = []
    for m in meshes:
        if m is not None and not any(m == o for o in distinct):
            distinct.append(m)
    for mesh in distinct:
        rows = torch.tensor([i for i, m in enumerate(meshes) if m is not None and m == mesh], dtype=torch.long)
        s = sums[rows].contiguous()
        mx = maxes[rows].contiguous() if maxes is not None else None
        for dim in range(mesh.ndim):
            group = mesh.get_group(dim)
            if mx is None:
                dist.all_reduce(s, dist.ReduceOp.SUM, group=group)
                continue
            mine = torch.cat([s.flatten(), mx.flatten()])
            parts = [torch.empty_like(mine) for _ in range(mesh.size(dim))]
            dist.all_gather(parts, mine, group=group)
            every = torch.stack(parts)
            s = every[:, : s.numel()].sum(dim=0).reshape(s.shape)
            mx = every[:, s.numel():].amax(dim=0).reshape(mx.shape)
        sums[rows] = s
        if maxes is not None and mx is not None:
            maxes[rows] = mx


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

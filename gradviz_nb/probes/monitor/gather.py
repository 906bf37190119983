"""The monitor under ``torch.distributed``: per-rank statistics gathered to rank 0, DDP's guarantees checked
there (``replica-mismatch``, ``unused-on-rank``), and FSDP2 shards reduced to full-tensor norms."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gradviz_nb.probes.monitor.params import Emit, ParamIndex, grad_values
from gradviz_nb.probes.sharded import all_reduce_rows, local_part
from gradviz_nb.tracing import typed_torch
from gradviz_nb.tracing.distributed import engines

REPLICA_RTOL = 1e-5
"""DDP replicas' gradient norms must agree after the all-reduce; they are bit-identical in practice (every
rank averages the same buckets), so this only absorbs a reduction order differing across ranks."""
_NORM = 0  # the norm column of a record (buffer.NORM)


def world() -> tuple[int, int]:
    """``(rank, world size)`` of the default process group, ``(0, 1)`` without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class RankGather:
    """One gather to rank 0 per record; under DDP, which synced parameters backward reached on each rank."""

    def __init__(self, index: ParamIndex, model: nn.Module | None, emit: Emit) -> None:
        self.index, self._event = index, emit
        self.rank, self.size = world()
        self.ddp = self.size > 1 and model is not None and "ddp" in engines(model)
        ignored = ddp_ignored(model) if self.ddp else set()
        self.synced = [i for i, name in enumerate(index.names) if name not in ignored] if self.ddp else []
        self.reached = [False] * len(index.params)
        self.mismatch = [False] * len(index.layers)
        self.unused_reported: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()

    def hooks(self) -> list[Any]:
        """Tensor hooks that note which parameters backward reaches on this rank (DDP's reducer writes .grad
        for the rest)."""
        if not self.ddp:
            return []
        return [typed_torch.register_hook(self.index.params[i], self._reach_hook(i))
                for i in self.synced if self.index.params[i].requires_grad]

    def _reach_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(_: torch.Tensor) -> None:  # backward computed a gradient for parameter i on this rank
            self.reached[i] = True

        return hook

    def gather(self, stats: torch.Tensor, rank_hist: torch.Tensor | None, slot: int) -> None:
        """This rank's (layers x STATS) and reached flags to rank 0, into ``rank_hist[slot]`` there."""
        import torch.distributed as dist

        reached = torch.tensor([self.reached[i] for i in self.synced], dtype=stats.dtype)
        mine = torch.cat([stats.flatten(), reached])
        gathered = [torch.empty_like(mine) for _ in range(self.size)] if self.rank == 0 else None
        dist.gather(mine, gathered, dst=0)
        if gathered is None or rank_hist is None:
            return
        every = torch.stack(gathered)
        rank_hist[slot] = every[:, : stats.numel()].reshape(self.size, *stats.shape)
        if self.ddp:
            self.check_replicas(rank_hist[slot])
            self.check_reached(every[:, stats.numel():] > 0)

    def check_replicas(self, ranks: torch.Tensor) -> None:
        """Rank 0 under DDP: every rank's layer gradient norms must equal rank 0's (all-reduced gradients)."""
        index = self.index
        synced = {index.layer_of(i) for i in self.synced}
        for c in range(len(index.layers)):
            norms = ranks[:, c, _NORM].tolist()
            ref = norms[0]
            off = [(r, v) for r, v in enumerate(norms) if r and not math.isclose(v, ref, rel_tol=REPLICA_RTOL)
                   and not (math.isnan(v) and math.isnan(ref))] if c in synced else []
            if off and not self.mismatch[c]:
                r, v = off[0]
                others = f" (and ranks {', '.join(str(o) for o, _ in off[1:])})" if len(off) > 1 else ""
                self._event("replica-mismatch", index.layers[c],
                          f"rank {r}'s gradient norm {v:.4g} differs from rank 0's {ref:.4g}{others}; DDP "
                          "replicas must agree after its all-reduce, so this optimizer step moves the ranks' "
                          "weights apart. Was backward run under no_sync() before this step, or were the "
                          "gradients changed on one rank after backward (scaled, clipped or zeroed per rank)?",
                          tuple(index.names[i] for i in self.synced if index.layer_of(i) == c))
            self.mismatch[c] = bool(off)

    def check_reached(self, reached: torch.Tensor) -> None:
        """Rank 0 under DDP: ``reached`` (world x synced parameters) says which ranks' backward reached each
        parameter since the last step; one reached by some ranks only is named with the ranks."""
        some, every = reached.any(dim=0), reached.all(dim=0)
        by_ranks: dict[tuple[int, ...], list[int]] = {}
        for j in torch.nonzero(some & ~every).flatten().tolist():
            missing = tuple(torch.nonzero(~reached[:, j]).flatten().tolist())
            by_ranks.setdefault(missing, []).append(self.synced[j])
        for missing, idx in by_ranks.items():
            key = (missing, tuple(idx))
            if key in self.unused_reported:
                continue
            self.unused_reported.add(key)
            names = [self.index.names[i] for i in idx]
            who = "rank " + str(missing[0]) if len(missing) == 1 else "ranks " + ", ".join(map(str, missing))
            reached_by = [r for r in range(reached.shape[0]) if r not in missing]
            by = ("rank " if len(reached_by) == 1 else "ranks ") + ", ".join(map(str, reached_by))
            shown = ", ".join(names[:8]) + (f" ... ({len(names)} in all)" if len(names) > 8 else "")
            self._event("unused-on-rank", names[0] if len(names) == 1 else common_prefix(names),
                      f"backward on {who} never reached {shown}, which {by} did reach since the last "
                      "step (a branch skipped on some ranks, or outputs left out of the loss there). DDP "
                      "without find_unused_parameters=True fails on this with 'Expected to have finished "
                      "reduction in the prior iteration'; with it, DDP averages in zeros for these parameters. "
                      "Make every rank use the same parameters, or keep find_unused_parameters=True.",
                      tuple(names))


def sharded_norms(index: ParamIndex, present: list[int]) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Gradient norms, max |g| and weight norms of the ``present`` parameters when some are ``DTensor``
    shards (FSDP2): squared sums of this rank's shards, then one ``SUM`` and one ``MAX`` all-reduce over
    a buffer with a row per parameter (same size on every rank), so each is the full tensor's norm.
    The fourth value: the same three of this rank's own shards (before the all-reduce)."""
    n = len(index.params)
    sums = torch.zeros(2 * n, dtype=torch.float64)  # gradient squared sums, then weight squared sums
    maxes = torch.zeros(2 * n, dtype=torch.float64)
    meshes: list[Any] = [None] * (2 * n)
    own = torch.zeros(2 * n, dtype=torch.float64)  # the same sums, unweighted: this rank's pieces alone
    for i, p in enumerate(index.params):
        w, meshes[n + i], weight = local_part(p)
        own[n + i] = grad_values(w.detach()).double().square().sum()
        sums[n + i] = own[n + i] * weight
        g = p.grad
        if g is None:
            meshes[i] = meshes[n + i]
            continue
        local, meshes[i], weight = local_part(g)
        v = grad_values(local).double()
        own[i] = v.square().sum()
        sums[i] = own[i] * weight
        maxes[i] = v.abs().max() if v.numel() else 0.0
    rows = torch.tensor(present, dtype=torch.long)
    mine = (own[rows].sqrt().float(), maxes[rows].float(), own[n + rows].sqrt().float())
    all_reduce_rows(meshes, sums, maxes)
    return sums[rows].sqrt().float(), maxes[rows].float(), sums[n + rows].sqrt().float(), mine


def reduce_update(index: ParamIndex, idx: list[int], wn: torch.Tensor,
                  delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-tensor weight and update norms from shard norms: squared, weighted, one ``SUM`` all-reduce
    over a buffer with a row per parameter (the same size on every rank)."""
    n = len(index.params)
    sums = torch.zeros(2 * n, dtype=torch.float64)
    meshes: list[Any] = [None] * (2 * n)
    for i in range(n):
        _, meshes[i], _ = local_part(index.params[i].detach())
        meshes[n + i] = meshes[i]
    rows = torch.tensor(idx, dtype=torch.long)
    weights = torch.tensor([local_part(index.params[i].detach())[2] for i in idx], dtype=torch.float64)
    sums[rows] = wn.double() ** 2 * weights
    sums[n + rows] = delta.double() ** 2 * weights
    all_reduce_rows(meshes, sums)
    return sums[rows].sqrt().float(), sums[n + rows].sqrt().float()


def ddp_ignored(model: nn.Module | None) -> set[str]:
    """Parameter names DDP was told not to synchronise (``_set_params_and_buffers_to_ignore_for_model``)."""
    ddp = getattr(sys.modules.get("torch.nn.parallel.distributed"), "DistributedDataParallel", None)
    if model is None or ddp is None:
        return set()
    out: set[str] = set()
    for prefix, m in model.named_modules():
        if isinstance(m, ddp):
            out |= {f"{prefix}.module.{n}" if prefix else f"module.{n}" for n in m.parameters_to_ignore}
    return out


def common_prefix(names: list[str]) -> str:
    """The longest dotted prefix shared by ``names`` (the module holding them), or "" (the model)."""
    parts = [n.split(".") for n in names]
    common: list[str] = []
    for column in zip(*parts, strict=False):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    return ".".join(common)

"""The clip as applied under sharding: did the norm a gradient clip divided by equal the true global norm?

Under FSDP2, HSDP and tensor parallel every rank holds pieces of the gradients. A clip must divide all of them
by the *global* norm. Two bugs are common and silent: a clip per shard (each rank divides by its own pieces'
norm: the ranks scale by different factors, and the model is clipped about √shards too little), and a norm
summed over replicas (HSDP's replicate dimension counted as more shards: the norm is √replicas too large, the
clip √replicas too strong).

Measured, not guessed: each in-place write that shrank the gradients between the last backward and the step
(:class:`~gradviz_nb.doctor.grad_edits.GradEdit`) gives this rank's factor and its pieces' norms before and
after; torch's clipping call gives its ``max_norm`` and the total norm it used. One ``all_gather_object`` per
diagnosis shares every rank's edits; the global norm after the clip is the doctor's full-tensor statistics at
the optimizer step (:mod:`gradviz_nb.probes.sharded`: reduced over each mesh dimension, replicas weighted).

* Factors that differ across ranks: a per-shard clip. The true global norm before it is the norm after it
  scaled back (``after * sqrt(sum before^2 / sum after^2)`` over the ranks); each rank's clip divided by its
  own pieces' norm, and the finding names the ratio global / used (exact when every piece is held by equally
  many ranks, as under FSDP2 and HSDP; within a few percent where tensor parallel replicates some parameters).
* One factor on every rank, from a torch clipping call: the global norm before it is ``after / factor``; a
  total norm that differs from it (by more than :data:`CLIP_RTOL`) while the clip bit is a wrong norm, named
  with its ratio (√replicas when replicas were counted as shards).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gradviz_nb.doctor.checks_grads import _amp, _edits, _fed, _is_unscale
from gradviz_nb.doctor.checks_steps import common_module
from gradviz_nb.doctor.findings import Finding
from gradviz_nb.doctor.grad_edits import GradEdit
from gradviz_nb.doctor.observe import StepRecord
from gradviz_nb.kinds import fix_for
from gradviz_nb.probes.sharded import is_dtensor

if TYPE_CHECKING:
    from gradviz_nb.doctor.checks import Observed

__all__ = ["CLIP_RTOL", "check_clip_norm", "ratio_name"]

CLIP_RTOL = 1e-3
"""A clip divides by ``total + 1e-6`` and reductions differ in order across ranks: closer than this is equal."""

Shrink = tuple[str, str, float, float, tuple[float, float] | None]  # line, who, before, after, (max_norm, used)


def _world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def ratio_name(ratio: float, world: int) -> str:
    """``"√k"`` (or ``"1/√k"``) when ``ratio`` is the square root of a rank count up to ``world`` (within 2%),
    else the number."""
    for k in range(2, world + 1):
        for value, text in ((math.sqrt(k), f"√{k}"), (1 / math.sqrt(k), f"1/√{k}")):
            if abs(ratio - value) <= 0.02 * value:
                return text
    return f"{ratio:.3g}"


def _shrinks(rec: StepRecord) -> list[list[Shrink]]:
    """Per optimizer step of this record: this rank's writes that shrank the gradients (not a zero_grad, not a
    GradScaler's unscale)."""
    out = []
    for step in rec.events.optimizer_steps:
        amp = _amp(_fed(rec, step))
        edits: list[GradEdit] = [e for e in _edits(rec, step) if e.factor < 1 - 1e-9 and "zero_grad" not in e.api
                                 and not _is_unscale(e, amp)]
        merged: dict[str, Shrink] = {}
        for e in edits:  # a loop scaling each .grad is one clip: its writes touch distinct tensors
            line, who, before, after, clip = merged.get(e.line, (e.line, e.who, 0.0, 0.0, None))
            merged[e.line] = (line, who, math.hypot(before, e.before), math.hypot(after, e.after), clip or e.clip)
        out.append(list(merged.values()))
    return out


def _global_after(rec: StepRecord) -> float:
    """The full gradients' norm the optimizer step used (the doctor's statistics at the step)."""
    if rec.flow is None:
        return math.nan
    sq = [p.norm**2 for p in rec.flow.params if p.has_grad and math.isfinite(p.norm)]
    return math.sqrt(sum(sq)) if sq else math.nan


def check_clip_norm(obs: Observed) -> list[Finding]:
    """A clip whose norm was not the global one (per shard, or summed over replicas), under torch.distributed
    with ``DTensor`` parameters; one collective per diagnosis, on every rank."""
    rank, world = _world()
    if world < 2 or not any(is_dtensor(p) for p in obs.model.parameters()):
        return []
    import torch.distributed as dist

    mine = [_shrinks(rec) for rec in obs.records]
    every: list[Any] = [None] * world
    dist.all_gather_object(every, mine)
    out: list[Finding] = []
    for i, rec in enumerate(obs.records):
        for s, step in enumerate(rec.events.optimizer_steps):
            lines = dict.fromkeys(sh[0] for r in every for sh in r[i][s])
            for line in lines:
                found = _judge(rec, step.label, line, [next((sh for sh in r[i][s] if sh[0] == line), None)
                                                       for r in every], rank, world)
                if found is not None and all(f.kind != found.kind for f in out):
                    out.append(found)
    return out


def _judge(rec: StepRecord, label: str, line: str, per_rank: list[Shrink | None], rank: int,
           world: int) -> Finding | None:
    """One clipping line: every rank's write there (None: that rank's gradients kept their size)."""
    factors = [1.0 if sh is None else sh[3] / sh[2] for sh in per_rank]
    after = _global_after(rec)
    own = per_rank[rank]
    if own is None or not math.isfinite(after) or after <= 0:
        return None
    names = [n for p in rec.flow.params for n in p.names] if rec.flow is not None else []
    target = common_module(names) if names else "(model)"
    who = own[1]
    if max(factors) > min(factors) * (1 + CLIP_RTOL):
        if any(sh is None for sh in per_rank):
            return None  # a rank the clip left alone: its pieces' norms are unknown here
        before_sq = sum(sh[2] ** 2 for sh in per_rank if sh is not None)
        after_sq = sum(sh[3] ** 2 for sh in per_rank if sh is not None)
        truth = after * math.sqrt(before_sq / after_sq)
        ratio = truth / own[2]
        spread = ", ".join(f"{f:.4g}" for f in factors)
        return Finding(
            "clip-norm", target, f"{who} clipped each rank's shard by its own norm, not the global one: the "
            f"global norm is {ratio_name(ratio, world)} ({ratio:.4g}x) the norm rank {rank} divided by",
            f"at step {rec.index}, between backward and {label}.step(), the {world} ranks scaled their gradient "
            f"pieces by different factors ({spread}); rank {rank}'s pieces had norm {own[2]:.4g} where the full "
            f"gradients' norm was {truth:.4g}; after the clip the full gradients' norm is {after:.4g}, so the model "
            "is clipped less than asked, and unevenly across shards", fix_for("clip-norm"), rec.index)
    if own[4] is None:
        return None  # a hand-written clip with one factor everywhere: its threshold is unknown here
    max_norm, used = own[4]
    truth = after / factors[rank]
    ratio = used / truth
    if used <= max_norm or abs(ratio - 1) <= CLIP_RTOL:
        return None
    what = "counted replicas as more shards" if ratio > 1 else "missed part of the gradients"
    return Finding(
        "clip-norm", target, f"{who} divided by a total norm {ratio_name(ratio, world)} ({ratio:.4g}x) the "
        f"true global norm: it {what}",
        f"at step {rec.index}, the clip used total norm {used:.4g} with max_norm {max_norm:.4g}; the full gradients' "
        f"norm before it was {truth:.4g} (after it {after:.4g}, where a global clip leaves {max_norm:.4g}), so "
        f"the step used gradients {1 / ratio:.4g}x the size the clip meant", fix_for("clip-norm"), rec.index)

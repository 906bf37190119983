"""Checks on what the optimizer's step really used: gradients changed between backward and step (clipped,
unscaled, edited), a loss weight that leaves nothing, ``zero_grad()`` inside an accumulation loop, and
learning rates as the steps used them.

Each reads :class:`~gradviz_nb.doctor.steps.StepEvents`: the :class:`~gradviz_nb.doctor.grad_edits.GradEdit`
log (the factor each in-place write into gradients had, measured in float64, with the user's line), the
loss scales each backward saw, and each optimizer step's learning rates at the moment it stepped.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gradviz_nb.doctor.checks_steps import common_module
from gradviz_nb.doctor.findings import Finding
from gradviz_nb.doctor.grad_edits import GradEdit
from gradviz_nb.doctor.observe import StepRecord
from gradviz_nb.doctor.step_events import Backward, OptimizerStep
from gradviz_nb.kinds import fix_for

if TYPE_CHECKING:
    from gradviz_nb.doctor.checks import Observed

__all__ = [
    "GONE",
    "check_grad_edits",
    "check_loss_weight",
    "check_lr_zero",
    "check_zero_grad_in_accumulation",
    "edited_away",
    "explained_by_step",
]

GONE = 1e-6  # a change that leaves at most this fraction of a gradient's norm leaves nothing


def _g(x: float) -> str:
    return f"{x:.3g}"


def _fed(rec: StepRecord, step: OptimizerStep) -> list[Backward]:
    """The backwards after this optimizer's previous step that fed a tensor it holds."""
    ev = rec.events
    start = max((s.order for s in ev.optimizer_steps if s.key == step.key and s.order < step.order), default=0)
    held = set(step.lr_all)
    return [b for b in ev.backwards if start < b.order < step.order and set(b.contrib) & held]


def _edits(rec: StepRecord, step: OptimizerStep) -> list[GradEdit]:
    """Writes into gradients this step holds, after the last backward that fed it and before it."""
    fed = _fed(rec, step)
    if not fed:
        return []
    held = set(step.lr_all)
    return [e for e in rec.events.edits if fed[-1].order < e.order < step.order and e.names & held]


def edited_away(rec: StepRecord) -> set[str]:
    """Tensors whose gradient a recorded write (not a ``zero_grad()``) left at nothing before a step."""
    return {n for e in rec.events.edits if e.factor <= GONE and "zero_grad" not in e.api for n in e.names}


def _amp(fed: list[Backward]) -> float:
    amps = [b.amp for b in fed if math.isfinite(b.amp) and b.amp > 1]
    return max(amps) if amps else 1.0


def check_grad_edits(obs: Observed) -> list[Finding]:
    """A write between backward and step that leaves nothing (clipping to zero, a hand-written scale), a
    shrinking write while a loss scale is still in the gradients, and a step that never undid the scale."""
    out: list[Finding] = []
    done: set[tuple[str, str]] = set()
    for rec in obs.records:
        for step in rec.events.optimizer_steps:
            edits, amp = _edits(rec, step), _amp(_fed(rec, step))
            for f in _scale_findings(rec, step, edits, amp) + _gone_findings(rec, step, edits, amp):
                if (f.kind, f.target) not in done:
                    done.add((f.kind, f.target))
                    out.append(f)
    return out


def _is_unscale(e: GradEdit, amp: float) -> bool:
    return abs(e.factor * amp - 1) < 1e-3


def _scale_findings(rec: StepRecord, step: OptimizerStep, edits: list[GradEdit], amp: float) -> list[Finding]:
    if amp <= 1:
        return []
    unscale = next((e for e in edits if _is_unscale(e, amp)), None)
    before = [e for e in edits if (unscale is None or e.order < unscale.order) and e.factor < 1 - 1e-6
              and not _is_unscale(e, amp) and "zero_grad" not in e.api]
    names = sorted(set(step.lr_all))
    if before:
        e = before[0]
        return [Finding(
            "clip-before-unscale", common_module(e.names), f"{e.who} shrank the gradients while they were still "
            f"multiplied by the loss scale {_g(amp)}", f"at step {rec.index}, backward ran on a loss multiplied by "
            f"{_g(amp)} (a GradScaler's scale); {e.who} then scaled {len(e.names)} gradients by {_g(e.factor)} "
            f"(norm {_g(e.before)} -> {_g(e.after)}, a threshold meant for unscaled gradients), and only "
            f"{'after that ' + unscale.who + ' divided by the scale' if unscale else 'no unscale followed'}: the step "
            f"used gradients {_g(e.factor * amp)}x their unscaled, unclipped size",
            fix_for("clip-before-unscale"), rec.index)]
    moved = [n for n in names if step.update.get(n, 0.0) > 0]
    if unscale is None and moved:
        return [Finding(
            "unscaled-step", common_module(moved), f"{step.label}.step() used gradients still multiplied by the loss "
            f"scale {_g(amp)}", f"at step {rec.index}, backward ran on a loss multiplied by {_g(amp)}; nothing divided "
            f"the gradients by it before {step.label}.step(), which moved {len(moved)} parameters with them",
            fix_for("unscaled-step"), rec.index)]
    return []


def _gone_findings(rec: StepRecord, step: OptimizerStep, edits: list[GradEdit], amp: float) -> list[Finding]:
    out = []
    for e in edits:
        if e.factor > GONE or "zero_grad" in e.api or _is_unscale(e, amp):
            continue
        clip = "clip" in (e.api or e.op).lower()  # wording only: the factor decided
        out.append(Finding(
            "clipped-away" if clip else "grad-edited", common_module(e.names),
            f"{e.who} left {'nothing' if e.after == 0 else 'a vanishing fraction'} of the gradients before "
            f"{step.label}.step()", f"at step {rec.index}, between the last backward and {step.label}.step(), "
            f"{e.who} scaled {len(e.names)} gradients by {_g(e.factor)} (norm {_g(e.before)} -> {_g(e.after)}), "
            "so the step used none of what backward computed",
            fix_for("clipped-away") if clip
            else f"remove the edit of .grad at {e.line or 'that line'} (or make it keep the gradient)",
            rec.index))
    return out


def check_loss_weight(obs: Observed) -> list[Finding]:
    """A backward whose whole loss was multiplied by zero or a vanishing number on its way to ``backward()``."""
    for rec in obs.records:
        for b in rec.events.backwards:
            if b.scale > GONE or not b.scale_lines:
                continue
            big = max(b.contrib.values(), default=0.0)
            return [Finding(
                "loss-weight", "(model)", f"the loss was multiplied by {_g(b.scale)} before backward(), so its "
                "gradients are " + ("zero" if b.scale == 0 else "vanishing"), f"at step {rec.index}, backward "
                f"#{b.index + 1} ran on a loss multiplied by {_g(b.scale)} (at {', '.join(b.scale_lines)}); the "
                f"largest gradient it gave any tensor has norm {_g(big)}", fix_for("loss-weight"), rec.index)]
    return []


def check_zero_grad_in_accumulation(obs: Observed) -> list[Finding]:
    """A backward that found gradients an earlier backward of the same step had fed, not yet stepped, cleared:
    a ``zero_grad()`` inside the accumulation loop, so the step used only the last micro-batches."""
    for rec in obs.records:
        ev = rec.events
        for step in ev.optimizer_steps:
            held = set(step.lr_all)
            for b in _fed(rec, step):
                lost = sorted(b.cleared & held)
                if not lost:
                    continue
                zero = next((z for z in reversed(ev.zeros) if z.order < b.order), None)
                who = f"{zero.who}{f' at {zero.line}' if zero.line else ''}" if zero else "a write of .grad"
                k = len(_fed(rec, step))
                return [Finding(
                    "zero-grad-in-accumulation", common_module(lost), f"{who} ran inside the accumulation loop: "
                    f"{step.label}.step() used only the last of {k} backwards", f"at step {rec.index}, {k} backwards "
                    f"fed {step.label}.step(); before backward #{b.index + 1}, the gradients an earlier one had given "
                    f"{len(lost)} tensors (e.g. {lost[0]}) were cleared by {who}, before any step used them",
                    fix_for("zero-grad-in-accumulation"), rec.index)]
    return []


def check_lr_zero(obs: Observed) -> list[Finding]:
    """Tensors every observed step of their optimizer stepped with learning rate 0 (judged on the rates the
    steps used: a warmup from 0 whose later steps move is healthy)."""
    used: dict[str, list[float]] = {}
    label: dict[str, OptimizerStep] = {}
    graded: set[str] = set()  # had a gradient to step with (a frozen group at lr 0 is a design, not a bug)
    for rec in obs.records:
        for step in rec.events.optimizer_steps:
            graded |= set(step.grad) | set(step.zeroed)
            for n, lr in step.lr_all.items():
                used.setdefault(n, []).append(lr)
                label.setdefault(n, step)
    zero = sorted(n for n, lrs in used.items() if n in graded and lrs and all(lr == 0 for lr in lrs)
                  and not n.endswith("(original)"))
    if not zero:
        return []
    step = label[zero[0]]
    opt = obs.seen.known.get(step.key) or obs.records[-1].events.optimizers.get(step.key)
    now = [float(g.get("lr", 0.0)) for g in opt.param_groups] if opt is not None else []
    only_inside = any(lr > 0 for lr in now)
    return [Finding(
        "lr-zero", common_module(zero), f"every {step.label}.step() observed used learning rate 0"
        + (", though its param groups read a non-zero lr outside the step" if only_inside else ""),
        f"over {len(used[zero[0]])} steps, the learning rate at the moment {step.label} stepped {len(zero)} "
        f"tensors (e.g. {zero[0]}) was 0" + (f"; outside the step the groups read lr {', '.join(map(_g, now))}"
                                               if only_inside else ""),
        fix_for("lr-zero"), 1)]


_CAUSES = ("unscaled-step", "loss-weight", "clipped-away", "grad-edited", "clip-before-unscale")
_SIZES = ("exploding", "vanishing", "spike")


def explained_by_step(findings: list[Finding]) -> list[Finding]:
    """Size findings (exploding, vanishing, spike) under a target whose gradient size a step finding measured
    the cause of (a loss scale never undone, a zero loss weight, clipping to nothing): the cause stays."""
    causes = [f.target for f in findings if f.kind in _CAUSES]

    def under(target: str) -> bool:
        return any(c in ("", "(model)") or target == c or target.startswith(c + ".") for c in causes)

    return [f for f in findings if f.kind not in _SIZES or not under(f.target)]

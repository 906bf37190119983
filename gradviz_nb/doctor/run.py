"""``gv.doctor`` itself: the steps observed, the state put back, the checks run (see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gradviz_nb.doctor.checks import CHECKS, Observed
from gradviz_nb.doctor.checks_grads import explained_by_step
from gradviz_nb.doctor.findings import Diagnosis, Finding
from gradviz_nb.doctor.nan_origin import nan_origin
from gradviz_nb.doctor.observe import Sightings, StepRecord, observe_step
from gradviz_nb.doctor.registration import unregistered
from gradviz_nb.doctor.state import TrainingState
from gradviz_nb.doctor.step_events import used_grads
from gradviz_nb.doctor.zero_replay import replay_zeros
from gradviz_nb.errors import GradvizError
from gradviz_nb.kinds import rank
from gradviz_nb.probes.sandbox import Snapshot
from gradviz_nb.tracing.compiled import unwrap_compiled
from gradviz_nb.validate import boolean, not_meta, positive_int

__all__ = ["MAX_STEPS", "diagnose", "doctor", "grad_norms", "moved_in"]


def doctor(step: Callable[[], Any], model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
           steps: int = 2, restore: bool = True) -> Diagnosis:
    """Run ``step()`` (one training step exactly as your loop does it) ``steps`` times and diagnose it.

    ``optimizer``: the loop's optimizer, so that parameters it misses, holds frozen or never moves are
    told apart by fact. With ``restore=True`` the parameters, buffers, optimizer state, RNG states,
    ``.grad``, ``requires_grad`` and training modes are put back afterwards, also when ``step`` raises
    (an error other than an in-place one is then raised again).

    Example::

        def step():
            opt.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            opt.step()

        dx = gv.doctor(step, model, opt)
        dx.ok, dx.findings          # [Finding(kind="not-in-optimizer", target="head.bias", ...)]
        print(dx.summary())
    """
    _check(step, model, optimizer, steps)
    boolean("restore", restore)
    not_meta("gv.doctor", model)
    model = unwrap_compiled(model)  # torch.compile(model): same parameters, named without "_orig_mod."
    saved = TrainingState.save(model, optimizer)
    records: list[StepRecord] = []
    origin: Finding | None = None
    extras: list[Snapshot] = []  # optimizers and schedulers the step touches that were not passed in
    seen = _sightings(step, model, optimizer, extras)
    try:
        for i in range(1, steps + 1):
            # the snapshot holds the parameters as the first step finds them: no second copy for it
            values = saved.params if i == 1 and saved.untouched() else None
            records.append(observe_step(step, model, optimizer, i, records[-1] if records else None, seen, values))
            if records[-1].error is not None:
                break
        if restore:  # a zero or tiny gradient: where the backward lost it, measured in a replay of that step
            replay_zeros(step, model, records, lambda: _rewind(extras, saved))
        bad = next((r for r in records if _nonfinite(r)), None)
        if bad is not None and restore:
            origin = nan_origin(step, model, saved, bad)
    finally:
        if restore:
            _restore(extras, saved)
    failed = records[-1].error if records else None
    findings = diagnose(records, model, optimizer, seen)
    if origin is not None:  # the birth explains every NaN gradient downstream of it
        findings = [origin, *(f for f in findings if f.kind != "nan")]
    if failed is not None and not any(f.kind == "inplace" for f in findings):
        raise failed
    notes = [] if any(r.backwards for r in records) else [
        "the step ran no backward (no loss.backward()): only the model's structure was checked"]
    first = next((r for r in records if r.graph is not None), None)
    return Diagnosis(findings, len(records), restore, first.graph if first else None, notes, moved_in(records),
                     grad_norms(records), used_grads([r.events for r in records]))


def moved_in(records: list[StepRecord]) -> frozenset[str]:
    """The parameters whose value changed in any observed step."""
    return frozenset().union(*(r.moved for r in records))


def grad_norms(records: list[StepRecord]) -> dict[str, float | None]:
    """Each parameter's gradient norm in the first step that ran a backward (None: it had no gradient)."""
    first = next((r for r in records if r.flow is not None), None)
    if first is None or first.flow is None:
        return {}
    return {n: (p.norm if p.has_grad else None) for p in first.flow.params for n in p.names}


def _sightings(step: Callable[[], Any], model: nn.Module, optimizer: torch.optim.Optimizer | None,
               extras: list[Snapshot]) -> Sightings:
    """Names for the optimizers the step's variables hold, and a snapshot of each optimizer or scheduler the
    step touches that the doctor was not given, taken before its first touch."""
    done: set[int] = {id(optimizer)} if optimizer is not None else set()

    def on_sight(obj: object) -> None:
        if id(obj) in done:
            return
        done.add(id(obj))
        if isinstance(obj, torch.optim.Optimizer):
            mine = {id(p) for p in model.parameters()}
            outside = [p for g in obj.param_groups for p in g["params"] if id(p) not in mine]
            extras.append(Snapshot(None, obj, tensors=outside))
        else:
            extras.append(Snapshot(None, schedulers=[obj]))

    extra = {n: t for u in unregistered(model) for n, t in u.tensors.items()}
    return Sightings(_variable_names(step), {}, on_sight, extra)


def _variable_names(step: Callable[[], Any]) -> dict[int, str]:
    """``id(object) -> name`` for what ``step`` reads from its closure and its module's globals."""
    code = getattr(step, "__code__", None)
    if code is None:
        return {}
    out: dict[int, str] = {}
    for name, cell in zip(code.co_freevars, getattr(step, "__closure__", None) or (), strict=False):
        try:
            out.setdefault(id(cell.cell_contents), name)
        except ValueError:  # an empty cell
            continue
    glob = getattr(step, "__globals__", {})
    for name in code.co_names:
        if name in glob:
            out.setdefault(id(glob[name]), name)
    return out


def _restore(extras: list[Snapshot], saved: TrainingState) -> None:
    """The late snapshots first (newest first), then the doctor's own, which puts every global back last."""
    try:
        for snap in reversed(extras):
            snap.restore()
    finally:
        saved.restore()
        for snap in extras:
            snap.release()


def _rewind(extras: list[Snapshot], saved: TrainingState) -> None:
    """Back to the state before the first step, the snapshots kept for the final restore."""
    for snap in reversed(extras):
        snap.restore()
    saved.restore()


def _nonfinite(rec: StepRecord) -> bool:
    loss_bad = rec.loss is not None and not math.isfinite(rec.loss)
    return loss_bad or (rec.flow is not None and any(p.nonfinite for p in rec.flow.params))


MAX_STEPS = 1000  # the doctor runs the user's step this many times at most


def _check(step: object, model: object, optimizer: object, steps: int) -> None:
    if not callable(step):
        raise GradvizError(f"step must be a function running one training step, got {type(step).__name__}: "
                           "def step(): opt.zero_grad(); loss = ...; loss.backward(); opt.step()")
    if not isinstance(model, nn.Module):
        raise GradvizError(f"model must be an nn.Module, got {type(model).__name__}.")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise GradvizError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}.")
    positive_int("steps", steps, hi=MAX_STEPS, hint="2 lets stale gradients show; more is a training run.")


def diagnose(records: list[StepRecord], model: nn.Module, optimizer: torch.optim.Optimizer | None,
             seen: Sightings) -> list[Finding]:
    """Every check of :data:`~gradviz_nb.doctor.checks.CHECKS` over the observed steps, one finding per kind and
    target, worst first."""
    observed = Observed(records, model, optimizer, seen)
    found = [finding for check in CHECKS for finding in check(observed)]
    unique = {(f.kind, f.target): f for f in found}
    return sorted(explained_by_step(list(unique.values())), key=lambda f: (rank(f.kind), f.step))

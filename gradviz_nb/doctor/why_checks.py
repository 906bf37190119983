"""The doctor's findings for missing, zero, tiny and cut gradients, each explained by :mod:`gv.why
<gradviz_nb.doctor.why>` from the step's graph and capture.

``no_grad_finding``: a parameter gradient_flow saw without ``.grad``. ``check_causes``: parameters whose
gradient is exactly zero or tiny, or whose module output was detached while a penalty term still reaches
them; a parameter is reported only when why names a cause from evidence (a zero-derivative op, a
saturated activation with its measured fraction, a hook measured zeroing it, a custom backward, a cut),
never for a small gradient it cannot explain. Parameters with one cause share one finding, on the module
that holds exactly them.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from gradviz_nb.doctor.findings import Finding
from gradviz_nb.doctor.why import Why, analyse, remember
from gradviz_nb.kinds import fix_for
from gradviz_nb.probes.causes import TINY
from gradviz_nb.probes.flow import Flag

if TYPE_CHECKING:
    from gradviz_nb.doctor.checks import Observed
    from gradviz_nb.doctor.observe import StepRecord

__all__ = ["candidates", "cause_findings", "check_causes", "explained", "no_grad_finding"]

UNUSED = ("requires grad but got no gradient from this step's loss (DistributedDataParallel would fail with "
          "find_unused_parameters=False)")


def step_why(rec: StepRecord, name: str, status: tuple[str, str]) -> Why:
    """Why for one parameter of an observed step (its graph, its capture's evidence, the model)."""
    cap = rec.cap
    model = cap.model if cap is not None else None
    lines = {c.seq: c.line for c in rec.events.calls.values() if c.seq is not None and c.line}  # custom Functions
    w = analyse(name, graph=rec.graph, model=model, cap=cap, status=status, lines=lines or None)
    remember(rec.graph, w)
    return w


def _measured(rec: StepRecord, name: str, status: tuple[str, str]) -> Why | None:
    """The Why the doctor's zero replay measured for ``name`` (:mod:`gradviz_nb.doctor.zero_replay`), when the
    replay saw the same status as the step."""
    w = rec.measured.get(name)
    if w is None or w.status != status[0]:
        return None
    remember(rec.graph, w)
    return w


def no_grad_finding(rec: StepRecord, f: Flag) -> Finding:
    """A parameter gradient_flow saw with ``.grad`` None after the step's backward."""
    w = step_why(rec, f.target, ("none", ".grad is None after the step's backward"))
    if w.kind is None or w.kind in ("unused-parameter", "vanishing"):
        return Finding("unused-parameter", f.target, UNUSED, f"{w.cause}; {w.evidence}",
                       fix_for("unused-parameter"), rec.index, w.node)
    return Finding(w.kind, f.target, w.cause, w.evidence, w.fix, rec.index, w.node)


def candidates(rec: StepRecord) -> dict[str, tuple[str, str]]:
    """Parameters with a zero or tiny gradient, or cut by a recorded detach that was used again."""
    assert rec.flow is not None
    flagged = {n for f in rec.flow.flags if f.kind in ("no-grad", "nan") for n in f.params}
    cut = {n for e in (rec.cap.evidence if rec.cap is not None else [])
           if e.kind in ("detached", "data-access") and e.targets for n in e.cut}
    out: dict[str, tuple[str, str]] = {}
    for p in rec.flow.params:
        if not p.requires_grad or not p.has_grad or p.nonfinite or p.name in flagged:
            continue
        ratio = p.norm / p.weight_norm if p.weight_norm else (0.0 if p.norm == 0 else 1.0)
        if p.norm == 0:
            out[p.name] = ("zero", f"every one of its {p.numel:,} gradient values is exactly 0")
        elif ratio < TINY:
            out[p.name] = ("tiny", f"|grad| = {p.norm:.3g} against |weight| = {p.weight_norm:.3g}")
        elif p.name in cut:
            out[p.name] = ("ok", f"|grad| = {p.norm:.3g}")
    return out


_CACHE: dict[int, tuple[weakref.ref[StepRecord], list[Finding]]] = {}


def cause_findings(rec: StepRecord) -> list[Finding]:
    """The findings for one step (computed once per record: the flow check asks which layers they explain)."""
    hit = _CACHE.get(id(rec))
    if hit is not None and hit[0]() is rec:
        return hit[1]
    found = _cause_findings(rec)
    for key in [k for k, (ref, _) in _CACHE.items() if ref() is None]:
        del _CACHE[key]
    _CACHE[id(rec)] = (weakref.ref(rec), found)
    return found


def explained(rec: StepRecord, flag: Flag) -> bool:
    """A layer's vanishing flag whose every parameter has a zero or tiny gradient why explained."""
    if flag.kind not in ("vanishing", "dead-adapter") or rec.flow is None:
        return False
    covered = {w.name for w in _whys(rec)}
    if flag.kind == "dead-adapter":  # an adapter whose parameter why found a cause for: that cause is the finding
        return bool(covered & set(flag.params))
    under = [p.name for p in rec.flow.params if p.requires_grad and (
        not flag.target or p.name == flag.target or p.name.startswith(flag.target + "."))]
    return bool(under) and set(under) <= covered


def _whys(rec: StepRecord) -> list[Why]:
    cause_findings(rec)
    return [w for w in _STEP_WHYS.get(id(rec), [])]


_STEP_WHYS: dict[int, list[Why]] = {}


def _cause_findings(rec: StepRecord) -> list[Finding]:
    if rec.flow is None or rec.graph is None:
        return []
    whys = [_measured(rec, name, status) or step_why(rec, name, status) for name, status in candidates(rec).items()]
    groups: dict[tuple[str, str], list[Why]] = {}
    for w in whys:
        if w.kind is not None and w.kind != "vanishing":
            groups.setdefault((w.kind, w.cause), []).append(w)
    for key in [k for k in _STEP_WHYS if k not in _CACHE]:
        del _STEP_WHYS[key]
    _STEP_WHYS[id(rec)] = [w for ws in groups.values() for w in ws]
    model = rec.cap.model if rec.cap is not None else None
    names = [n for n, _ in model.named_parameters()] if model is not None else []
    out = []
    for (_, cause), ws in groups.items():
        target = _holder([w.name for w in ws], names)
        first = ws[0]
        evidence = first.evidence if len(ws) == 1 else f"{first.evidence} (and the same for {len(ws) - 1} more)"
        for t in ([target] if target else [w.name for w in ws]):
            out.append(Finding(first.kind or "vanishing", t, cause, evidence, first.fix, rec.index, first.node))
    return out


def _holder(affected: list[str], names: list[str]) -> str:
    """The deepest module whose parameters are exactly ``affected`` ("" when none, or just one parameter)."""
    if len(affected) < 2:
        return ""
    parts = [n.split(".")[:-1] for n in affected]
    prefix: list[str] = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        prefix.append(level[0])
    path = ".".join(prefix)
    under = {n for n in names if not path or n.startswith(path + ".")}
    return path if path and under == set(affected) else ""


def check_causes(obs: Observed) -> list[Finding]:
    """Zero, tiny and cut gradients of the first step with gradient statistics, each with its cause."""
    first = next((r for r in obs.records if r.flow is not None), None)
    return cause_findings(first) if first is not None else []

"""Analysis and probe results -> page data: the one place that knows both a result's fields and the
page contract (``js/src/payload.ts``, typed in :mod:`~gradviz_nb.widgets.page.contract`). Analyses
return plain results; these functions make them page data. Example::

    from gradviz_nb.widgets import page
    page.recording(gv.record_backward(loss))      # Recording (the stepper)
    page.diff(gv.diff(before, after))             # GraphDiff (draw it on d.merged())
    page.overlay(gv.memory_held(g), encoding="color")
    page.overlay(flow, graph=g)                   # a GradientFlow needs the graph it is drawn on
    page.findings(gv.doctor(step, model=m))       # list[DoctorFinding]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any, Literal, cast

from gradviz_nb.analysis.diff import REMOVED_PREFIX, GraphDiff
from gradviz_nb.analysis.memory import OVERLAY_TITLE as MEMORY_TITLE
from gradviz_nb.analysis.memory import MemoryReport
from gradviz_nb.doctor.findings import Diagnosis
from gradviz_nb.errors import GradvizError
from gradviz_nb.kinds import KINDS, Kind
from gradviz_nb.probes.backward import SMALL, BackwardRecording, GradStats, Step, as_list
from gradviz_nb.probes.flow import GradientFlow, ParamStats
from gradviz_nb.probes.gradcheck import OVERLAY_TITLE as GRADCHECK_TITLE
from gradviz_nb.probes.gradcheck import GradCheck
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.widgets.page.contract import (
    DiffStatus,
    DoctorFinding,
    Mark,
    Overlay,
    OverlayRow,
    RecordedGrad,
    RecordedStep,
    Recording,
)
from gradviz_nb.widgets.page.contract import GraphDiff as GraphDiffPage

Encoding = Literal["color", "size"]


def recorded_grad(stats: GradStats) -> RecordedGrad:
    """One gradient's ``RecordedGrad``: statistics always, the flat values only for small tensors."""
    small = stats.value if stats.value is not None and stats.value.numel() <= SMALL else None
    return {"shape": stats.shape, "norm": stats.norm, "mean": stats.mean, "max_abs": stats.max_abs,
            "nonfinite": stats.nonfinite, "value": as_list(small) if small is not None else None}


def _grads(items: list[GradStats | None]) -> list[RecordedGrad | None]:
    return [recorded_grad(g) if g is not None else None for g in items]


def recorded_step(rec: BackwardRecording, s: Step) -> RecordedStep:
    """One engine step as the stepper shows it, with its derivative lines (``rec.explain``)."""
    return {
        "node": s.node, "op": s.op, "pass": s.pass_index, "received": _grads(s.grad_outputs),
        "sent": _grads(s.grad_inputs), "deliveries": [(d.target, d.output_nr, d.input_nr) for d in s.deliveries],
        "leaf_before": recorded_grad(s.leaf_before) if s.leaf_before else None,
        "leaf_after": recorded_grad(s.leaf_after) if s.leaf_after else None, "explain": rec.explain(s),
    }


def recording(rec: BackwardRecording) -> Recording:
    """The stepper's ``Recording`` for a :func:`gv.record_backward` result (trait ``recording``)."""
    out: Recording = {"passes": rec.passes, "steps": [recorded_step(rec, s) for s in rec.steps], "values": rec.values}
    if rec.forward_text:
        out["forward"] = rec.forward_text
    return out


def diff(d: GraphDiff) -> GraphDiffPage:
    """The diff view's ``GraphDiff`` (trait ``diff``), drawn over ``d.merged()`` (trait ``graph_data``)."""
    status: dict[str, DiffStatus] = {n: "added" for n in d.added}
    status.update({a: "same" for _, a in d.same})
    status.update({c.after: "changed" for c in d.changed})
    status.update({REMOVED_PREFIX + n: "removed" for n in d.removed})
    before, after = d.memory_before, d.memory_after
    mem_b = before.per_node if before is not None and after is not None else {}
    mem_a = after.per_node if before is not None and after is not None else {}
    after_of = {b: a for b, a in d.same} | {c.before: c.after for c in d.changed}
    memory = {a: (mem_b.get(b, 0), mem_a.get(a, 0)) for b, a in after_of.items() if mem_b.get(b, 0) != mem_a.get(a, 0)}
    memory.update({n: (0, mem_a[n]) for n in d.added if mem_a.get(n)})
    memory.update({REMOVED_PREFIX + n: (mem_b[n], 0) for n in d.removed if mem_b.get(n)})
    return {
        "status": status,
        "why": {c.after: c.why for c in d.changed},
        "added_leaves": d.added_leaves,
        "removed_leaves": d.removed_leaves,
        "gained": d.gained,
        "lost": d.lost,
        "hidden": d.hidden,
        "memory": memory,
        "memory_total": (before.activations, after.activations) if before is not None and after is not None else (0, 0),
        "summary": d.summary(),
    }


def findings(diagnosis: Diagnosis) -> list[DoctorFinding]:
    """The doctor's findings as the page lists them (trait ``findings``), each with its kind's ``scope``
    from the registry (:mod:`gradviz_nb.kinds`): the page keeps no list of kinds of its own."""
    return [with_scope(asdict(f)) for f in diagnosis.findings]


def with_scope(finding: Mapping[str, Any]) -> DoctorFinding:
    """A finding record with its kind's ``scope`` (``""`` for a kind the registry does not know) unless it
    carries one."""
    info = KINDS.get(cast(Kind, finding.get("kind", "")))
    return cast(DoctorFinding, {"scope": info.scope if info is not None else "", **finding})


def memory_overlay(mem: MemoryReport, encoding: Encoding = "size") -> Overlay:
    """Nodes and boxes drawn by the bytes they keep alive for backward (log scale, unit B)."""
    values: dict[str, int | float] = {n: float(b) for n, b in mem.per_node.items() if b > 0}
    values.update({f"call:{c}": float(b) for c, b in mem.per_call.items() if c and b > 0})
    return {"title": MEMORY_TITLE, "values": values, "scale": "log", "encoding": encoding, "marks": {}, "unit": "B"}


def _flow_value(norm: float) -> str:
    return f"{norm:.3g}" if math.isfinite(norm) else str(norm)


def flow_row_text(p: ParamStats) -> str:
    """One parameter's numbers in a box's details, each named for what it is: the gradient's L2 norm (or
    "no gradient"), then the weight's own L2 norm, so a gradient norm is never read as the weight."""
    grad = f"grad norm {_flow_value(p.norm)}" if p.has_grad else "no gradient"
    nonfinite = f" · {p.nonfinite} non-finite" if p.nonfinite else ""
    weight = "weight all zero" if p.weight_norm == 0 else f"weight norm {_flow_value(p.weight_norm)}"
    return f"{grad}{nonfinite} · {weight}"


def flow_detail(flow: GradientFlow, graph: AutogradGraph) -> dict[str, list[OverlayRow]]:
    """Each module box's parameters (``"call:<id>"`` -> one row per parameter directly or further inside:
    its name relative to the module and its gradient norm, or why it has none), largest norm first."""
    detail: dict[str, list[OverlayRow]] = {}
    for call in graph.calls:
        path = call["path"]
        inside = [p for p in flow.params if path == "" or p.module == path or p.module.startswith(path + ".")]
        if not inside:
            continue
        inside.sort(key=lambda p: (not p.has_grad, -(p.norm if math.isfinite(p.norm) else math.inf), p.name))
        rows: list[OverlayRow] = []
        for p in inside:
            name = p.name[len(path) + 1:] if path and p.name.startswith(path + ".") else p.name
            rows.append((name, flow_row_text(p)))
        detail[f"call:{call['id']}"] = rows
    return detail


def flow_overlay(flow: GradientFlow, graph: AutogradGraph) -> Overlay:
    """Gradient norms of a :func:`gv.gradient_flow` on ``graph``: leaves get their parameter's norm, module
    boxes (``"call:<id>"``) their module's, and each box lists its parameters' norms (``detail``); marks
    ``no-grad`` (no gradient), ``nan`` (NaN/Inf), ``flag`` (vanishing, exploding, dead adapter)."""
    values: dict[str, int | float] = {}
    marks: dict[str, Mark] = {}
    flagged_paths = {f.target for f in flow.flags if f.kind in ("vanishing", "exploding", "dead-adapter")}
    flagged_params = {n for f in flow.flags if f.kind == "dead-adapter" for n in f.params}
    leaves = graph.leaves()
    for p in flow.params:
        node = next((leaves[n] for n in p.names if n in leaves), None)
        if node is None:
            continue
        if not p.has_grad:
            marks[node] = "no-grad"
            continue
        if math.isfinite(p.norm):
            values[node] = p.norm
        if p.nonfinite:
            marks[node] = "nan"
        elif p.module in flagged_paths or any(n in flagged_params for n in p.names):
            marks[node] = "flag"
    by_path = {m.path: m for m in flow.modules}
    for call in graph.calls:
        m = by_path.get(call["path"])
        if m is None or not m.n_with_grad:
            continue
        if math.isfinite(m.norm):  # marks are per node id in the contract: a box shows its members' marks
            values[f"call:{call['id']}"] = m.norm
    return {"title": "gradient L2 norm", "values": values, "scale": "log", "encoding": "color", "marks": marks,
            "unit": "", "detail": flow_detail(flow, graph)}


def gradcheck_overlay(res: GradCheck) -> Overlay:
    """Nodes whose backward disagrees with finite differences, flagged and coloured by relative error."""
    return {"title": GRADCHECK_TITLE, "values": {w.node: w.rel_error for w in res.wrong}, "scale": "log",
            "encoding": "color", "marks": {w.node: "flag" for w in res.wrong}, "unit": ""}


def findings_overlay(diagnosis: Diagnosis) -> Overlay:
    """Every node or box that has a doctor finding, marked (``nan`` for NaN origins, else ``flag``)."""
    marks: dict[str, Mark] = {f.node: "nan" if f.kind in ("nan-origin", "nan") else "flag"
                              for f in diagnosis.findings if f.node}
    return {"title": "doctor findings", "values": {}, "scale": "linear", "encoding": "color", "marks": marks,
            "unit": ""}


# --- page.overlay: one converter registered per source type ---------------------------------------------
# A new overlay source is one function registered here (`@overlay_source(Type, "gv.maker")`): `overlay`
# dispatches on the type, traits accept it, and every error lists it, all from the registry.
MADE_BY: dict[type, str] = {}  # source type -> the public call that makes one, for error texts
OverlayFn = Callable[[Any, AutogradGraph | None, Encoding | None], Overlay]


@functools.singledispatch
def overlay(source: Any, graph: AutogradGraph | None = None, encoding: Encoding | None = None) -> Overlay:
    """The ``Overlay`` (trait ``overlay``) for ``source``, by its type: a :class:`MemoryReport` (bytes held
    for backward; ``encoding`` "size", the default, or "color"), a ``GradientFlow`` (gradient norms; needs
    ``graph``), a ``GradCheck`` (wrong nodes) or a doctor ``Diagnosis`` (nodes with findings); see
    :data:`MADE_BY`. Raises :class:`GradvizError` for anything else, naming what is accepted."""
    raise GradvizError(f"overlay: expected {overlay_sources()}, got {type(source).__name__}.")


def overlay_source(cls: type, made_by: str) -> Callable[[OverlayFn], OverlayFn]:
    """Register ``fn(source, graph, encoding)`` as the overlay converter of ``cls`` (made by ``made_by``)."""
    def register(fn: OverlayFn) -> OverlayFn:
        MADE_BY[cls] = made_by
        overlay.register(cls)(fn)
        return fn
    return register


def is_overlay_source(value: object) -> bool:
    """True when :func:`overlay` has a converter for ``value``'s type."""
    return overlay.dispatch(type(value)) is not overlay.dispatch(object)


def a(name: str) -> str:
    """``name`` with its indefinite article, for error texts: "an AutogradGraph", "a GradCheck"."""
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def overlay_sources() -> str:
    """The accepted overlay sources in words, for error messages (from the registry)."""
    return ", ".join(a(t.__name__) for t in MADE_BY) + f" ({', '.join(MADE_BY.values())})"


def _no_encoding(source: object, encoding: Encoding | None) -> None:
    if encoding is not None:
        raise GradvizError(f"overlay: encoding= applies to a MemoryReport only; {a(type(source).__name__)} "
                           "has its own.")


@overlay_source(MemoryReport, "gv.memory_held")
def _memory(source: MemoryReport, graph: AutogradGraph | None = None, encoding: Encoding | None = None) -> Overlay:
    if encoding is not None and encoding not in ("size", "color"):
        raise GradvizError(f"overlay: encoding must be 'size' or 'color', got {encoding!r}.")
    return memory_overlay(source, encoding or "size")


@overlay_source(GradientFlow, "gv.gradient_flow")
def _flow(source: GradientFlow, graph: AutogradGraph | None = None, encoding: Encoding | None = None) -> Overlay:
    _no_encoding(source, encoding)
    if graph is None:
        raise GradvizError("overlay: a GradientFlow is drawn on a graph: page.overlay(flow, graph=g), "
                           "or set it on a widget (w.overlay = flow), which has its graph.")
    return flow_overlay(source, graph)


@overlay_source(GradCheck, "gv.gradcheck")
def _gradcheck(source: GradCheck, graph: AutogradGraph | None = None, encoding: Encoding | None = None) -> Overlay:
    _no_encoding(source, encoding)
    return gradcheck_overlay(source)


@overlay_source(Diagnosis, "gv.doctor")
def _diagnosis(source: Diagnosis, graph: AutogradGraph | None = None, encoding: Encoding | None = None) -> Overlay:
    _no_encoding(source, encoding)
    return findings_overlay(source)

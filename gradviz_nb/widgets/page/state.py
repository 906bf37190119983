"""One route to the canvas: anything it can show -> the widget's synced traits (``contract.Traits``).

:func:`build` is what ``GraphWidget(x)`` and ``gv.export_html(x)`` both start from. ``x`` is an
``AutogradGraph``, a loss tensor (or a list of them; traced here), a ``BackwardRecording`` (the
stepper), a ``GraphDiff`` (its merged graph coloured by status), a doctor ``Diagnosis`` (findings beside
the graph, marked on it), a ``MemoryReport`` or a ``GradCheck`` (drawn as an overlay on their graph).
A ``GradientFlow`` holds no graph: give it as ``overlay=flow`` next to a graph or a loss.
:func:`snapshot` adds what an exported page needs besides the traits: the answers to its requests.

Example::

    from gradviz_nb.widgets import page
    built = page.build(gv.diff(before, after))
    built.state["diff"]["summary"], built.graph       # the merged graph
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

import torch
from torch import nn

from gradviz_nb.analysis.diff import GraphDiff
from gradviz_nb.analysis.memory import MemoryReport
from gradviz_nb.doctor.findings import Diagnosis
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.backward import BackwardRecording
from gradviz_nb.probes.flow import GradientFlow
from gradviz_nb.probes.gradcheck import GradCheck
from gradviz_nb.tracing import AutogradGraph, Capture, trace
from gradviz_nb.validate import instance, model_or_none, optional_bool, tensor_mapping
from gradviz_nb.widgets.page import convert
from gradviz_nb.widgets.page import lazy as lazy_mode
from gradviz_nb.widgets.page.contract import Traits
from gradviz_nb.widgets.page.messages import Answers, answers
from gradviz_nb.widgets.page.payload import graph as graph_payload
from gradviz_nb.widgets.page.payload import initial_expanded
from gradviz_nb.widgets.page.traits import convert_trait
from gradviz_nb.widgets.page.values import export_answers
from gradviz_nb.widgets.page.why import PARAM_PREFIX, unreached
from gradviz_nb.widgets.page.why import export_answers as why_answers

# Every trait's value when nothing is shown (graph_data and expanded come from the graph).
DEFAULTS: dict[str, Any] = {
    "unfolded": [], "selected": "", "height": 600, "toggles": {"detach": [], "freeze": []}, "verified": {},
    "can_verify": False, "overlay": {}, "recording": {}, "step": -1, "diff": {}, "findings": [],
    "checkpoints": {}, "checkpoint_table": {}, "checkpoint_verified": {},
}
@dataclass
class Built:
    """The graph drawn, the synced traits' first values, and the lazy index when the page starts lazy."""

    graph: AutogradGraph
    state: Traits
    lazy: lazy_mode.LazyGraph | None
    why_source: Any = None  # what "Why?" asks the doctor about: the Diagnosis drawn, else the graph


@dataclass
class Snapshot:
    """Everything an exported page holds: the traits, the answers to its requests, a caption."""

    state: Traits
    answers: Answers
    caption: str


@runtime_checkable
class HasSnapshot(Protocol):
    """A live view (``GraphWidget``) that can give its current state, so export never needs its class."""

    def page_snapshot(self, **traits: Any) -> Snapshot: ...


# --- page.source: the graph and traits each drawable type brings, one function registered per type -----
# A new drawable is one function registered here (`@drawable(Type, "a Type (gv.maker)")`); the error for anything
# else names every registered type (`accepted()`), from the registry.
MADE_BY: dict[type, str] = {}  # drawable type -> how an error names it ("a GraphDiff (gv.diff)")
SourceFn = Callable[..., tuple[AutogradGraph, dict[str, Any]]]


@functools.singledispatch
def source(
    x: Any,
    model: nn.Module | None = None,
    capture: Capture | None = None,
    names: Mapping[str, torch.Tensor] | None = None,
) -> tuple[AutogradGraph, dict[str, Any]]:
    """The graph ``x`` is drawn on, and the page traits ``x`` itself brings (converted), by ``x``'s type
    (see :data:`MADE_BY`); a list of loss tensors is traced too. :class:`GradvizError` for anything else."""
    if isinstance(x, Sequence) and x and all(isinstance(t, torch.Tensor) for t in x):
        return trace(x, model, capture, names), {}
    raise GradvizError(f"nothing to draw from {type(x).__name__}: expected {accepted()}.")


def drawable(cls: type, made_by: str) -> Callable[[SourceFn], SourceFn]:
    """Register ``fn(x, model, capture, names)`` as what :func:`source` does with a ``cls``."""
    def register(fn: SourceFn) -> SourceFn:
        MADE_BY[cls] = made_by
        source.register(cls)(fn)
        return fn
    return register


def accepted() -> str:
    """What :func:`build` draws, in words (from the registry)."""
    words = list(MADE_BY.values())
    return ", ".join(words[:-1]) + " or " + words[-1]


@drawable(AutogradGraph, "an AutogradGraph")
def _graph(x: AutogradGraph, *_: Any) -> tuple[AutogradGraph, dict[str, Any]]:
    return x, {}


@drawable(torch.Tensor, "a loss tensor (or a list of them)")
def _loss(x: torch.Tensor, model: nn.Module | None = None, capture: Capture | None = None,
          names: Mapping[str, torch.Tensor] | None = None) -> tuple[AutogradGraph, dict[str, Any]]:
    return trace(x, model, capture, names), {}


@drawable(BackwardRecording, "a BackwardRecording (gv.record_backward)")
def _recording(x: BackwardRecording, *_: Any) -> tuple[AutogradGraph, dict[str, Any]]:
    return x.graph, {"recording": convert.recording(x)}


@drawable(GraphDiff, "a GraphDiff (gv.diff)")
def _diff(x: GraphDiff, *_: Any) -> tuple[AutogradGraph, dict[str, Any]]:
    return x.merged(), {"diff": convert.diff(x)}


@drawable(Diagnosis, "a Diagnosis (gv.doctor)")
def _diagnosis(x: Diagnosis, *_: Any) -> tuple[AutogradGraph, dict[str, Any]]:
    if x.graph is None:
        raise GradvizError("this diagnosis has no graph to draw: the step ran no backward.")
    return x.graph, {"findings": convert.findings(x), "overlay": convert.overlay(x)}


@drawable(MemoryReport, "a MemoryReport (gv.memory_held)")
def _memory(x: MemoryReport, *_: Any) -> tuple[AutogradGraph, dict[str, Any]]:
    return x.graph, {"overlay": convert.overlay(x)}


@drawable(GradCheck, "a GradCheck (gv.gradcheck)")
def _gradcheck(x: GradCheck, *_: Any) -> tuple[AutogradGraph, dict[str, Any]]:
    return x.graph, {"overlay": convert.overlay(x)}


@source.register
def _flow(x: GradientFlow, *_: Any) -> tuple[AutogradGraph, dict[str, Any]]:
    # Not a drawable (so not in `accepted()`): it holds no graph, and the error says where it goes.
    raise GradvizError("a GradientFlow holds no graph to draw it on: GraphWidget(loss, model=model, "
                       "overlay=flow), or w.overlay = flow on a widget you have.")


def build(
    x: Any,
    model: nn.Module | None = None,
    capture: Capture | None = None,
    names: Mapping[str, torch.Tensor] | None = None,
    lazy: bool | None = None,
    **traits: Any,
) -> Built:
    """The synced traits for ``x`` (see the module doc), with ``traits`` (e.g. ``overlay=mem``,
    ``height=400``) converted as the widget's traits convert them, and overriding what ``x`` brings.

    Lazy (big graphs): with module calls and more than ``LAZY_NODES`` nodes, unless there is a
    recording or a diff (their views need every record); ``lazy=True/False`` decides instead."""
    model_or_none("model", model)
    if capture is not None:
        instance("capture", capture, Capture, "a Capture (with gv.capture(model) as cap) or None")
    if names is not None:
        tensor_mapping("names", names)
    optional_bool("lazy", lazy)
    graph, brought = source(x, model, capture, names)
    given = {**brought, **traits}
    if lazy is None:
        big = bool(graph.calls) and len(graph) > lazy_mode.LAZY_NODES
        lazy = big and not (given.get("recording") or given.get("diff"))  # their views need every record
    index = lazy_mode.LazyGraph(graph) if lazy else None
    expanded = initial_expanded(graph)
    payload = index.skeleton(["", *expanded]) if index else graph_payload(graph)
    state: dict[str, Any] = {**copy.deepcopy(DEFAULTS), "expanded": expanded}
    state["graph_data"] = convert_trait("graph_data", payload, graph)
    if graph.calls:  # what the page's checkpointing what-if reads; module boxes are what it marks
        state["checkpoint_table"] = convert_trait("checkpoint_table", graph, graph)
    for name, value in given.items():
        state[name] = convert_trait(name, value, graph)
    return Built(graph, cast(Traits, state), index, x if isinstance(x, Diagnosis) else graph)


def snapshot(graph: AutogradGraph, state: Mapping[str, Any], index: lazy_mode.LazyGraph | None,
             why_source: Any = None, **traits: Any) -> Snapshot:
    """An exported page's contents: ``state`` with ``traits`` converted over it, and the answers to the
    requests it will send: load (a lazy page: ``wiring`` in its graph data), values and why of leaves
    (``why_source``: what "Why?" asks about, the graph when None)."""
    out = dict(state)
    for name, value in traits.items():
        out[name] = convert_trait(name, value, graph)
    is_lazy = "wiring" in out.get("graph_data", {})
    if is_lazy and index is None:
        index = lazy_mode.LazyGraph(graph)
    caption = "\n".join(graph.summary().splitlines()[:2])
    values = export_answers(graph)
    leaves = list(dict.fromkeys([*values, *graph.leaves().values()]))  # tied weights: one node, several names
    leaves += [PARAM_PREFIX + name for name in unreached(graph)]  # cut off from the loss: the page finds them too
    whys = why_answers(graph if why_source is None else why_source, graph, leaves)
    return Snapshot(cast(Traits, out), answers(index if is_lazy else None, values, whys), caption)


def page_snapshot(x: Any, **traits: Any) -> Snapshot:
    """The snapshot of a live view (anything with ``page_snapshot``, e.g. a ``GraphWidget``: its current
    state) or of anything :func:`build` accepts (drawn as a fresh widget would be); a snapshot as is."""
    if isinstance(x, Snapshot) and not traits:
        return x
    if isinstance(x, HasSnapshot):
        return x.page_snapshot(**traits)
    built = build(x, **traits)
    return snapshot(built.graph, built.state, built.lazy, built.why_source)

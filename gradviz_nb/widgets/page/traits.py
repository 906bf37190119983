"""Validating traits: what may be put into a page trait, converted once, here, for the widget and the
exported page alike.

``w.overlay = mem`` (a MemoryReport), ``= flow`` (a GradientFlow, drawn on ``w.graph``), ``= res`` (a
GradCheck) or ``= diagnosis`` becomes the ``Overlay`` dict; ``w.recording = rec``, ``w.diff = d`` and
``w.findings = diagnosis`` likewise. A dict is accepted when it has the contract's fields (``{}``, or
``[]`` for findings, means none). Anything else is refused with a message naming what is accepted, as
lonboard's traits do (a ``traitlets.TraitType`` whose ``validate`` converts or raises ``TraitError``).
Every accepted value is made JSON-safe (NaN / Inf as strings, see ``finite_json``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import traitlets

from gradviz_nb.analysis.diff import GraphDiff
from gradviz_nb.doctor.findings import Diagnosis
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.backward import BackwardRecording
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.widgets.page import contract, convert
from gradviz_nb.widgets.page.finite_json import finite_json, finite_nodes


def _fields(name: str, value: Mapping[str, Any], typed: Any) -> None:
    """Refuse a non-empty dict whose keys are not ``typed``'s (a TypedDict): missing or unknown fields."""
    keys = set(value)
    required, known = set(typed.__required_keys__), set(typed.__required_keys__ | typed.__optional_keys__)
    missing, unknown = sorted(required - keys), sorted(keys - known)
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else [])
        raise GradvizError(f"{name}: a {typed.__name__} dict (js/src/payload.ts) has the fields "
                           f"{', '.join(sorted(known))}; this one has {'; '.join(parts)}.")


def _page_dict(name: str, value: Any, typed: Any, sources: str) -> Any:
    if isinstance(value, Mapping):
        if value:
            _fields(name, value, typed)
        return finite_json(dict(value))
    raise GradvizError(f"{name}: expected {sources}, a {typed.__name__} dict or {{}} for none; "
                       f"got {type(value).__name__}.")


def overlay(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``overlay``: an overlay source (see ``convert.overlay``) or an ``Overlay`` dict."""
    if isinstance(value, convert.OVERLAY_SOURCES):
        return finite_json(convert.overlay(value, graph=graph))
    return _page_dict("overlay", value, contract.Overlay, convert.overlay_sources())


def recording(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``recording``: a ``BackwardRecording`` (gv.record_backward) or a ``Recording`` dict."""
    if isinstance(value, BackwardRecording):
        return finite_json(convert.recording(value))
    return _page_dict("recording", value, contract.Recording, "a BackwardRecording (gv.record_backward)")


def diff(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``diff``: a ``GraphDiff`` (gv.diff; draw it on ``d.merged()``) or a ``GraphDiff`` dict."""
    if isinstance(value, GraphDiff):
        return finite_json(convert.diff(value))
    return _page_dict("diff", value, contract.GraphDiff, "a GraphDiff (gv.diff)")


def findings(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``findings``: a doctor ``Diagnosis`` or a list of ``DoctorFinding`` dicts."""
    if isinstance(value, Diagnosis):
        return finite_json(convert.findings(value))
    if isinstance(value, (list, tuple)) and all(isinstance(f, Mapping) for f in value):
        for f in value:
            _fields("findings", f, contract.DoctorFinding)
        return finite_json([dict(f) for f in value])
    raise GradvizError("findings: expected a Diagnosis (gv.doctor) or a list of DoctorFinding dicts; "
                       f"got {type(value).__name__}.")


def verified(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``verified``: a ``Verification`` dict, ``{}`` for none."""
    return _page_dict("verified", value, contract.Verification, "the result of GraphWidget.verify()")


def graph_data(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``graph_data``: a ``GraphPayload`` (only its nodes' values can be non-finite)."""
    return finite_nodes(value)


# Trait name -> its converter; traits not listed take their value as it is (ints, strings, lists).
CONVERTERS: dict[str, Callable[[Any, AutogradGraph | None], Any]] = {
    "overlay": overlay, "recording": recording, "diff": diff, "findings": findings, "verified": verified,
    "graph_data": graph_data,
}


def convert_trait(name: str, value: Any, graph: AutogradGraph | None) -> Any:
    """``value`` as trait ``name`` holds it (converted, checked, JSON-safe); :class:`GradvizError` if refused."""
    if name not in contract.Traits.__annotations__:
        raise GradvizError(f"no page trait {name!r}; the traits are {', '.join(contract.Traits.__annotations__)}.")
    converter = CONVERTERS.get(name)
    return converter(value, graph) if converter else value


class PageTrait(traitlets.TraitType[Any, Any]):
    """A synced trait holding page data (``js/src/payload.ts``), which converts the analysis results it
    knows (``w.overlay = mem``) and refuses anything else with a :class:`traitlets.TraitError` that says
    what it accepts. The widget's ``graph`` (for a GradientFlow) is read from the owner."""

    def __init__(self, default_value: Any, **kwargs: Any) -> None:
        super().__init__(default_value=default_value, **kwargs)

    def make_dynamic_default(self) -> Any:
        return copy.deepcopy(self.default_value)  # never one {} shared by every widget

    def validate(self, obj: Any, value: Any) -> Any:
        try:
            return convert_trait(str(self.name), value, getattr(obj, "graph", None))
        except GradvizError as err:
            raise traitlets.TraitError(str(err)) from None

"""Validating traits: what may be put into a page trait, converted once, here, for the widget and the
exported page alike.

``w.overlay = mem`` (a MemoryReport), ``= flow`` (a GradientFlow, drawn on ``w.graph``), ``= res`` (a
GradCheck) or ``= diagnosis`` becomes the ``Overlay`` dict; ``w.recording = rec``, ``w.diff = d`` and
``w.findings = diagnosis`` likewise. A dict is accepted when it has the contract's fields (``{}``, or
``[]`` for findings, means none). Anything else is refused with a message naming what is accepted, as
lonboard's traits do (a ``traitlets.TraitType`` whose ``validate`` converts or raises ``TraitError``).
Every accepted value is made JSON-safe (NaN / Inf as strings, see ``finite_json``).

Every synced trait has a converter here, and page dicts are checked against their contract type all the way
down (:func:`check_record`): ``w.graph_data = {"nodes": "x"}`` is refused in Python with the fields that are
wrong, instead of reaching a page that cannot draw it. ``expanded`` ids must be module calls of the graph,
``height`` a pixel count, ``toggles`` ``{"detach": [...], "freeze": [...]}``.
"""

from __future__ import annotations

import copy
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union

import traitlets

from gradviz_nb.analysis.diff import GraphDiff
from gradviz_nb.doctor.findings import Diagnosis
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.backward import BackwardRecording
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.validate import boolean, given, positive_int, text_list
from gradviz_nb.widgets.page import checkpoint, contract, convert
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


# --- a page record against its contract type, all the way down ------------------------------------------
# Each contract type is compiled once into a checker: checker(value, where, problems) appends what is wrong.
Checker = Callable[[Any, Any, list[str]], None]
NONFINITE = ("NaN", "Infinity", "-Infinity")  # how finite_json sends a non-finite number
MAX_PROBLEMS = 4


def _hint_name(hint: Any) -> str:
    if typing.is_typeddict(hint):
        return f"a {hint.__name__} dict"
    if hint is type(None):
        return "null"
    if isinstance(hint, type):
        return {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}.get(
            hint.__name__, hint.__name__)
    return str(hint).replace("typing.", "").replace("gradviz_nb.widgets.page.contract.", "")


@functools.cache
def _fits_top(hint: Any) -> Callable[[Any], bool]:
    """A test of ``value``'s outer type for ``hint`` (its contents aside); compiled once per hint."""
    origin = typing.get_origin(hint)
    if typing.is_typeddict(hint) or origin is dict:
        return lambda v: isinstance(v, Mapping)
    if origin is list:
        return lambda v: type(v) is list or isinstance(v, list)
    if origin is tuple:
        return lambda v: isinstance(v, (list, tuple))
    if origin is Literal:
        allowed = typing.get_args(hint)
        return lambda v: any(type(v) is type(a) and v == a for a in allowed)
    if hint is type(None):
        return lambda v: v is None
    if hint is float:
        return lambda v: type(v) in (int, float) or (isinstance(v, (int, float)) and not isinstance(v, bool)) or (
            type(v) is str and v in NONFINITE)
    if hint is int:
        return lambda v: type(v) is int or (isinstance(v, int) and not isinstance(v, bool))
    return lambda v: type(v) is hint or isinstance(v, hint)


_SIMPLE = (str, int, float, bool, type(None))


def _top(hint: Any) -> Callable[[Any, Any, list[str]], bool]:
    """The outer-type test of ``hint`` that says what was expected when it fails."""
    fits, name = _fits_top(hint), _hint_name(hint)

    def top(value: Any, where: Any, out: list[str]) -> bool:
        if fits(value):
            return True
        out.append(f"{_where(where)} must be {name}, got {given(value)}")
        return False
    return top


def _union_checker(hint: Any) -> Checker:
    args = typing.get_args(hint)
    arms = [(_fits_top(a), _checker(a), a in _SIMPLE or typing.get_origin(a) is Literal) for a in args]

    def union(value: Any, where: Any, out: list[str]) -> None:
        matching = []
        for arm_fits, check, simple in arms:
            if arm_fits(value):
                if simple:
                    return
                matching.append(check)
        for check in matching:
            found: list[str] = []
            check(value, where, found)
            if not found:
                return
        if matching:  # right outer type, wrong inside: say what is wrong inside
            matching[0](value, where, out)
        else:
            out.append(f"{_where(where)} must be {' or '.join(_hint_name(a) for a in args)}, got {given(value)}")
    return union


def _record_checker(hint: Any) -> Checker:
    top, hints = _top(hint), typing.get_type_hints(hint)
    # a plain field (str, int, ...) is tested inline; the checker runs only for the rest or on failure
    fields = [(k, _checker(h), _fits_top(h) if h in _SIMPLE else None) for k, h in hints.items()]
    required, known = frozenset(hint.__required_keys__), frozenset(hints)
    has = f"(a {hint.__name__} has {', '.join(hints)})"

    def record(value: Any, where: Any, out: list[str]) -> None:
        if not top(value, where, out):
            return
        keys = value.keys()
        if not (required <= keys and keys <= known):
            missing, unknown = sorted(required - set(keys)), sorted(str(k) for k in keys if k not in known)
            if missing:
                out.append(f"{_where(where)} lacks {', '.join(missing)} {has}")
            if unknown:
                out.append(f"{_where(where)} has unknown field{'s' if len(unknown) > 1 else ''} "
                           f"{', '.join(repr(k) for k in unknown[:5])} {has}")
        for key, check, simple in fields:
            if key in value and (simple is None or not simple(value[key])):
                check(value[key], (where, f".{key}"), out)
    return record


def _list_checker(hint: Any) -> Checker:
    top, item = _top(hint), _checker(typing.get_args(hint)[0])

    def items(value: Any, where: Any, out: list[str]) -> None:
        if top(value, where, out):
            for i, v in enumerate(value):
                item(v, (where, i), out)
                if len(out) >= MAX_PROBLEMS:
                    return
    return items


def _dict_checker(hint: Any) -> Checker:
    key_type, value_type = typing.get_args(hint)
    top, key_check, value_check = _top(hint), _checker(key_type), _checker(value_type)

    def entries(value: Any, where: Any, out: list[str]) -> None:
        if top(value, where, out):
            for k, v in value.items():
                key_check(k, (where, f" key {given(k)}"), out)
                value_check(v, (where, f"[{k!r}]"), out)
                if len(out) >= MAX_PROBLEMS:
                    return
    return entries


def _tuple_checker(hint: Any) -> Checker:
    top, name, parts = _top(hint), _hint_name(hint), [_checker(a) for a in typing.get_args(hint)]

    def pair(value: Any, where: Any, out: list[str]) -> None:
        if not top(value, where, out):
            return
        if len(value) != len(parts):
            out.append(f"{_where(where)} must have {len(parts)} items ({name}), got {given(value)}")
            return
        for i, (v, check) in enumerate(zip(value, parts, strict=True)):
            check(v, (where, i), out)
    return pair


@functools.cache
def _checker(hint: Any) -> Checker:
    """``hint`` compiled into a checker (once per hint): by its kind, a union, a TypedDict, a container or
    a plain type."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return _union_checker(hint)
    if typing.is_typeddict(hint):
        return _record_checker(hint)
    compound = {list: _list_checker, dict: _dict_checker, tuple: _tuple_checker}.get(origin)
    if compound is not None:
        return compound(hint)
    top = _top(hint)

    def leaf(value: Any, where: Any, out: list[str]) -> None:
        top(value, where, out)
    return leaf


def _where(where: Any) -> str:
    """A checker's position, kept as nested ``(parent, step)`` pairs and written out only for a message:
    ``(("graph_data", ".nodes"), 3)`` -> ``graph_data.nodes[3]``."""
    steps: list[str] = []
    while isinstance(where, tuple):
        where, step = where
        steps.append(f"[{step}]" if isinstance(step, int) else step)
    return str(where) + "".join(reversed(steps))


def check_record(name: str, value: Any, typed: Any) -> None:
    """Raise :class:`GradvizError` listing what in ``value`` does not match the contract type ``typed``
    (missing or unknown fields, wrong types, at any depth; the first few problems)."""
    out: list[str] = []
    _checker(typed)(value, name, out)
    if out:
        raise GradvizError(f"{name} is not {_hint_name(typed)} as js/src/payload.ts defines it: "
                           + "; ".join(out[:MAX_PROBLEMS]) + ".")


def _page_dict(name: str, value: Any, typed: Any, sources: str) -> Any:
    if isinstance(value, Mapping):
        if value:
            _fields(name, value, typed)
            check_record(name, value, typed)
        return finite_json(dict(value))
    raise GradvizError(f"{name}: expected {sources}, a {typed.__name__} dict or {{}} for none; "
                       f"got {type(value).__name__}.")


def overlay(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``overlay``: an overlay source (see ``convert.overlay``) or an ``Overlay`` dict."""
    if convert.is_overlay_source(value):
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
        records = [dict(convert.with_scope(f)) for f in value]
        for f in records:
            _fields("findings", f, contract.DoctorFinding)
        check_record("findings", records, list[contract.DoctorFinding])
        return finite_json(records)
    raise GradvizError("findings: expected a Diagnosis (gv.doctor) or a list of DoctorFinding dicts; "
                       f"got {type(value).__name__}.")


def verified(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``verified``: a ``Verification`` dict, ``{}`` for none."""
    return _page_dict("verified", value, contract.Verification, "the result of GraphWidget.verify()")


def graph_data(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``graph_data``: a ``GraphPayload`` (only its nodes' values can be non-finite); ``{}`` for none."""
    if isinstance(value, Mapping) and not value:
        return {}
    check_record("graph_data", value, contract.GraphPayload)
    return finite_nodes(value)


def _call_ids(graph: AutogradGraph | None) -> list[str] | None:
    return None if graph is None else [c["id"] for c in graph.calls]


def expanded(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``expanded``: module call ids of the widget's graph."""
    return text_list("expanded", value, _call_ids(graph), "module call ids")


def unfolded(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``unfolded``: fold group ids (``"fold:blocks.0"``)."""
    return text_list("unfolded", value, what="fold group ids")


def selected(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``selected``: a node or module call id, ``""`` for none."""
    if not isinstance(value, str):
        raise GradvizError(f"selected must be a node or module call id (a string, '' for none); got {given(value)}.")
    return value


def height(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``height``: the canvas height in pixels."""
    return positive_int("height", value, lo=MIN_HEIGHT, hi=MAX_HEIGHT, hint="It is the canvas height in pixels.")


def step(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``step``: the stepper's cursor, -1 before the first step."""
    return positive_int("step", value, lo=-1, hint="-1 is before the first step, else an index into the steps.")


def can_verify(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``can_verify``: True or False."""
    return boolean("can_verify", value)


def toggles(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``toggles``: ``{"detach": [...], "freeze": [...]}`` (ids as ``toggle_args`` reads them)."""
    check_record("toggles", value, contract.Toggles)
    return {"detach": list(value["detach"]), "freeze": list(value["freeze"])}


MIN_HEIGHT, MAX_HEIGHT = 50, 100_000

# Trait name -> its converter (every synced trait has one: all refuse what the page cannot read).
CONVERTERS: dict[str, Callable[[Any, AutogradGraph | None], Any]] = {
    "overlay": overlay, "recording": recording, "diff": diff, "findings": findings, "verified": verified,
    "graph_data": graph_data, "expanded": expanded, "unfolded": unfolded, "selected": selected,
    "height": height, "step": step, "can_verify": can_verify, "toggles": toggles,
    "checkpoints": checkpoint.checkpoints, "checkpoint_table": checkpoint.checkpoint_table,
    "checkpoint_verified": checkpoint.checkpoint_verified,
}


def convert_trait(name: str, value: Any, graph: AutogradGraph | None) -> Any:
    """``value`` as trait ``name`` holds it (converted, checked, JSON-safe); :class:`GradvizError` if refused."""
    if name not in contract.Traits.__annotations__:
        raise GradvizError(f"no page trait {name!r}; the traits are {', '.join(contract.Traits.__annotations__)}.")
    converter = CONVERTERS.get(name)  # every trait has one (tests/unit/test_public_boundary.py checks)
    return converter(value, graph) if converter else value


class PageTraitError(traitlets.TraitError, GradvizError):
    """A page trait refused a value: a :class:`traitlets.TraitError` (what traitlets expects from ``validate``)
    that is also a :class:`GradvizError`, so ``except gv.GradvizError`` catches it like any other refusal."""


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
            raise PageTraitError(str(err)) from None

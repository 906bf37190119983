"""The page contract, both halves: ``js/src/payload.ts`` and the page's ``Traits`` interface, read by the
TypeScript compiler (``js/scripts/contract.mjs``), against the Python TypedDicts of
``gradviz_nb/widgets/page/contract.py``: the same names, fields, optionality and (coarsely) types.
Then the Python builders' output is checked against those TypedDicts, value by value.

Coarse type mapping: string -> str, number -> int | float, boolean -> bool, null -> None, T[] -> list,
[A, B] -> tuple, Record<string, T> -> dict[str, T], string literal unions -> Literal, Partial<X> ->
X | Empty, Record<string, never> -> Empty, an inline object type -> a TypedDict without a TS name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import MLP
from gradviz_nb.widgets import page
from gradviz_nb.widgets.page import contract

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "js"
SCRIPT = JS / "scripts" / "contract.mjs"

Canon = tuple[Any, ...]


def traits_file() -> Path:
    """The file declaring the page's ``Traits`` interface, wherever the front end keeps it."""
    found = [p for p in sorted((JS / "src").rglob("*.ts")) if "export interface Traits " in p.read_text()]
    assert len(found) == 1, f"expected one `export interface Traits` under js/src, found {found}"
    return found[0]


@cache
def ts_contract() -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "typescript").exists():
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail("CI is set and node or js/node_modules/typescript is missing (npm --prefix js ci)")
        pytest.skip("needs node and js/node_modules/typescript (npm --prefix js ci)")
    args = [node, str(SCRIPT), str(JS / "src" / "payload.ts"), f"{traits_file()}:Traits"]
    out = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT, timeout=60)
    parsed: dict[str, Any] = json.loads(out.stdout)
    return parsed


# -- both sides to one canonical form ------------------------------------------------------------------

def _union(members: list[Canon]) -> Canon:
    flat: set[Canon] = set()
    literals: set[Any] = set()
    for m in members:
        if m[0] == "union":
            flat |= m[1]
        elif m[0] == "literal":
            literals |= m[1]
        else:
            flat.add(m)
    if literals:
        flat.add(("literal", frozenset(literals)))
    return next(iter(flat)) if len(flat) == 1 else ("union", frozenset(flat))


def ts_canon(t: dict[str, Any], aliases: dict[str, Any]) -> Canon:
    k = t["k"]
    if k in ("str", "number", "bool", "null", "never", "unknown"):
        return (k,)
    if k == "literal":
        return ("literal", frozenset(t["v"]))
    if k == "list":
        return ("list", ts_canon(t["of"], aliases))
    if k == "tuple":
        return ("tuple", tuple(ts_canon(i, aliases) for i in t["items"]))
    if k == "dict":
        assert t["key"] == {"k": "str"}, t
        of = ts_canon(t["of"], aliases)
        return ("empty",) if of == ("never",) else ("dict", of)
    if k == "partial":
        return _union([ts_canon(t["of"], aliases), ("empty",)])
    if k == "union":
        return _union([ts_canon(m, aliases) for m in t["of"]])
    if k == "object":
        return ("object", ts_fields(t["fields"], aliases))
    if k == "ref":
        return ts_canon(aliases[t["name"]], aliases) if t["name"] in aliases else ("ref", t["name"])
    raise AssertionError(f"unknown TS type node {t}")


def ts_fields(fields: dict[str, Any], aliases: dict[str, Any]) -> frozenset[tuple[str, bool, Canon]]:
    return frozenset((name, f["optional"], ts_canon(f["type"], aliases)) for name, f in fields.items())


def py_canon(tp: Any, named: set[str]) -> Canon:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is str:
        return ("str",)
    if tp is bool:
        return ("bool",)
    if tp in (int, float):
        return ("number",)
    if tp is type(None):
        return ("null",)
    if origin is Literal:
        return ("literal", frozenset(args))
    if origin in (typing.Union, types.UnionType):
        return _union([py_canon(a, named) for a in args])
    if origin is list:
        return ("list", py_canon(args[0], named))
    if origin is tuple:
        return ("tuple", tuple(py_canon(a, named) for a in args))
    if origin is dict:
        assert args[0] is str, tp
        return ("dict", py_canon(args[1], named))
    if typing.is_typeddict(tp):
        if not tp.__annotations__:
            return ("empty",)
        return ("ref", tp.__name__) if tp.__name__ in named else ("object", py_fields(tp, named))
    raise AssertionError(f"no TS counterpart for the Python type {tp!r}")


def py_fields(td: Any, named: set[str]) -> frozenset[tuple[str, bool, Canon]]:
    hints = typing.get_type_hints(td)
    return frozenset((name, name in td.__optional_keys__, py_canon(tp, named)) for name, tp in hints.items())


def compare(ts: dict[str, Any], py: dict[str, Any]) -> list[str]:
    """Every difference between the TS declarations (contract.mjs output) and the Python types by name."""
    problems = [f"{n}: only in TypeScript" for n in sorted(set(ts) - set(py))]
    problems += [f"{n}: only in Python" for n in sorted(set(py) - set(ts))]
    aliases = {n: d["type"] for n, d in ts.items() if d["kind"] == "alias"}
    named = {n for n, d in ts.items() if d["kind"] == "interface"}
    for name in sorted(set(ts) & set(py)):
        decl, tp = ts[name], py[name]
        if decl["kind"] == "alias":
            if ts_canon(decl["type"], aliases) != py_canon(tp, named):
                problems.append(f"{name}: {decl['type']} vs {tp!r}")
            continue
        if not typing.is_typeddict(tp):
            problems.append(f"{name}: an interface in TypeScript, {tp!r} in Python")
            continue
        mine, theirs = py_fields(tp, named), ts_fields(decl["fields"], aliases)
        by_name_ts, by_name_py = {f[0]: f for f in theirs}, {f[0]: f for f in mine}
        for field in sorted(set(by_name_ts) | set(by_name_py)):
            a, b = by_name_ts.get(field), by_name_py.get(field)
            if a is None or b is None:
                problems.append(f"{name}.{field}: only in {'Python' if a is None else 'TypeScript'}")
            elif a[1] != b[1]:
                problems.append(f"{name}.{field}: optional in {'TypeScript' if a[1] else 'Python'} only")
            elif a[2] != b[2]:
                problems.append(f"{name}.{field}: types differ, TS {a[2]} vs Python {b[2]}")
    return problems


def python_contract() -> dict[str, Any]:
    return {name: getattr(contract, name) for name in contract.__all__}


def test_every_interface_and_traits_match_the_python_types() -> None:
    ts = ts_contract()
    assert {"GraphPayload", "PageRequest", "PageReply", "Overlay", "DiffStatus", "Traits"} <= set(ts)
    assert compare(ts, python_contract()) == []


def test_the_comparison_fails_when_one_side_changes_alone() -> None:
    ts = json.loads(json.dumps(ts_contract()))
    py = python_contract()
    ts["Toggles"]["fields"]["focus"] = {"optional": False, "type": {"k": "str"}}  # a field only in TS
    assert compare(ts, py) == ["Toggles.focus: only in TypeScript"]

    class Toggles(TypedDict):  # a field only in Python
        detach: list[str]
        freeze: list[str]
        focus: NotRequired[str]

    assert compare(ts_contract(), {**py, "Toggles": Toggles}) == ["Toggles.focus: only in Python"]
    ts = json.loads(json.dumps(ts_contract()))
    ts["Overlay"]["fields"]["scale"]["type"]["of"].append({"k": "literal", "v": ["sqrt"]})  # a literal more
    ts["GraphEdge"]["fields"]["shape"]["optional"] = True
    ts["Extra"] = {"kind": "interface", "fields": {}}
    problems = compare(ts, py)
    assert problems[0] == "Extra: only in TypeScript" and len(problems) == 3
    assert any(p.startswith("Overlay.scale: types differ") for p in problems)
    assert "GraphEdge.shape: optional in TypeScript only" in problems


def test_widget_traits_are_the_contract_traits() -> None:
    import ipywidgets

    plumbing = set(ipywidgets.DOMWidget.class_trait_names(sync=True))
    synced = {n for n in gv.GraphWidget.class_trait_names(sync=True) if n not in plumbing and not n.startswith("_")}
    assert synced == set(contract.Traits.__annotations__)


# -- the builders' output against the TypedDicts ------------------------------------------------------

def conforms(value: Any, tp: Any, where: str = "value") -> list[str]:
    """Where ``value`` (plain JSON) does not fit the Python type ``tp`` (empty list: it fits)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, expected {tp.__name__}"]
        keys = set(value)
        problems = [f"{where}: missing {k}" for k in sorted(tp.__required_keys__ - keys)]
        problems += [f"{where}: unknown {k}" for k in sorted(keys - tp.__required_keys__ - tp.__optional_keys__)]
        hints = typing.get_type_hints(tp)
        for k in sorted(keys & set(hints)):
            problems += conforms(value[k], hints[k], f"{where}.{k}")
        return problems
    if origin in (typing.Union, types.UnionType):
        tries = [conforms(value, a, where) for a in args]
        return [] if any(not t for t in tries) else min(tries, key=len)
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} not in {args}"]
    if origin is list or origin is tuple:
        if not isinstance(value, list) or (origin is tuple and len(value) != len(args)):
            return [f"{where}: {value!r:.60} is not a {tp}"]
        items = args * len(value) if origin is list else args
        return [p for i, (v, a) in enumerate(zip(value, items, strict=True)) for p in conforms(v, a, f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        return [p for k, v in value.items() for p in conforms(v, args[1], f"{where}[{k!r}]")]
    if tp is type(None):
        return [] if value is None else [f"{where}: {value!r} is not null"]
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{where}: {value!r} is not a bool"]
    if tp in (int, float):
        named = value in ("NaN", "Infinity", "-Infinity")  # non-finite numbers travel as names (finite_json)
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) or named
        return [] if ok else [f"{where}: {value!r} is not a number"]
    if tp is str:
        return [] if isinstance(value, str) else [f"{where}: {value!r} is not a string"]
    raise AssertionError(f"cannot check {tp!r}")


def assert_conforms(value: Any, tp: Any) -> None:
    problems = conforms(json.loads(json.dumps(value, allow_nan=False)), tp)
    assert problems == [], problems[:10]


def test_conforms_finds_a_missing_and_an_unknown_field() -> None:
    edge = {"source": "a", "target": "b", "output_nr": 0, "input_nr": 1, "shape": [2]}
    assert conforms(edge, contract.GraphEdge) == []
    assert conforms({**edge, "shape": "2"}, contract.GraphEdge) != []
    assert conforms({k: v for k, v in edge.items() if k != "source"} | {"src": "a"}, contract.GraphEdge) == [
        "value: missing source", "value: unknown src"]


def test_every_builder_gives_contract_data() -> None:
    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).pow(2).mean()
    g = gv.trace(loss, model=model, capture=cap)
    mem = gv.memory_held(g)
    rec = gv.record_backward(loss, model=model, capture=cap, accumulate=True)
    flow = gv.gradient_flow(model)
    other = gv.trace(model(torch.randn(3, 4)).detach().requires_grad_().sum())
    assert_conforms(page.graph(g), contract.GraphPayload)
    assert_conforms(page.recording(rec), contract.Recording)
    assert_conforms(page.diff(gv.diff(g, other)), contract.GraphDiff)
    for source in (mem, flow):
        assert_conforms(page.overlay(source, graph=g if source is flow else None), contract.Overlay)
    widget = gv.GraphWidget(rec, overlay=flow, toggles={"detach": ["call:fc1"], "freeze": []})
    assert_conforms(widget.page_state(), contract.Traits)
    assert_conforms(gv.GraphWidget(g).page_state(), contract.Traits)

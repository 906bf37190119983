"""The facts the checkpointing what-if reads of a graph, as one plain-JSON table (the page's
``checkpoint_table`` trait): per op its call, order, estimated FLOPs and the activation storages it saved;
per module call the tensors entering it from outside. The rule over it is
:mod:`gradviz_nb.analysis.checkpointing`. Pure data, no torch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypedDict

import networkx as nx

from gradviz_nb.analysis.memory import _flops, _saves_output
from gradviz_nb.tracing.calltree import CallTree
from gradviz_nb.tracing.graph import AutogradGraph

RNG_BYTES = 5056  # torch.get_rng_state() on CPU: the Mersenne Twister state as a uint8 tensor
_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


class CheckpointOp(TypedDict):
    """One op node: its call, order, estimated FLOPs and the activation storages it saved."""

    id: str
    call: str
    seq: int
    flops: int
    saved: list[int]  # storage indices into CheckpointTable.storages (parameters left out)
    packs: bool  # saved anything (a checkpoint hook would pack it)
    saves_output: bool


class CheckpointInput(TypedDict):
    """The tensors a call's ops receive from ops outside it."""

    call: str
    storages: list[int]
    producers: list[str]  # nodes outside the call that make them (requires grad exactly when one exists)


class CheckpointTable(TypedDict):
    """What the rule needs of a graph, as the page gets it (trait ``checkpoint_table``)."""

    rng_bytes: int
    storages: list[int]  # bytes of each storage
    ops: list[CheckpointOp]
    inputs: list[CheckpointInput]


def _itemsize(dtype: str) -> int:
    return _ITEMSIZE.get(dtype.removeprefix("torch."), 4)


def table(graph: AutogradGraph) -> CheckpointTable:
    """The facts the rule reads, from the trace's saved-tensor records and module calls (plain JSON)."""
    g = graph.nx
    index: dict[Any, int] = {}
    sizes: list[int] = []

    def storage(key: Any, nbytes: int) -> int:
        if key not in index:
            index[key] = len(sizes)
            sizes.append(nbytes)
        return index[key]

    ops: list[CheckpointOp] = []
    for n, d in g.nodes(data=True):
        if d["kind"] != "op":
            continue
        saved = [storage(s["storage"], int(s["storage_bytes"])) for s in d.get("saved", [])
                 if s.get("storage") is not None and not s.get("param") and not s.get("packed")]
        ops.append({"id": n, "call": d["call"], "seq": int(d["seq"]), "flops": _flops(g, n, d),
                    "saved": sorted(set(saved)), "packs": bool(d.get("saved")), "saves_output": _saves_output(d)})
    inputs = _inputs(graph, storage)
    return {"rng_bytes": RNG_BYTES, "storages": sizes, "ops": ops, "inputs": inputs}


def _inputs(graph: AutogradGraph, storage: Any) -> list[CheckpointInput]:
    """Per call, the tensors its ops receive from outside it, in one pass over the edges: an edge enters
    every call around its consumer that is not around its producer."""
    g, tree = graph.nx, CallTree(graph.calls)
    paths = {c["id"]: c["path"] for c in graph.calls}
    consumers: dict[tuple[str, str, int], list[str]] = {}  # (call, producer, output_nr) -> member consumers
    for u, v, e in g.edges(data=True):
        du, dv = g.nodes[u], g.nodes[v]
        if dv["kind"] != "op":
            continue
        around_u = set(tree.chain(du["call"])) if du["kind"] == "op" else set()
        for call in tree.chain(dv["call"]):
            if call in around_u:
                break
            if du["kind"] == "leaf" and any(name.startswith(paths[call] + ".") for name in du["names"]):
                continue  # the call's own parameter, not an input
            for out in sorted({o for o, _ in e["slots"]}):
                consumers.setdefault((call, u, out), []).append(v)
    found: dict[str, CheckpointInput] = {c["id"]: {"call": c["id"], "storages": [], "producers": []}
                                         for c in graph.calls}
    for (call, u, out), used_by in sorted(consumers.items(), key=lambda kv: kv[0]):
        record, d = found[call], g.nodes[u]
        if u not in record["producers"]:
            record["producers"].append(u)
        if d["kind"] == "leaf" and d["names"]:
            continue  # a parameter passed in: held by the model anyway
        shape = next((g.edges[u, v].get("shape") for v in used_by), None)
        inside = functools.partial(_inside_call, g, tree, call)
        match = _saved_as_input(g, sorted(set(used_by), key=lambda n: g.nodes[n]["seq"]), shape, d["dtype"], inside)
        if match is not None:
            record["storages"].append(storage(match[0], match[1]))
        elif shape is not None:
            record["storages"].append(storage(("input", u, out), _itemsize(d["dtype"]) * _numel(shape)))
    for record in found.values():
        record["storages"] = sorted(set(record["storages"]))
    return [found[c["id"]] for c in graph.calls]


def _numel(shape: list[int]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def _inside_call(g: nx.DiGraph, tree: CallTree, call: str, n: str) -> bool:
    return g.nodes[n]["kind"] == "op" and tree.inside(g.nodes[n]["call"], {call})


VIEW_DEPTH = 4  # how far an input is followed through ops that save nothing (views, reshapes)


def _saved_as_input(g: nx.DiGraph, consumers: list[str], shape: Any, dtype: str,
                    inside: Callable[[str], bool]) -> tuple[Any, int] | None:
    """The storage a member op saved of an incoming tensor: an activation of its size and dtype that is not
    an output of the saving op, at its consumers or, through ops that save nothing (a Linear's input
    view), at theirs; the first in forward order."""
    if shape is None:
        return None
    numel, frontier, seen = _numel(shape), consumers, set(consumers)
    for _ in range(VIEW_DEPTH):
        following: list[str] = []
        for n in frontier:
            saved = g.nodes[n].get("saved", [])
            for s in saved:
                if (s.get("storage") is not None and not s.get("param") and s["shape"] is not None
                        and _numel(s["shape"]) == numel and s["dtype"] == dtype and not s["name"].startswith("result")):
                    return s["storage"], int(s["storage_bytes"])
            if not saved:
                following += [v for v in sorted(g.successors(n), key=lambda m: g.nodes[m]["seq"])
                              if v not in seen and inside(v)]
        seen.update(following)
        frontier = following
    return None

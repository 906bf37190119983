"""AutogradGraph -> the ``GraphPayload`` the page draws (``js/src/payload.ts``; typed in ``contract``).

The eager payload (:func:`graph`, also ``page.graph``) holds every node and edge record. Big graphs go
lazy (``gradviz_nb.widgets.page.lazy``), built from the same record functions here (:func:`node_records`,
:func:`edge_records`), so both modes give the same records in the same order by construction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any, cast

import networkx as nx

from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.widgets.names import graph_prefix
from gradviz_nb.widgets.page.contract import FoldGroup, GraphEdge, GraphMeta, GraphNode, GraphPayload, ModuleCall

NODE_FIELDS = ("kind", "op", "label", "module", "call", "names", "shape", "dtype", "requires_grad", "saved", "value")
INITIAL_VISIBLE = 60  # open deeper levels while the first view stays about this many items
FOLD_MIN = 3  # the shortest run of identical sibling calls drawn folded ("3 × Block")


def node_record(node: str, data: dict[str, Any]) -> GraphNode:
    """One ``GraphNode`` record (``js/src/payload.ts``) from a node id and its attributes. Saved tensors
    keep the contract's name, shape and dtype: the trace's storage bookkeeping (bytes, storage index,
    packed, ...) is for the memory analysis, not the page."""
    record = cast(GraphNode, {"id": node, **{k: data[k] for k in NODE_FIELDS}})
    record["saved"] = [{"name": s["name"], "shape": s["shape"], "dtype": s["dtype"]} for s in data["saved"]]
    for key in ("stats", "grad"):  # leaves only (tracing/summary.py): a few numbers each, bounded in size
        if key in data:
            record[key] = data[key]
    return record


def node_records(g: nx.DiGraph) -> list[GraphNode]:
    """Every ``GraphNode`` record, in the graph's node order (the order of the payload's ``nodes``)."""
    return [node_record(n, d) for n, d in g.nodes(data=True)]


def edge_records(g: nx.DiGraph) -> Iterator[GraphEdge]:
    """Every ``GraphEdge`` record, one per slot, in the order of the payload's ``edges``."""
    for u, v, d in g.edges(data=True):
        for out, inp in d["slots"]:
            yield {"source": u, "target": v, "output_nr": out, "input_nr": inp, "shape": d["shape"]}


def graph_meta(graph: AutogradGraph, num_edges: int) -> GraphMeta:
    """The payload's ``meta`` (``GraphMeta``); ``num_edges`` counts edge slots."""
    g = graph.nx
    return {
        "torch_version": g.graph["torch_version"],
        "captured": g.graph["captured"],
        "notes": graph.notes,
        "num_nodes": g.number_of_nodes(),
        "num_edges": num_edges,
        "prefix": graph_prefix(c["path"] for c in graph.calls),
    }


def graph(autograd: AutogradGraph) -> GraphPayload:
    """Everything the page needs to draw ``autograd`` (eager: every record), as plain JSON: it can
    redraw with no kernel running.

    Example::

        from gradviz_nb.widgets import page
        p = page.graph(gv.trace(loss, model=model, capture=cap))
        p["nodes"][0]["op"], len(p["edges"]), p["folds"]
    """
    g = autograd.nx
    edges = list(edge_records(g))
    return {
        "version": 1,
        "nodes": node_records(g),
        "edges": edges,
        "calls": module_calls(autograd),
        "ghosts": list(g.graph.get("ghosts", [])),
        "meta": graph_meta(autograd, len(edges)),
        "folds": fold_groups(autograd),
    }


def module_calls(autograd: AutogradGraph) -> list[ModuleCall]:
    """The graph's module calls as ``ModuleCall`` records (parents first)."""
    calls: list[ModuleCall] = autograd.calls  # the data model's ModuleCallData has the same fields
    return calls


def initial_expanded(graph: AutogradGraph, budget: int = INITIAL_VISIBLE) -> list[str]:
    """Module calls to open at first: whole levels of boxes, while the view stays within ``budget``.

    A model with one top-level child (a wrapper around a transformer) opens to its blocks instead of
    showing a single box; a 12-block model shows its blocks collapsed.
    """
    calls = graph.calls
    depth: dict[str, int] = {}
    for c in calls:  # parents come first
        depth[c["id"]] = depth[c["parent"]] + 1 if c["parent"] else 0
    members = Counter(d for _, d in graph.nx.nodes(data="call"))  # direct members of each call
    children = Counter(c["parent"] for c in calls)
    expanded: list[str] = []
    visible = members[""] + children[""]
    for level in range(max(depth.values(), default=-1) + 1):
        opening = [c["id"] for c in calls if depth[c["id"]] == level]
        grown = sum(members[i] + children[i] - 1 for i in opening)
        if visible + grown > budget:
            break
        expanded += opening
        visible += grown
    return expanded


def call_signatures(graph: AutogradGraph) -> dict[str, int]:
    """Structure signature of every module call that holds graph nodes, as a small int (equal int =
    equal structure). See :func:`fold_groups` for what the signature is made of."""
    g = graph.nx
    calls = [c for c in graph.calls if c["size"] > 0]
    parent = {c["id"]: c["parent"] for c in graph.calls}
    ops: dict[str, Counter[tuple[Any, ...]]] = {"": Counter(), **{c["id"]: Counter() for c in calls}}
    for _, d in g.nodes(data=True):
        shape = tuple(d["shape"]) if d["shape"] is not None else None
        ops[d["call"]][(d["kind"], d["op"], shape)] += 1
    # A slot is internal to every call enclosing both its ends: count it at the innermost such call
    # (the two calls' lowest common ancestor) and sum bottom-up.
    call_of = dict(g.nodes(data="call"))
    internal: Counter[str] = Counter()
    for u, v, slots in g.edges(data="slots"):
        lowest = call_of[u]
        if lowest != call_of[v]:
            up = set(_ancestors(lowest, parent))
            lowest = next(c for c in _ancestors(call_of[v], parent) if c in up)
        internal[lowest] += len(slots)
    children: dict[str, list[str]] = {c["id"]: [] for c in calls}
    for c in calls:
        if c["parent"] in children:
            children[c["parent"]].append(c["id"])
    interned: dict[tuple[Any, ...], int] = {}
    signature: dict[str, int] = {}
    for c in reversed(calls):  # children after parents in calls order: reversed is bottom-up
        cid = c["id"]
        internal[c["parent"]] += internal[cid]
        key = (c["type"], tuple(signature[k] for k in children[cid]), tuple(sorted(ops[cid].items())), internal[cid])
        signature[cid] = interned.setdefault(key, len(interned))
    return signature


def _ancestors(call: str, parent: dict[str, str]) -> Iterator[str]:
    """``call`` itself, then its enclosing calls outwards, ending with ``""`` (the top level)."""
    while call:
        yield call
        call = parent[call]
    yield ""


def fold_groups(graph: AutogradGraph, fold_min: int = FOLD_MIN) -> list[FoldGroup]:
    """Runs of consecutive sibling module calls with identical structure, each one ``FoldGroup``
    (``js/src/payload.ts``): ``{"id": "fold:<first call id>", "calls": [...], "parent", "type"}``.

    The rule: only calls holding graph nodes (``size > 0``) take part. A call's structure signature is
    its module type, the ordered signatures of its child calls, the sorted multiset of its direct
    member nodes' ``(kind, op, output shape)``, and the number of edge slots with both ends inside it (at
    any depth). Names do not count (``blocks.0`` and ``blocks.1`` differ only in weights); shapes do, so
    ResNet stages of different widths stay apart. A run is a
    maximal sequence of calls under one parent, consecutive among that parent's calls in ``calls``
    order, with equal signatures; runs of at least ``fold_min`` calls are returned, in calls order.
    Computed once per graph in O(nodes + calls + edges x module depth).

    Example::

        fold_groups(gv.trace(loss, capture=cap))   # GPT-2, 6 layers:
        # [{"id": "fold:blocks.0", "calls": ["blocks.0", ..., "blocks.5"], "parent": "", "type": "Block"}]
    """
    signature = call_signatures(graph)
    siblings: dict[str, list[ModuleCall]] = {}
    for c in graph.calls:
        if c["id"] in signature:
            siblings.setdefault(c["parent"], []).append(c)
    runs: list[list[ModuleCall]] = []
    for group in siblings.values():
        run = [group[0]]
        for c in group[1:]:
            if signature[c["id"]] == signature[run[0]["id"]]:
                run.append(c)
                continue
            runs.append(run)
            run = [c]
        runs.append(run)
    position = {c["id"]: i for i, c in enumerate(graph.calls)}
    runs = sorted((r for r in runs if len(r) >= fold_min), key=lambda r: position[r[0]["id"]])
    return [
        {"id": f"fold:{r[0]['id']}", "calls": [c["id"] for c in r], "parent": r[0]["parent"], "type": r[0]["type"]}
        for r in runs
    ]

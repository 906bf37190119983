"""AutogradGraph -> the JSON the page draws (the contract is ``js/src/payload.ts``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gradviz_nb.tracing.graph import AutogradGraph

NODE_FIELDS = ("kind", "op", "label", "module", "call", "names", "shape", "dtype", "requires_grad", "saved", "value")
INITIAL_VISIBLE = 60  # open deeper levels while the first view stays about this many items


def to_payload(graph: AutogradGraph) -> dict[str, Any]:
    """Everything the page needs, as plain JSON: it can redraw with no kernel running."""
    g = graph.nx
    nodes = [{"id": n, **{k: d[k] for k in NODE_FIELDS}} for n, d in g.nodes(data=True)]
    edges = [
        {"source": u, "target": v, "output_nr": out, "input_nr": inp, "shape": d["shape"]}
        for u, v, d in g.edges(data=True)
        for out, inp in d["slots"]
    ]
    meta = {
        "torch_version": g.graph["torch_version"],
        "captured": g.graph["captured"],
        "notes": graph.notes,
        "num_nodes": g.number_of_nodes(),
        "num_edges": len(edges),
    }
    ghosts = list(g.graph.get("ghosts", []))
    return {"version": 1, "nodes": nodes, "edges": edges, "calls": graph.calls, "ghosts": ghosts, "meta": meta}


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

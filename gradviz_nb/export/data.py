"""AutogradGraph <-> JSON (exact round trip), GraphML (networkx-readable) and DOT (Graphviz) text.

Everything here is plain data in, plain text out: no torch, no widget, no Graphviz install needed.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import networkx as nx

from gradviz_nb.errors import GradvizError

if TYPE_CHECKING:
    from gradviz_nb.tracing.graph import AutogradGraph
    from gradviz_nb.tracing.schema import ModuleCallData

FORMAT = "gradviz_nb.AutogradGraph"
VERSION = 1
_GRAPHML_SCALARS = (str, int, float, bool)


def to_json(graph: AutogradGraph, indent: int | None = None) -> str:
    """The whole graph (nodes in order, attributes, edges with ``slots``, graph attributes) as JSON text.

    Example::

        text = g.to_json()
        assert gv.AutogradGraph.from_json(text).nx.nodes(data=True) == g.nx.nodes(data=True)
    """
    g = graph.nx
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "graph": g.graph,
        "nodes": [[n, d] for n, d in g.nodes(data=True)],
        "edges": [[u, v, d] for u, v, d in g.edges(data=True)],
    }
    return json.dumps(doc, indent=indent, ensure_ascii=False, allow_nan=False)


def from_json(text: str | bytes) -> AutogradGraph:
    """The :class:`AutogradGraph` written by :func:`to_json` (same node order, ids and attributes)."""
    from gradviz_nb.tracing.graph import AutogradGraph

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise GradvizError(f"from_json: not JSON ({err}); pass the text AutogradGraph.to_json() wrote.") from err
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GradvizError("from_json: this JSON was not written by AutogradGraph.to_json() (no 'format' marker).")
    if doc.get("version") != VERSION:
        raise GradvizError(f"from_json: format version {doc.get('version')!r} is not {VERSION}; upgrade gradviz_nb.")
    g = nx.DiGraph()
    g.graph.update(doc["graph"])
    g.add_nodes_from((n, d) for n, d in doc["nodes"])
    g.add_edges_from((u, v, d) for u, v, d in doc["edges"])
    return AutogradGraph(g)


def graphml_ready(graph: AutogradGraph) -> nx.DiGraph:
    """A copy of ``graph.nx`` whose attribute values GraphML accepts: lists, dicts and ``None`` become
    JSON text (``"[4, 8]"``, ``"null"``), so ``json.loads`` on a value read back restores it."""

    def scalar(v: Any) -> Any:
        if isinstance(v, str):
            return str(v)  # torch.__version__ is a str subclass networkx does not know
        return v if isinstance(v, _GRAPHML_SCALARS) else json.dumps(v)

    def plain(attrs: dict[str, Any]) -> dict[str, Any]:
        return {k: scalar(v) for k, v in attrs.items()}

    g = graph.nx
    out = nx.DiGraph()
    out.graph.update(plain(g.graph))
    out.add_nodes_from((n, plain(d)) for n, d in g.nodes(data=True))
    out.add_edges_from((u, v, plain(d)) for u, v, d in g.edges(data=True))
    return out


def to_graphml(graph: AutogradGraph, path: str | os.PathLike[str]) -> None:
    """Write GraphML (e.g. for Gephi, yEd or ``networkx.read_graphml``); see :func:`graphml_ready`.

    Example::

        g.to_graphml("graph.graphml")
        h = networkx.read_graphml("graph.graphml")
        json.loads(h.nodes["n0"]["shape"])     # [1, 16, 101]
    """
    nx.write_graphml(graphml_ready(graph), os.fspath(path))


def _quote(text: object) -> str:
    """A DOT double-quoted string: backslashes, quotes and line breaks escaped (names are user input)."""
    s = str(text).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + s.replace("\r", "").replace("\n", "\\n") + '"'


_KIND_STYLE = {
    "op": 'shape=box, style="rounded,filled", fillcolor="#e8eef7"',
    "leaf": 'shape=box, style=filled, fillcolor="#d9f2d9"',
    "root": 'shape=ellipse, style=filled, fillcolor="#f7e1c8"',
}


def _shape_text(shape: object) -> str:
    return "×".join(map(str, shape)) if isinstance(shape, list) and shape else ("scalar" if shape == [] else "")


def to_dot(graph: AutogradGraph) -> str:
    """The graph as Graphviz DOT text: module calls as nested clusters, forward-direction edges.

    Example::

        open("graph.dot", "w").write(g.to_dot())      # then: dot -Tsvg graph.dot -o graph.svg
    """
    g = graph.nx
    members: dict[str, list[str]] = {}
    for n, d in g.nodes(data=True):
        members.setdefault(d.get("call", "") or "", []).append(n)
    children: dict[str, list[ModuleCallData]] = {}
    for c in graph.calls:
        children.setdefault(c["parent"], []).append(c)
    lines = ["digraph autograd {", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']

    def node_line(n: str, indent: str) -> str:
        d = g.nodes[n]
        label = "\n".join(x for x in (d.get("label", n), _shape_text(d.get("shape"))) if x)
        return f"{indent}{_quote(n)} [label={_quote(label)}, {_KIND_STYLE.get(d.get('kind', ''), '')}];"

    def emit(call_id: str, indent: str) -> None:
        for c in children.get(call_id, []):
            lines.append(f"{indent}subgraph {_quote('cluster_' + c['id'])} {{")
            lines.append(f"{indent}  label={_quote(c['id'] + ' · ' + c['type'])}; style=rounded; color=\"#888888\";")
            emit(c["id"], indent + "  ")
            lines.append(f"{indent}}}")
        lines.extend(node_line(n, indent) for n in members.get(call_id, []))

    emit("", "  ")
    known = {c["id"] for c in graph.calls} | {""}
    for call_id, nodes in members.items():  # nodes whose call is unknown (should not happen): top level
        if call_id not in known:
            lines.extend(node_line(n, "  ") for n in nodes)
    for u, v, d in g.edges(data=True):
        label = _shape_text(d.get("shape"))
        lines.append(f"  {_quote(u)} -> {_quote(v)}" + (f" [label={_quote(label)}];" if label else ";"))
    lines.append("}")
    return "\n".join(lines) + "\n"

"""AutogradGraph <-> JSON (exact round trip), GraphML (networkx-readable) and DOT (Graphviz) text.

Everything here is plain data in, plain text out: no torch, no widget, no Graphviz install needed.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import networkx as nx

from gradviz_nb.errors import GradvizError
from gradviz_nb.files import target, write_atomic
from gradviz_nb.validate import given, positive_int

if TYPE_CHECKING:
    from gradviz_nb.tracing.graph import AutogradGraph
    from gradviz_nb.tracing.schema import ModuleCallData

FORMAT = "gradviz_nb.AutogradGraph"
VERSION = 1
_GRAPHML_SCALARS = (str, int, float, bool)
MAX_DEPTH = 64
"""Deepest nesting of lists and dicts :func:`from_json` reads (the data model needs 5)."""
MAX_CALL_DEPTH = 512
"""Deepest module-call nesting :func:`from_json` reads (real models stay far below it)."""
_TOP_KEYS = {"format", "version", "graph", "nodes", "edges"}

# What GraphML and DOT files never carry raw: characters no XML 1.0 document may hold (C0 controls but tab and
# line feed, surrogates, U+FFFE/U+FFFF), carriage return (XML readers turn it into a line feed, DOT drops it),
# DEL and the C1 controls. Tab and line feed stay (DOT writes a line feed as a \n label break).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
# What json.dumps leaves raw but to_json escapes as \uXXXX (read back exactly): DEL, the C1 controls, lone
# surrogates (not UTF-8), U+FFFE/U+FFFF and the line separators JavaScript treats as line ends.
_JSON_RAW = re.compile("[\x7f-\x9f\ud800-\udfff\ufffe\uffff\u2028\u2029]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character (and anything XML cannot hold) written out as ``\\xNN`` or
    ``\\uNNNN`` text: what GraphML and DOT files carry instead of the raw character."""
    return _CONTROL.sub(_shown, text)


def to_json(graph: AutogradGraph, indent: int | None = None) -> str:
    """The whole graph (nodes in order, attributes, edges with ``slots``, graph attributes) as JSON text.

    Example::

        text = g.to_json()
        assert gv.AutogradGraph.from_json(text).nx.nodes(data=True) == g.nx.nodes(data=True)
    """
    _check_graph(graph, "to_json")
    if indent is not None:
        positive_int("indent", indent, lo=0, hi=16, hint="It is the spaces per level, or None for one line.")
    g = graph.nx
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "graph": g.graph,
        "nodes": [[n, d] for n, d in g.nodes(data=True)],
        "edges": [[u, v, d] for u, v, d in g.edges(data=True)],
    }
    text = json.dumps(doc, indent=indent, ensure_ascii=False, allow_nan=False)
    # json escapes the C0 controls itself; the rest of _JSON_RAW (only ever inside strings) is escaped here.
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def from_json(text: str | bytes) -> AutogradGraph:
    """The :class:`AutogradGraph` written by :func:`to_json` (same node order, ids and attributes).

    Everything is checked before the graph is built: the JSON itself (nesting at most :data:`MAX_DEPTH`),
    the records against the data model (``tracing/schema.py``), and every reference: edges, roots, ghosts,
    checkpoints and nodes name known nodes and module calls, and the calls' parents form a tree (no cycle, at
    most :data:`MAX_CALL_DEPTH` deep). Anything else raises one :class:`GradvizError` saying what is wrong.
    """
    from gradviz_nb.tracing.graph import AutogradGraph
    from gradviz_nb.tracing.schema import schema_problems

    def bad(what: str) -> GradvizError:
        return GradvizError(f"from_json: {what}; pass the text AutogradGraph.to_json() wrote.")

    if not isinstance(text, str | bytes | bytearray):
        raise bad(f"expected JSON text (str or bytes), got {type(text).__name__}")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise bad(f"the JSON is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, an integer too long to read
        raise bad(f"not JSON ({err})") from err
    if _too_deep(doc, MAX_DEPTH):
        raise bad(f"the JSON is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GradvizError("from_json: this JSON was not written by AutogradGraph.to_json() (no 'format' marker).")
    if doc.get("version") != VERSION:
        raise GradvizError(f"from_json: format version {doc.get('version')!r} is not {VERSION}; upgrade gradviz_nb.")
    if set(doc) != _TOP_KEYS:
        raise bad(f"the keys are {sorted(doc)}, not {sorted(_TOP_KEYS)}")
    nodes, edges, attrs = doc["nodes"], doc["edges"], doc["graph"]
    if not isinstance(attrs, dict):
        raise bad("'graph' is not an object")
    if not isinstance(nodes, list) or not all(
            isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and isinstance(r[1], dict) for r in nodes):
        raise bad("'nodes' must be a list of [node id, attributes] pairs")
    if not isinstance(edges, list) or not all(
            isinstance(r, list) and len(r) == 3 and isinstance(r[0], str) and isinstance(r[1], str)
            and isinstance(r[2], dict) for r in edges):
        raise bad("'edges' must be a list of [from id, to id, attributes] triples")
    ids = [n for n, _ in nodes]
    known = set(ids)
    if len(known) != len(ids):
        raise bad(f"node id {_first_repeat(ids)!r} is listed twice")
    for u, v, _ in edges:
        if u not in known or v not in known:
            raise bad(f"the edge {u!r} -> {v!r} names an unknown node {(u if u not in known else v)!r}")
    pairs = [(u, v) for u, v, _ in edges]
    if len(set(pairs)) != len(pairs):
        raise bad(f"the edge {_first_repeat(pairs)!r} is listed twice")
    g = nx.DiGraph()
    g.graph.update(attrs)
    g.add_nodes_from((n, d) for n, d in nodes)
    g.add_edges_from((u, v, d) for u, v, d in edges)
    problems = schema_problems(g, limit=3)
    if problems:
        raise bad("it does not match the data model: " + "; ".join(problems))
    _check_references(g, bad)
    return AutogradGraph(g)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (to_json never writes it)")


def _first_repeat(items: list[Any]) -> Any:
    seen = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def _too_deep(value: Any, limit: int) -> bool:
    """Whether lists and dicts nest deeper than ``limit`` in ``value`` (no recursion: any depth is safe)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _check_references(g: nx.DiGraph, bad: Callable[[str], GradvizError]) -> None:
    """Every id the graph's records name exists, and the module calls form a tree."""
    calls = g.graph["calls"]
    call_ids = [c["id"] for c in calls]
    if len(set(call_ids)) != len(call_ids) or "" in call_ids:
        raise bad(f"the module call id {(_first_repeat(call_ids) if '' not in call_ids else '')!r} is "
                  "listed twice or empty")
    parent = {c["id"]: c["parent"] for c in calls}
    depth: dict[str, int] = {"": -1}
    for cid in call_ids:  # walk up each chain once: an unknown parent or a cycle is found, never followed
        chain: list[str] = []
        seen: set[str] = set()
        here = cid
        while here not in depth:
            if here not in parent:
                raise bad(f"the module call {chain[-1]!r} has an unknown parent {here!r}")
            if here in seen:
                raise bad(f"the module calls {chain[chain.index(here):][:5]!r} are each other's parents (a cycle)")
            if len(chain) > MAX_CALL_DEPTH:
                raise bad(f"module calls nest deeper than {MAX_CALL_DEPTH} levels")
            chain.append(here)
            seen.add(here)
            here = parent[here]
        for i, c in enumerate(reversed(chain)):
            depth[c] = depth[here] + 1 + i
            if depth[c] >= MAX_CALL_DEPTH:
                raise bad(f"module calls nest deeper than {MAX_CALL_DEPTH} levels")
    for n, d in g.nodes(data=True):
        if d["call"] and d["call"] not in parent:
            raise bad(f"node {n!r} is in an unknown module call {d['call']!r}")
    for r in g.graph["roots"]:
        if r not in g:
            raise bad(f"the root {r!r} is not a node")
    for ghost in g.graph["ghosts"]:
        named = [t for t in ghost["targets"] if t not in g] + (
            [ghost["source"]] if ghost["source"] is not None and ghost["source"] not in g else [])
        if named:
            raise bad(f"the ghost {ghost['id']!r} names an unknown node {named[0]!r}")
        if ghost["call"] and ghost["call"] not in parent:
            raise bad(f"the ghost {ghost['id']!r} is in an unknown module call {ghost['call']!r}")
    for n in g.graph["checkpoints"]:
        if n not in g:
            raise bad(f"the checkpoint {n!r} is not a node")


def graphml_ready(graph: AutogradGraph) -> nx.DiGraph:
    """A copy of ``graph.nx`` whose attribute values GraphML accepts: lists, dicts and ``None`` become
    JSON text (``"[4, 8]"``, ``"null"``), so ``json.loads`` on a value read back restores it."""

    def scalar(v: Any) -> Any:
        if isinstance(v, str):
            return visible(str(v))  # torch.__version__ is a str subclass networkx does not know
        if isinstance(v, _GRAPHML_SCALARS):
            return v
        return json.dumps(v, ensure_ascii=True)  # JSON text of plain ASCII: every control character escaped

    def plain(attrs: dict[str, Any]) -> dict[str, Any]:
        return {visible(str(k)): scalar(v) for k, v in attrs.items()}

    def node(n: Any) -> Any:
        return visible(n) if isinstance(n, str) else n

    g = graph.nx
    out = nx.DiGraph()
    out.graph.update(plain(g.graph))
    out.add_nodes_from((node(n), plain(d)) for n, d in g.nodes(data=True))
    out.add_edges_from((node(u), node(v), plain(d)) for u, v, d in g.edges(data=True))
    return out


def _check_graph(graph: object, who: str) -> None:
    from gradviz_nb.tracing.graph import AutogradGraph  # at run time (the graph's facades import this module)

    if not isinstance(graph, AutogradGraph):
        raise GradvizError(f"{who}: graph must be an AutogradGraph (gv.trace(loss) or gv.from_json(text)); "
                           f"got {given(graph)}.")


def to_graphml(graph: AutogradGraph, path: str | os.PathLike[str]) -> None:
    """Write GraphML (e.g. for Gephi, yEd or ``networkx.read_graphml``); see :func:`graphml_ready`.
    Control characters in names, which XML cannot hold, are written as ``\\xNN`` text (:func:`visible`).
    The path is checked first and the file written atomically (``gradviz_nb.files``).

    Example::

        g.to_graphml("graph.graphml")
        h = networkx.read_graphml("graph.graphml")
        json.loads(h.nodes["n0"]["shape"])     # [1, 16, 101]
    """
    _check_graph(graph, "to_graphml")
    out = target("path", path, (".graphml", ".xml"), "to_graphml")
    buffer = io.BytesIO()
    nx.write_graphml(graphml_ready(graph), buffer, encoding="utf-8")
    write_atomic(out, buffer.getvalue(), "to_graphml")


def _quote(text: object) -> str:
    """A DOT double-quoted string: control characters shown as ``\\xNN`` text, backslashes, quotes and line
    breaks escaped (names are user input)."""
    s = visible(str(text)).replace("\\", "\\\\").replace('"', '\\"')
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
    _check_graph(graph, "to_dot")
    g = graph.nx
    members: dict[str, list[str]] = {}
    for n, d in g.nodes(data=True):
        members.setdefault(d.get("call", "") or "", []).append(n)
    children: dict[str, list[ModuleCallData]] = {}
    by_id = {c["id"]: c for c in graph.calls}
    for c in graph.calls:
        children.setdefault(c["parent"], []).append(c)
    lines = ["digraph autograd {", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']

    def node_line(n: str, indent: str) -> str:
        d = g.nodes[n]
        label = "\n".join(x for x in (d.get("label", n), _shape_text(d.get("shape"))) if x)
        return f"{indent}{_quote(n)} [label={_quote(label)}, {_KIND_STYLE.get(d.get('kind', ''), '')}];"

    # Clusters nested as the calls are, walked with a stack (any depth), each call's own nodes after its children
    todo: list[tuple[str, str, bool]] = [("", "  ", False)]  # (call id, indent, closing)
    while todo:
        call_id, indent, closing = todo.pop()
        if closing:
            lines.extend(node_line(n, indent + "  ") for n in members.get(call_id, []))
            lines.append(f"{indent}}}")
            continue
        if call_id:
            c = by_id[call_id]
            lines.append(f"{indent}subgraph {_quote('cluster_' + c['id'])} {{")
            lines.append(f"{indent}  label={_quote(c['id'] + ' · ' + c['type'])}; style=rounded; color=\"#888888\";")
            todo.append((call_id, indent, True))
            inner = indent + "  "
        else:
            inner = indent
        todo.extend((c["id"], inner, False) for c in reversed(children.get(call_id, [])))
    lines.extend(node_line(n, "  ") for n in members.get("", []))
    known = {c["id"] for c in graph.calls} | {""}
    for call_id, nodes in members.items():  # nodes whose call is unknown (should not happen): top level
        if call_id not in known:
            lines.extend(node_line(n, "  ") for n in nodes)
    for u, v, d in g.edges(data=True):
        label = _shape_text(d.get("shape"))
        lines.append(f"  {_quote(u)} -> {_quote(v)}" + (f" [label={_quote(label)}];" if label else ";"))
    lines.append("}")
    return "\n".join(lines) + "\n"

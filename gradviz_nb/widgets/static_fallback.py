"""A static picture of a :class:`GraphWidget`'s graph, for front ends that cannot draw the widget.

Why a separate output, and why it hides itself
-----------------------------------------------
A widget's output holds ``application/vnd.jupyter.widget-view+json``. Where no widget manager can
draw it, the picture is lost:

- nbconvert's HTML (and nbviewer, built on it) always prefers that mime type and draws it with
  ``@jupyter-widgets/html-manager``, loaded at view time from a CDN (``unpkg.com`` by default),
  which then loads anywidget's own front end from a CDN too. Offline, behind a proxy, or where
  CDNs are blocked, the output is an empty box, even with the widget state saved in the notebook.
- JupyterLab and Notebook 7, reopening a notebook saved without widget state, show
  "Error displaying widget: model not found".

A ``text/html`` entry in the widget's own mime bundle does not help there: both pick the widget-view
entry first. So :func:`display_with_fallback` displays the widget and then a second, small output:
an inline SVG of the graph (drawn here, in Python, no browser), hidden by default. A CSS rule in that
output reveals it only when the output just before it is a widget output (``.jupyter-widgets``) that
holds no drawn GraphWidget (``.gradviz-root``): the nbconvert page without its CDN scripts, or
JupyterLab's "model not found". Where the widget is drawn, or in front ends with other class names
(VS Code, Colab), the rule does not match and the picture stays hidden: never a second copy of the graph.

The picture is the widget's first view (the same open and closed module boxes), laid out in layers
from the inputs at the top to the loss at the bottom, with orthogonal edges routed through the gaps
between boxes (never through one). A recording's picture of at most :data:`VALUES_UP_TO` boxes writes the
stepper's "data | grad" lines on each small tensor, as they stand after the last recorded step: those
numbers are the lesson. Names reach it as escaped text, never HTML.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import networkx as nx

if TYPE_CHECKING:
    from gradviz_nb.widgets.graph_widget import GraphWidget

MAX_ITEMS = 600  # more boxes than this make an unreadable picture and a heavy notebook: say so instead
VALUES_UP_TO = 60  # boxes: above this the numbers would be unreadable at the picture's size
SMALL_LABEL = 4  # as the stepper (js/src/features/stepper/state.ts): values of up to 4 elements on a node
_LINE_H = 13
CSS_CLASS = "gradviz-static"
# Revealed only right after a widget output that holds no drawn GraphWidget (see the module docstring).
REVEAL_CSS = (
    ".jp-OutputArea-child:has(.jupyter-widgets):not(:has(.gradviz-root)) + .jp-OutputArea-child "
    f".{CSS_CLASS}{{display:block !important}}"
)
_BOX_H, _ROW_GAP, _COL_GAP, _CHAR_W, _PAD = 34, 36, 18, 6.6, 12
_LOOK = {  # fill and stroke per item kind, close to the widget's own colours
    "op": 'fill="#f2f2f2" stroke="#999"',
    "call": 'fill="#e8eef8" stroke="#1a6fc4" stroke-dasharray="4 3"',
    "leaf": 'fill="#dceeff" stroke="#1a6fc4"',
    "root": 'fill="#ffffff" stroke="#111" stroke-width="2"',
}


def visible_items(graph_nx: nx.DiGraph, calls: Sequence[Mapping[str, Any]], expanded: list[str]) -> nx.DiGraph:
    """The graph as the widget first shows it: a node inside a closed module box becomes that box.

    Items are node ids, or ``"call:<id>"`` for a closed box; edges between different items are kept.
    """
    parent = {c["id"]: c["parent"] for c in calls}
    kind = {c["id"]: c["type"] for c in calls}
    opened = set(expanded)

    def item_of(call: str) -> str | None:
        chain = []
        while call:
            chain.append(call)
            call = parent.get(call, "")
        for c in reversed(chain):  # outermost first: the first closed box hides everything inside
            if c not in opened:
                return f"call:{c}"
        return None

    items = nx.DiGraph()
    rep: dict[str, str] = {}
    for n, d in graph_nx.nodes(data=True):
        box = item_of(d.get("call") or "")
        rep[n] = box or n
        if box is None:
            items.add_node(n, text=_node_text(d), kind=d.get("kind", "op"), lines=[])
        elif box not in items:
            cid = box.removeprefix("call:")
            items.add_node(box, text=f"▸ {cid} · {kind.get(cid, '')}", kind="call", lines=[])
    for u, v in graph_nx.edges():
        if rep[u] != rep[v]:
            items.add_edge(rep[u], rep[v])
    return items


def fmt(x: float) -> str:
    """A number as the stepper writes it (js/src/state/numbers.ts ``fmt``): "2", "-1.368", "4.77e-7", "NaN"."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        mantissa, exp = f"{x:.2e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{'+' if int(exp) >= 0 else '-'}{abs(int(exp))}"
    return f"{float(f'{x:.4g}'):g}"  # 4 significant digits, no trailing zeros: JS Number(x.toPrecision(4))


def fmt_vec(v: Sequence[float]) -> str:
    """A short vector in words (a single value without brackets)."""
    return fmt(v[0]) if len(v) == 1 else "[" + ", ".join(fmt(x) for x in v) + "]"


def final_grads(graph_nx: nx.DiGraph, recording: Mapping[str, Any]) -> dict[str, list[float]]:
    """Each node's gradient after the last recorded step, as the stepper shows it there: what an op
    received, a leaf's ``.grad``, a root's seed."""
    last = int(recording.get("passes") or 1) - 1
    grads: dict[str, list[float]] = {}
    received: dict[str, list[Any]] = {}
    for s in recording.get("steps") or []:
        if s.get("pass", 0) != last:
            continue
        got = s.get("received") or []
        received[s["node"]] = got
        leaf = graph_nx.nodes[s["node"]].get("kind") == "leaf" if s["node"] in graph_nx else False
        g = (s.get("leaf_after") or (got[0] if got else None)) if leaf else (got[0] if got else None)
        if g and g.get("value"):
            grads[s["node"]] = list(g["value"])
    for root, d in graph_nx.nodes(data="kind"):
        if d != "root":
            continue
        for u, _, slots in graph_nx.in_edges(root, data="slots"):
            out = (slots or [[0, 0]])[0][0]
            got = received.get(u) or []
            g = got[out] if out < len(got) else None
            if g and g.get("value"):
                grads[root] = list(g["value"])
    return grads


def value_lines(value: Sequence[float] | None, grad: Sequence[float] | None) -> list[str]:
    """The stepper's lines for one node: "data 2 | grad 0.5", or "data [..]" and "grad [..]"."""
    if not value or len(value) > SMALL_LABEL:
        return []
    g = fmt_vec(grad) if grad else "?"
    return [f"data {fmt_vec(value)} | grad {g}"] if len(value) == 1 else [f"data {fmt_vec(value)}", f"grad {g}"]


def add_values(items: nx.DiGraph, graph_nx: nx.DiGraph, recording: Mapping[str, Any]) -> None:
    """Write the recording's "data | grad" lines on the visible nodes that have small values."""
    values = recording.get("values") or {}
    grads = final_grads(graph_nx, recording)
    for n in items:
        if n in graph_nx:
            value = values.get(n) or graph_nx.nodes[n].get("value")
            items.nodes[n]["lines"] = value_lines(value, grads.get(n))


def _node_text(d: dict[str, Any]) -> str:
    if d.get("kind") == "leaf" and d.get("name"):
        return str(d["name"])
    label = str(d.get("label") or d.get("op") or "?")
    shape = d.get("shape")
    return f"{label} {list(shape)}" if shape else label


def _layers(items: nx.DiGraph) -> list[list[str]]:
    """Longest-path layers (inputs on top, the loss at the bottom), each ordered by its predecessors'
    mean position."""
    # Closed boxes can close a cycle (a -> box -> b -> box): layer the condensation, where each
    # cycle is one vertex, so its members share a row.
    dag = nx.condensation(items)
    member_of = dag.graph["mapping"]
    # Counted up from the loss, so each input sits just above its first use rather than in one long
    # top row with arrows across the whole picture.
    height: dict[int, int] = {}
    for c in reversed(list(nx.topological_sort(dag))):
        height[c] = max((height[s] + 1 for s in dag.successors(c)), default=0)
    top = max(height.values(), default=0)
    layer = {n: top - height[member_of[n]] for n in items}
    rows: dict[int, list[str]] = defaultdict(list)
    for n in items:  # insertion order: the trace's order, so ties stay stable
        rows[layer[n]].append(n)
    pos: dict[str, float] = {}
    ordered = []
    for i in sorted(rows):
        row = sorted(
            rows[i],
            key=lambda n: sum(pos.get(p, 0.0) for p in items.predecessors(n)) / max(1, items.in_degree(n)),
        )
        pos.update({n: float(k) for k, n in enumerate(row)})
        ordered.append(row)
    return ordered


Box = tuple[float, float, float, float]  # x, y, width, height


def _place(items: nx.DiGraph, rows: list[list[str]]) -> tuple[dict[str, Box], float, float]:
    """Boxes row by row, each row centred; a row is as tall as its tallest box (value lines add height)."""
    def size(n: str) -> tuple[float, float]:
        texts = [items.nodes[n]["text"], *items.nodes[n].get("lines", [])]
        return max(60.0, _CHAR_W * max(len(t) for t in texts) + 2 * _PAD), _BOX_H + _LINE_H * (len(texts) - 1)

    sizes = {n: size(n) for n in items}
    row_w = [sum(sizes[n][0] for n in row) + _COL_GAP * (len(row) - 1) for row in rows]
    total_w = max(row_w, default=100.0) + 2 * _PAD + _COL_GAP  # one spare lane on the right for long edges
    boxes: dict[str, Box] = {}
    y: float = _PAD
    for i, row in enumerate(rows):
        x = _PAD + (total_w - _COL_GAP - 2 * _PAD - row_w[i]) / 2
        row_h = max((sizes[n][1] for n in row), default=_BOX_H)
        for n in row:
            w, h = sizes[n]
            boxes[n] = (x, y, w, h)
            x += w + _COL_GAP
        y += row_h + _ROW_GAP
    return boxes, total_w, y - _ROW_GAP + _PAD


def _lane(boxes: list[Box], want: list[float], right: float) -> float:
    """An x for a vertical segment that crosses none of ``boxes``: the free candidate closest to the
    wanted xs (the two ends' centres, then the gaps between boxes), else the spare lane on the right."""
    def free(x: float) -> bool:
        return all(not (bx - 3 <= x <= bx + bw + 3) for bx, _, bw, _ in boxes)

    gaps = [bx + bw + _COL_GAP / 2 for bx, _, bw, _ in boxes] + [bx - _COL_GAP / 2 for bx, _, _, _ in boxes]
    options = [x for x in (*want, *gaps) if free(x)]
    return min(options, key=lambda x: sum(abs(x - w) for w in want)) if options else right


def edge_path(u: Box, v: Box, between: list[Box], right: float, dy: tuple[float, float] = (0.5, 0.5)) -> str:
    """An orthogonal path from the bottom of ``u`` to the top of ``v``: down into the gap under ``u``,
    across to a lane free of the ``between`` rows' boxes, down to the gap above ``v``, across, down.
    ``dy``: where in each gap (0 top, 1 bottom) the horizontal runs, so edges sharing a gap stay apart."""
    ux, uy = u[0] + u[2] / 2, u[1] + u[3]
    vx, vy = v[0] + v[2] / 2, v[1]
    if not between:
        mid = uy + (vy - uy) * dy[0]
        return f"M{ux:.1f},{uy:.1f} V{mid:.1f} H{vx:.1f} V{vy:.1f}"
    lane = _lane(between, [ux, vx], right)
    top = uy + _ROW_GAP * dy[0]
    bottom = vy - _ROW_GAP * (1 - dy[1])
    return f"M{ux:.1f},{uy:.1f} V{top:.1f} H{lane:.1f} V{bottom:.1f} H{vx:.1f} V{vy:.1f}"


def _gap_slots(rows: list[list[str]], edges: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[float, float]]:
    """For each edge, where its horizontal runs sit in the gap under its upper end's row and in the gap
    above its lower end's row: edges sharing a gap are spread over its middle, in order of their x."""
    row_of = {n: i for i, row in enumerate(rows) for n in row}
    col = {n: k for row in rows for k, n in enumerate(row)}
    users: dict[int, list[tuple[int, tuple[str, str], int]]] = defaultdict(list)  # gap -> (x order, edge, end)
    for e in edges:
        a, b = sorted(e, key=lambda n: row_of[n])
        if row_of[a] == row_of[b]:
            continue
        users[row_of[a]].append((col[a], e, 0))
        if row_of[b] - row_of[a] > 1:
            users[row_of[b] - 1].append((col[b], e, 1))
    slots: dict[tuple[str, str], list[float]] = {e: [0.5, 0.5] for e in edges}
    for group in users.values():
        group.sort(key=lambda t: t[0])
        for k, (_, e, end) in enumerate(group):
            slots[e][end] = 0.25 + 0.5 * (k + 1) / (len(group) + 1)
    return {e: (a, b) for e, (a, b) in slots.items()}


def graph_svg(items: nx.DiGraph) -> str:
    """An SVG of ``items`` (from :func:`visible_items`): boxes with their text and value lines, orthogonal
    arrows between them routed around boxes."""
    rows = _layers(items)
    boxes, total_w, total_h = _place(items, rows)
    row_of = {n: i for i, row in enumerate(rows) for n in row}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" role="img" aria-label="autograd graph" '
        'font-family="sans-serif" font-size="11">',
        '<defs><marker id="gv-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#888"/></marker></defs>',
    ]
    slots = _gap_slots(rows, list(items.edges()))
    for u, v in items.edges():
        lo, hi = sorted((row_of[u], row_of[v]))
        between = [boxes[n] for r in rows[lo + 1:hi] for n in r]
        a, b = (boxes[u], boxes[v]) if row_of[u] <= row_of[v] else (boxes[v], boxes[u])
        if row_of[u] == row_of[v]:  # same row (a cycle through closed boxes): a short arc under both
            y = a[1] + a[3] + _ROW_GAP / 3
            d = (f"M{a[0] + a[2] / 2:.1f},{a[1] + a[3]:.1f} V{y:.1f} H{b[0] + b[2] / 2:.1f} "
                 f"V{b[1] + b[3]:.1f}")
        else:
            d = edge_path(a, b, between, total_w - _COL_GAP / 2, slots[(u, v)])
        out.append(f'<path d="{d}" fill="none" stroke="#888" stroke-width="1" marker-end="url(#gv-arrow)"/>')
    for n in items:
        x, y, w, h = boxes[n]
        look = _LOOK.get(items.nodes[n]["kind"], _LOOK["op"])
        texts = [items.nodes[n]["text"], *items.nodes[n].get("lines", [])]
        first = y + h / 2 + 4 - _LINE_H * (len(texts) - 1) / 2
        lines = "".join(
            f'<text x="{x + w / 2:.1f}" y="{first + k * _LINE_H:.1f}" text-anchor="middle" '
            f'fill="{"#222" if k == 0 else "#5a3d00"}">{html.escape(t)}</text>'  # user text: never markup
            for k, t in enumerate(texts))
        out.append(f'<g class="gradviz-static-node"><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" '
                   f'height="{h:.1f}" rx="5" {look}/>{lines}</g>')
    out.append("</svg>")
    return "".join(out)


def fallback_html(widget: GraphWidget) -> str:
    """The hidden-by-default output shown where the widget cannot be drawn (see the module docstring)."""
    graph = widget.graph
    items = visible_items(graph.nx, graph.calls, list(widget.expanded))
    recording = dict(widget.recording or {})
    if recording.get("steps") and len(items) <= VALUES_UP_TO:
        add_values(items, graph.nx, recording)
    if len(items) > MAX_ITEMS:
        body = (
            f"<p>{len(items)} boxes in the first view: too many for a static picture. "
            "Run the notebook to explore the graph.</p>"
        )
    else:
        body = graph_svg(items)
    after = " Numbers: data | grad after the last recorded backward step." if any(
        items.nodes[n].get("lines") for n in items) else ""
    note = (
        f"Static picture of the autograd graph ({len(graph)} nodes): the interactive view needs a "
        f"running kernel or the notebook's saved widget state.{after}"
    )
    return (
        f'<div class="{CSS_CLASS}" style="display:none"><style>{REVEAL_CSS}</style>'
        f'<div style="font-size:12px;color:#666;margin:2px 0 6px">{html.escape(note)}</div>{body}</div>'
    )


def display_with_fallback(widget: GraphWidget) -> None:
    """Display ``widget`` as usual, then its hidden static picture as a second output."""
    from IPython.display import display as untyped_display

    display: Callable[..., object] = untyped_display  # IPython is untyped here
    bundle = widget._repr_mimebundle_()  # anywidget: (data, metadata), or None without a view
    if bundle is None:
        return
    data, metadata = bundle
    display(data, metadata=metadata, raw=True)
    try:
        picture = fallback_html(widget)
    except Exception as err:  # the live widget is already shown; a failed picture must not hide it
        picture = f'<div class="{CSS_CLASS}" style="display:none">no static picture: {html.escape(repr(err))}</div>'
    display({"text/html": picture, "text/plain": ""}, raw=True)

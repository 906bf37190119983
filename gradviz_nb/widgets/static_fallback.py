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
from the inputs at the top to the loss at the bottom. Names reach it as escaped text, never HTML.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import networkx as nx

if TYPE_CHECKING:
    from gradviz_nb.widgets.graph_widget import GraphWidget

MAX_ITEMS = 600  # more boxes than this make an unreadable picture and a heavy notebook: say so instead
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
            items.add_node(n, text=_node_text(d), kind=d.get("kind", "op"))
        elif box not in items:
            cid = box.removeprefix("call:")
            items.add_node(box, text=f"▸ {cid} · {kind.get(cid, '')}", kind="call")
    for u, v in graph_nx.edges():
        if rep[u] != rep[v]:
            items.add_edge(rep[u], rep[v])
    return items


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


def graph_svg(items: nx.DiGraph) -> str:
    """An SVG of ``items`` (from :func:`visible_items`): boxes with their text, arrows between them."""
    rows = _layers(items)
    width_of = {n: max(60.0, _CHAR_W * len(items.nodes[n]["text"]) + 2 * _PAD) for n in items}
    row_w = [sum(width_of[n] for n in row) + _COL_GAP * (len(row) - 1) for row in rows]
    total_w = max(row_w, default=100.0) + 2 * _PAD
    xy: dict[str, tuple[float, float]] = {}
    for i, row in enumerate(rows):
        x = _PAD + (total_w - 2 * _PAD - row_w[i]) / 2
        for n in row:
            xy[n] = (x, _PAD + i * (_BOX_H + _ROW_GAP))
            x += width_of[n] + _COL_GAP
    total_h = _PAD * 2 + len(rows) * (_BOX_H + _ROW_GAP) - _ROW_GAP
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" role="img" aria-label="autograd graph" '
        'font-family="sans-serif" font-size="11">',
        '<defs><marker id="gv-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#888"/></marker></defs>',
    ]
    for u, v in items.edges():
        (ux, uy), (vx, vy) = xy[u], xy[v]
        out.append(
            f'<line x1="{ux + width_of[u] / 2:.1f}" y1="{uy + _BOX_H:.1f}" x2="{vx + width_of[v] / 2:.1f}" '
            f'y2="{vy:.1f}" stroke="#888" stroke-width="1" marker-end="url(#gv-arrow)"/>'
        )
    for n in items:
        x, y = xy[n]
        text = html.escape(items.nodes[n]["text"])  # names are user input: text, never markup
        look = _LOOK.get(items.nodes[n]["kind"], _LOOK["op"])
        out.append(
            f'<g class="gradviz-static-node"><rect x="{x:.1f}" y="{y:.1f}" width="{width_of[n]:.1f}" '
            f'height="{_BOX_H}" rx="5" {look}/>'
            f'<text x="{x + width_of[n] / 2:.1f}" y="{y + _BOX_H / 2 + 4:.1f}" text-anchor="middle" '
            f'fill="#222">{text}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def fallback_html(widget: GraphWidget) -> str:
    """The hidden-by-default output shown where the widget cannot be drawn (see the module docstring)."""
    graph = widget.graph
    items = visible_items(graph.nx, graph.calls, list(widget.expanded))
    if len(items) > MAX_ITEMS:
        body = (
            f"<p>{len(items)} boxes in the first view: too many for a static picture. "
            "Run the notebook to explore the graph.</p>"
        )
    else:
        body = graph_svg(items)
    note = (
        f"Static picture of the autograd graph ({len(graph)} nodes): the interactive view needs a "
        "running kernel or the notebook's saved widget state."
    )
    return (
        f'<div class="{CSS_CLASS}" style="display:none"><style>{REVEAL_CSS}</style>'
        f'<div style="font-size:12px;color:#666;margin:2px 0 6px">{html.escape(note)}</div>{body}</div>'
    )


def display_with_fallback(widget: GraphWidget) -> None:
    """Display ``widget`` as usual, then its hidden static picture as a second output."""
    from IPython.display import display

    bundle = widget._repr_mimebundle_()  # anywidget: (data, metadata), or None without a view
    if bundle is None:
        return
    data, metadata = bundle
    display(data, metadata=metadata, raw=True)  # type: ignore[no-untyped-call]  # IPython is untyped
    try:
        picture = fallback_html(widget)
    except Exception as err:  # the live widget is already shown; a failed picture must not hide it
        picture = f'<div class="{CSS_CLASS}" style="display:none">no static picture: {html.escape(repr(err))}</div>'
    display({"text/html": picture, "text/plain": ""}, raw=True)  # type: ignore[no-untyped-call]

"""The static picture a GraphWidget displays after itself (gradviz_nb/widgets/static_fallback.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import networkx as nx
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.widgets import static_fallback as sf


class TinyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(3, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(x)))


def _widget() -> gv.GraphWidget:
    torch.manual_seed(0)
    model = TinyMLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 3)).pow(2).mean()
    return gv.GraphWidget(loss, model=model, capture=cap)


def _svg_texts(fragment: str) -> list[str]:
    svg = re.search(r"<svg.*</svg>", fragment, re.S)
    assert svg, fragment
    root = ET.fromstring(svg.group(0))  # well-formed XML, or this raises
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_closed_boxes_stand_for_their_nodes() -> None:
    w = _widget()
    g = w.graph
    items = sf.visible_items(g.nx, g.calls, [])
    inside = {n for n, d in g.nx.nodes(data=True) if d.get("call") in ("hidden", "out")}
    assert {"call:hidden", "call:out"} <= set(items)
    assert not inside & set(items)
    assert len(items) == len(g.nx) - len(inside) + 2
    # Every edge between different items of the real graph is kept, and no other.
    rep = {n: (f"call:{d['call']}" if d.get("call") else n) for n, d in g.nx.nodes(data=True)}
    want = {(rep[u], rep[v]) for u, v in g.nx.edges() if rep[u] != rep[v]}
    assert set(items.edges()) == want
    assert nx.has_path(items, "call:hidden", "call:out")


def test_open_view_names_every_leaf_and_the_picture_is_valid_svg() -> None:
    w = _widget()
    html = sf.fallback_html(w)
    texts = _svg_texts(html)
    for leaf in ["hidden.weight", "hidden.bias", "out.weight", "out.bias"]:
        assert leaf in texts
    assert 'class="gradviz-static" style="display:none"' in html and sf.REVEAL_CSS in html
    w.expanded = []
    closed = _svg_texts(sf.fallback_html(w))
    assert "▸ hidden · Linear" in closed and "hidden.weight" not in closed


def test_names_are_text_not_markup() -> None:
    a = torch.tensor(2.0, requires_grad=True)
    loss = (a * 3).sum()
    w = gv.GraphWidget(loss, names={"<img src=x onerror=alert(1)>": a})
    html = sf.fallback_html(w)
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img src=x onerror=alert(1)>" in _svg_texts(html)


def test_a_cycle_through_closed_boxes_still_lays_out() -> None:
    items = nx.DiGraph()
    for n in ["a", "call:box", "b"]:
        items.add_node(n, text=n, kind="op")
    items.add_edges_from([("a", "call:box"), ("call:box", "b"), ("b", "call:box")])
    assert _svg_texts(sf.graph_svg(items)) == ["a", "call:box", "b"]


def test_too_many_boxes_say_so(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sf, "MAX_ITEMS", 3)
    html = sf.fallback_html(_widget())
    assert "<svg" not in html and "too many for a static picture" in html

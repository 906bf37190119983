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


def _boxes_and_paths(fragment: str) -> tuple[list[tuple[float, float, float, float]], list[str]]:
    svg = re.search(r"<svg.*</svg>", fragment, re.S)
    assert svg, fragment
    root = ET.fromstring(svg.group(0))
    ns = "{http://www.w3.org/2000/svg}"
    boxes = [tuple(float(r.get(k) or 0) for k in ("x", "y", "width", "height")) for r in root.iter(f"{ns}rect")]
    paths = [p.get("d") or "" for p in root.iter(f"{ns}path") if p.get("marker-end")]
    return boxes, paths  # type: ignore[return-value]


def _segments(d: str) -> list[tuple[float, float, float, float]]:
    """The straight pieces of an "M x,y V y H x ..." path."""
    x, y = (float(v) for v in re.match(r"M([-\d.]+),([-\d.]+)", d).groups())  # type: ignore[union-attr]
    out = []
    for cmd, val in re.findall(r"([VH])([-\d.]+)", d):
        nx_, ny = (float(val), y) if cmd == "H" else (x, float(val))
        out.append((x, y, nx_, ny))
        x, y = nx_, ny
    return out


def test_edges_are_orthogonal_and_never_cross_a_box() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(2, 3)
    with gv.capture(model) as cap:
        h = model[1](model[0](x))
        loss = (model[4](model[3](model[2](h))) + h.sum()).pow(2).mean()  # a skip edge across rows
    w = gv.GraphWidget(loss, model=model, capture=cap)
    boxes, paths = _boxes_and_paths(sf.fallback_html(w))
    assert paths and len(boxes) > 8
    for d in paths:
        for x0, y0, x1, y1 in _segments(d):
            assert x0 == x1 or y0 == y1, d  # orthogonal
            for bx, by, bw, bh in boxes:
                # a segment may start or end on a box's edge, never pass through its inside
                inside_x = max(min(x0, x1), bx + 1) < min(max(x0, x1), bx + bw - 1) or bx + 1 < x0 < bx + bw - 1
                inside_y = max(min(y0, y1), by + 1) < min(max(y0, y1), by + bh - 1) or by + 1 < y0 < by + bh - 1
                assert not (inside_x and inside_y), (d, (bx, by, bw, bh))


def test_a_recordings_picture_carries_the_steppers_data_and_grad_lines() -> None:
    # Seen in review: the saved stepper notebook's static picture dropped the "data | grad" numbers.
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(3.0, requires_grad=True)
    c = torch.tensor(-1.0, requires_grad=True)
    with gv.capture() as cap:
        out = torch.tanh(a * b + c)
    rec = gv.record_backward(out, capture=cap, names={"a": a, "b": b, "c": c})
    w = gv.GraphWidget(rec)
    texts = _svg_texts(sf.fallback_html(w))
    out.backward()  # PyTorch's own gradients, to compare with what the picture writes
    for name, t in (("a", a), ("b", b), ("c", c)):
        i = texts.index(name)
        assert texts[i + 1] == f"data {sf.fmt(t.item())} | grad {sf.fmt(t.grad.item())}", texts  # type: ignore[union-attr]
    assert "data | grad after the last recorded backward step" in sf.fallback_html(w)
    assert [sf.fmt(x) for x in (2, 0.5, -1.368, 4.77e-7, 1.2e5, float("nan"), float("inf"), 0)] == [
        "2", "0.5", "-1.368", "4.77e-7", "1.2e+5", "NaN", "inf", "0"]

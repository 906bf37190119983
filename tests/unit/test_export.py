"""Data export: JSON round trip is exact, GraphML reads back in networkx, DOT is well formed; the HTML
page is self-contained (no network URLs) and escapes what it embeds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import networkx as nx
import pytest
import torch
from graphs import traced_gpt2

import gradviz_nb as gv
from gradviz_nb.demo_models import MLP, TwiceCalled

_gpt2 = traced_gpt2


def _mlp() -> gv.AutogradGraph:
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).sum()
    return gv.trace(loss, model=model, capture=cap)


def _twice() -> gv.AutogradGraph:
    model = TwiceCalled()
    x = torch.randn(2, 4)
    a, b = (x * x).chunk(2)
    return gv.trace([model(a * b).sum(), model(x).mean()], model=model)


GRAPHS = {
    "mlp": _mlp,
    "twice_two_roots": _twice,
    "gpt2": _gpt2,
    "gpt2_reentrant": lambda: _gpt2("reentrant"),
    "gpt2_non_reentrant": lambda: _gpt2("non_reentrant"),
    "gpt2_lora": lambda: _gpt2(lora=True),
}


@pytest.mark.parametrize("name", list(GRAPHS))
def test_json_round_trip_is_exact(name: str) -> None:
    g = GRAPHS[name]()
    back = gv.from_json(gv.to_json(g))
    assert list(back.nx.nodes(data=True)) == list(g.nx.nodes(data=True))
    assert list(back.nx.edges(data=True)) == list(g.nx.edges(data=True))
    assert back.nx.graph == g.nx.graph
    assert gv.to_json(back) == gv.to_json(g)
    assert back.what_if(detach=[back.roots[0]]).lost == g.what_if(detach=[g.roots[0]]).lost


def test_from_json_rejects_other_json() -> None:
    with pytest.raises(gv.GradvizError, match="to_json"):
        gv.from_json('{"nodes": []}')
    with pytest.raises(gv.GradvizError, match="not JSON"):
        gv.from_json("<graph/>")


def test_graphml_written_and_read_back(tmp_path: Path) -> None:
    g = _gpt2(lora=True)
    path = tmp_path / "g.graphml"
    gv.to_graphml(g, path)
    h = nx.read_graphml(path)
    assert set(h.nodes) == set(g.nx.nodes) and set(h.edges) == set(g.nx.edges)
    for n, d in g.nx.nodes(data=True):
        assert h.nodes[n]["kind"] == d["kind"] and h.nodes[n]["op"] == d["op"]
        assert json.loads(h.nodes[n]["shape"]) == d["shape"]
        assert json.loads(h.nodes[n]["names"]) == d["names"]
    for u, v, d in g.nx.edges(data=True):
        assert json.loads(h.edges[u, v]["slots"]) == d["slots"]
        assert h.edges[u, v]["output_nr"] == d["output_nr"]
    assert json.loads(h.graph["calls"]) == g.calls


def _dot_parts(text: str) -> tuple[set[str], set[tuple[str, str]], int]:
    nodes = set(re.findall(r'^\s*"((?:[^"\\]|\\.)*)" \[label=', text, re.M))
    edges = set(re.findall(r'^\s*"((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)"', text, re.M))
    return nodes, edges, len(re.findall(r"subgraph \"cluster_", text))


def test_dot_has_every_node_edge_and_cluster() -> None:
    g = _gpt2()
    text = gv.to_dot(g)
    assert text.startswith("digraph autograd {") and text.rstrip().endswith("}")
    assert text.count("{") == text.count("}")
    nodes, edges, clusters = _dot_parts(text)
    assert nodes == set(g.nx.nodes) and edges == set(g.nx.edges) and clusters == len(g.calls)


def test_dot_escapes_names() -> None:
    x = torch.randn(2, requires_grad=True)
    g = gv.trace((x * 2).sum(), names={'evil "name"\\\n} ; digraph x {': x})
    text = gv.to_dot(g)
    assert 'evil \\"name\\"\\\\\\n} ; digraph x {' in text
    assert text.count("digraph") == 2 and len(text.splitlines()) == len(gv.to_dot(g).splitlines())
    nodes, edges, _ = _dot_parts(text)
    assert nodes == set(g.nx.nodes) and edges == set(g.nx.edges)
    graphviz = pytest.importorskip("graphviz")
    assert graphviz.Source(text).source == text  # the python package accepts it (no binary needed)


def test_html_is_self_contained_and_escapes_script_ends(tmp_path: Path) -> None:
    from gradviz_nb.export.html import script_json

    evil = "</script><script>alert(1)</script><!-- \u2028"
    x = torch.randn(2, requires_grad=True)
    path = gv.export_html(gv.trace((x * 2).sum(), names={evil: x}), tmp_path / "g.html", title=evil)
    text = path.read_text()
    # the page's own four: state, precomputed answers, the bundle, the mount; the hostile name adds none
    assert text.lower().count("<script") == 4 and text.lower().count("</script") == 4
    assert re.findall(r'<script type="application/json" id="([\w-]+)"', text) == [
        "gradviz-state", "gradviz-answers", "gradviz-bundle"]
    assert "alert(1)" in text and "<script>alert" not in text  # there, but only as escaped data
    assert json.loads(script_json(evil)) == evil
    assert 'http-equiv="Content-Security-Policy"' in text and "default-src 'none'" in text
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)


def test_export_html_rejects_other_objects(tmp_path: Path) -> None:
    from gradviz_nb.widgets.page import state

    with pytest.raises(gv.GradvizError, match="export_html: nothing to draw from str") as err:
        gv.export_html("graph", tmp_path / "x.html")
    assert all(words in str(err.value) for words in state.MADE_BY.values()), "every registered source is named"
    with pytest.raises(gv.GradvizError, match="export_html: the tensor has no autograd graph"):
        gv.export_html(torch.zeros(1), tmp_path / "x.html")  # a tensor is traced, as GraphWidget(loss) does
    with pytest.raises(gv.GradvizError, match="export_html: no page trait 'colour'"):
        gv.export_html(gv.trace((torch.ones(2, requires_grad=True) * 2).sum()), tmp_path / "x.html", colour="red")


def test_export_depends_on_widget_state_not_on_the_widget_class(tmp_path: Path) -> None:
    import ast

    import gradviz_nb.export as export
    from gradviz_nb.export.html import exported_state

    for name in ("html.py", "image.py"):
        tree = ast.parse((Path(export.__file__).parent / name).read_text())
        modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in modules if "graph_widget" in m}, name
    x = torch.ones(3, requires_grad=True)
    rec = gv.record_backward((x * 3).exp().sum())
    state = exported_state(rec)  # no widget built: the page package makes the state
    assert state == exported_state(gv.GraphWidget(rec)) and len(state["recording"]["steps"]) == 4
    assert state["can_verify"] is False and state["verified"] == {}
    path = gv.export_html(rec, tmp_path / "rec.html", step=1)
    assert '"step":1' in path.read_text()

"""GraphWidget's Python side: the payload matches the page's contract and opens at a sensible depth."""

from __future__ import annotations

import json
import pathlib
import re

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, TwiceCalled, gpt2_loss
from gradviz_nb.widgets.payload import initial_expanded, to_payload

CONTRACT = pathlib.Path(__file__).parents[2] / "js" / "src" / "payload.ts"


def interface_fields(name: str, optional: bool = True) -> set[str]:
    """Field names of a TypeScript interface in payload.ts (one `name: type;` per line); with
    ``optional=False`` only the required ones (no `?`)."""
    body = re.search(rf"interface {name} \{{(.*?)\n\}}", CONTRACT.read_text(), re.S)
    assert body, name
    return set(re.findall(r"^\s{2}(\w+)" + (r"\??" if optional else "") + ":", body.group(1), re.M))


def gpt2_graph(n_layer: int = 12) -> gv.AutogradGraph:
    cfg = GPT2Config(n_layer=n_layer, n_head=2, d_model=16, vocab=50, block_size=16)
    model = GPT2(cfg)
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, seq=8)
    return gv.trace(loss, model=model, capture=cap)


def test_payload_has_exactly_the_contract_fields() -> None:
    payload = to_payload(gpt2_graph(2))
    json.dumps(payload)  # plain JSON, nothing else
    # Eager: everything but the lazy-mode fields (tests/unit/test_lazy.py covers those).
    assert set(payload) == interface_fields("GraphPayload") - {"wiring", "loaded", "edge_shapes"}
    assert interface_fields("GraphPayload", optional=False) <= set(payload)
    assert set(payload["nodes"][0]) == interface_fields("GraphNode")
    assert set(payload["edges"][0]) == interface_fields("GraphEdge")
    assert set(payload["calls"][0]) == interface_fields("ModuleCall")
    assert set(payload["meta"]) == interface_fields("GraphMeta")
    ids = {n["id"] for n in payload["nodes"]}
    assert all(e["source"] in ids and e["target"] in ids for e in payload["edges"])
    seen: set[str] = {""}
    for call in payload["calls"]:  # parents before children
        assert call["parent"] in seen
        seen.add(call["id"])


def test_gpt2_opens_one_box_per_top_level_child() -> None:
    g = gpt2_graph(12)
    assert initial_expanded(g) == []
    top = [c["id"] for c in g.calls if not c["parent"]]
    assert top == ["wte", "wpe"] + [f"blocks.{i}" for i in range(12)] + ["ln_f", "lm_head"]


def test_small_model_opens_fully() -> None:
    model = TwiceCalled()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4)).sum()
    assert initial_expanded(gv.trace(loss, capture=cap)) == ["block", "block (call 2)", "head"]


def test_a_wrapper_with_one_child_opens_to_its_contents() -> None:
    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = GPT2(GPT2Config.small_test())

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            return self.backbone(idx).sum()  # type: ignore[no-any-return]

    model = Wrapper()
    with gv.capture(model) as cap:
        loss = model(torch.zeros(1, 8, dtype=torch.long))
    assert initial_expanded(gv.trace(loss, capture=cap))[0] == "backbone"


def test_widget_traits_and_repr() -> None:
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4)).sum()
    w = gv.GraphWidget(loss, model=model, capture=cap, height=400)
    assert w.height == 400 and w.selected == ""
    assert w.graph_data["meta"]["captured"] and w.expanded == initial_expanded(w.graph)
    assert "GraphWidget" in repr(w)
    again = gv.GraphWidget(w.graph)
    assert again.graph_data == w.graph_data


def test_names_reach_the_page_as_plain_strings() -> None:
    evil = "<img src=x onerror=alert(1)>"
    model = nn.Sequential()
    model.add_module(evil, nn.Linear(2, 2))
    with gv.capture(model) as cap:
        loss = model(torch.randn(1, 2)).sum()
    payload = gv.GraphWidget(loss, model=model, capture=cap).graph_data
    assert payload["calls"][0]["id"] == evil
    assert f"{evil}.weight" in {name for n in payload["nodes"] for name in n["names"]}

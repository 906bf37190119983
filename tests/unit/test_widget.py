"""GraphWidget's Python side: the payload matches the page's contract and opens at a sensible depth; one
route to the canvas (every accepted source, validating traits); page messages that never raise."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import torch
import traitlets
from torch import nn

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, TwiceCalled, gpt2_loss
from gradviz_nb.widgets import page
from gradviz_nb.widgets.page import contract
from gradviz_nb.widgets.page.payload import initial_expanded


def gpt2_graph(n_layer: int = 12) -> gv.AutogradGraph:
    cfg = GPT2Config(n_layer=n_layer, n_head=2, d_model=16, vocab=50, block_size=16)
    model = GPT2(cfg)
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, seq=8)
    return gv.trace(loss, model=model, capture=cap)


def test_payload_has_exactly_the_contract_fields() -> None:
    from test_page_contract import assert_conforms

    payload = page.graph(gpt2_graph(2))
    json.dumps(payload)  # plain JSON, nothing else
    assert_conforms(payload, contract.GraphPayload)  # field by field (tests/unit/test_page_contract.py)
    # Eager: everything but the lazy-mode fields (tests/unit/test_lazy.py covers those).
    assert not {"wiring", "loaded", "edge_shapes"} & set(payload)
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


def plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _mlp() -> tuple[MLP, torch.Tensor, gv.AutogradGraph]:
    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).pow(2).mean()
    return model, loss, gv.trace(loss, model=model, capture=cap)


def test_one_route_to_the_canvas_for_every_source() -> None:
    model, loss, g = _mlp()
    rec = gv.record_backward(loss, model=model)
    w = gv.GraphWidget(rec)
    assert plain(w.recording) == plain(page.recording(rec)) and w.graph is rec.graph
    other = gv.trace(model(torch.randn(3, 4)).detach().requires_grad_().sum())
    d = gv.diff(g, other)
    w = gv.GraphWidget(d)
    assert w.diff["summary"] == d.summary() and set(w.diff["status"]) == {n["id"] for n in w.graph_data["nodes"]}
    mem = gv.memory_held(g)
    w = gv.GraphWidget(mem)
    assert w.graph is g and w.overlay == page.overlay(mem) and w.overlay["unit"] == "B"
    assert gv.GraphWidget(loss, model=model).graph_data["meta"]["num_nodes"] == len(gv.trace(loss, model=model))
    with pytest.raises(gv.GradvizError, match="GradientFlow holds no graph"):
        gv.GraphWidget(gv.gradient_flow(model))
    with pytest.raises(gv.GradvizError, match="nothing to draw from str") as err:
        gv.GraphWidget("loss")
    assert all(words in str(err.value) for words in page.state.MADE_BY.values()), "every registered source is named"


def test_overlay_trait_converts_known_sources_and_refuses_the_rest() -> None:
    model, loss, g = _mlp()
    loss.backward()
    w = gv.GraphWidget(g)
    flow = gv.gradient_flow(model)
    w.overlay = flow
    assert w.overlay == page.overlay(flow, graph=g) and w.overlay["title"] == "gradient L2 norm"
    assert set(w.overlay["values"]) >= set(g.leaves().values())  # every parameter's leaf has its norm
    w.overlay = gv.memory_held(gv.trace(model(torch.randn(3, 4)).sum(), model=model))
    assert w.overlay["unit"] == "B"
    w.overlay = {}
    fields = ("Overlay dict (js/src/payload.ts) has the fields detail, encoding, marks, scale, title, unit, "
              "values; this one has missing encoding, marks, scale, unit")
    for bad, words in ((3, "MemoryReport, a GradientFlow, a GradCheck, a Diagnosis"), ([], "got list"),
                       ({"title": "x"}, fields)):
        with pytest.raises(traitlets.TraitError, match=r"^overlay: ") as err:
            w.overlay = bad
        assert words in str(err.value)
    assert w.overlay == {}  # a refused value leaves the trait as it was
    with pytest.raises(traitlets.TraitError, match="BackwardRecording"):
        w.recording = g
    w.findings = []
    assert gv.GraphWidget(g, overlay=flow).overlay == page.overlay(flow, graph=g)  # the constructor converts too


def test_malformed_page_messages_are_logged_and_never_raise(caplog: pytest.LogCaptureFixture) -> None:
    w = gv.GraphWidget(_mlp()[2], lazy=True)
    sent: list[Any] = []
    w.send = sent.append  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, logger="gradviz_nb")
    for junk in ("load", None, 7, ["load"], {"kind": "load", "body": {"calls": [""]}}, {"id": "1", "kind": "load"},
                 {"id": True, "kind": "load"}):
        w._on_page_message(w, junk, [])  # today's AttributeError on a non-dict is gone
    assert sent == [] and len(caplog.records) == 7
    w._on_page_message(w, {"id": 5, "kind": "explode", "body": {}}, [])
    w._on_page_message(w, {"id": 6, "kind": "load", "body": "blocks"}, [])
    w._on_page_message(w, {"id": 7, "kind": "verify", "body": {}}, [])  # not built by from_fn
    w._on_page_message(w, {"id": 8, "kind": "load", "body": {"calls": [""]}}, [])
    assert [(m["id"], m["ok"]) for m in sent] == [(5, False), (6, False), (7, False), (8, True)]
    assert "unknown request kind 'explode'" in sent[0]["error"] and "load, values, verify" in sent[0]["error"]
    assert "'body' must be a JSON object" in sent[1]["error"]
    assert "GraphWidget.from_fn" in sent[2]["error"]
    assert sent[3]["body"]["chunks"][0]["call"] == "" and len(caplog.records) == 10


def test_a_failing_handler_is_answered_and_logged_with_its_traceback(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    w = gv.GraphWidget(_mlp()[2], lazy=True)
    sent: list[Any] = []
    w.send = sent.append  # type: ignore[method-assign]

    def broken(calls: Any) -> Any:
        raise KeyError("boom")

    monkeypatch.setattr(w.lazy_graph(), "chunks", broken)
    w._on_page_message(w, {"id": 3, "kind": "load", "body": {"calls": [""]}}, [])
    assert sent == [{"id": 3, "kind": "reply", "ok": False, "error": "load failed: KeyError: 'boom'"}]
    assert caplog.records[-1].exc_info is not None

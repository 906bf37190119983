"""The details panel's "Why?" request, kernel side (``gradviz_nb/widgets/page/why.py``): the leaf's
parameter name and the widget's source reach ``gradviz_nb.doctor.why.why``, its ``to_dict()`` comes back
cut to the contract's fields, a missing module is said as such, bad bodies are refused, and an exported
page carries the answers made ahead."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import MLP
from gradviz_nb.widgets import page
from gradviz_nb.widgets.page import contract
from gradviz_nb.widgets.page.traits import check_record
from gradviz_nb.widgets.page.why import NOT_AVAILABLE, export_answers, unreached, why_body


def _graph() -> tuple[torch.nn.Module, gv.AutogradGraph]:
    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).pow(2).mean()
    return model, gv.trace(loss, model=model, capture=cap)


class _Answer:
    """What the doctor's ``why`` returns, as far as the page reads it: ``to_dict()``."""

    def __init__(self, name: str, source: object) -> None:
        self.name, self.source = name, source

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": "zero", "kind": "saturated",
                "cause": f"asked of {type(self.source).__name__}", "evidence": 0.75, "fix": "x",
                "node": None, "extra": "not in the contract"}


@pytest.fixture
def recording_why(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, str]]:
    """``gradviz_nb.doctor.why.why`` replaced by a function that records what it was asked (the plumbing
    under test is the page's, not the doctor's); the rest of that module stays as it is."""
    asked: list[tuple[object, str]] = []

    def why(source: object, name: str) -> _Answer:
        asked.append((source, name))
        return _Answer(name, source)
    if importlib.util.find_spec("gradviz_nb.doctor.why") is not None:
        module = importlib.import_module("gradviz_nb.doctor.why")
    else:  # the doctor's why is not there yet: the page's plumbing is tested all the same
        module = types.ModuleType("gradviz_nb.doctor.why")
        monkeypatch.setitem(sys.modules, "gradviz_nb.doctor.why", module)
    monkeypatch.setattr(module, "why", why, raising=False)
    return asked


def test_why_asks_the_doctor_about_the_leafs_parameter_with_the_widgets_source(
        recording_why: list[tuple[object, str]]) -> None:
    _, g = _graph()
    w = gv.GraphWidget(g)
    node = g.find("fc1.weight")
    reply = w.answer({"id": 3, "kind": "why", "body": {"node": node}})
    assert reply is not None and reply["ok"], reply
    body = reply["body"]
    check_record("why", body, contract.WhyReplyBody)
    assert recording_why == [(g, "fc1.weight")]
    assert body["answer"] == {"name": "fc1.weight", "status": "zero", "kind": "saturated",  # type: ignore[index]
                              "cause": "asked of AutogradGraph", "evidence": "0.75", "fix": "x", "node": ""}


def test_why_refuses_what_is_no_leaf_and_says_when_the_doctor_has_no_why(monkeypatch: pytest.MonkeyPatch) -> None:
    _, g = _graph()
    w = gv.GraphWidget(g)
    op = next(n for n, d in g.nx.nodes(data=True) if d["kind"] == "op")
    for body, words in (({"node": op}, "is no leaf"), ({"node": 3}, "must be a node id"), ({}, "must be a node id")):
        reply = w.answer({"id": 1, "kind": "why", "body": body})
        assert reply is not None and not reply["ok"] and words in reply["error"], reply
    monkeypatch.setitem(sys.modules, "gradviz_nb.doctor.why", None)  # import fails: ImportError
    body = why_body(g, g, {"node": g.find("fc2.bias")})
    assert body == {"node": g.find("fc2.bias"), "answer": None, "missing": NOT_AVAILABLE}
    assert export_answers(g, g, list(g.leaves().values())) == {}


def test_an_exported_page_carries_why_answers_for_its_leaves_within_the_limit(
        recording_why: list[tuple[object, str]]) -> None:
    _, g = _graph()
    snap = page.page_snapshot(g)
    leaves = set(g.leaves().values())
    assert set(snap.answers["why"]) == leaves and len(recording_why) == len(leaves)
    assert {name for _, name in recording_why} == set(g.leaves())
    assert len(export_answers(g, g, sorted(leaves), limit=2)) == 2


def test_a_diagnosis_widget_asks_about_the_diagnosis(recording_why: list[tuple[object, str]]) -> None:
    model, _ = _graph()
    x, opt = torch.randn(3, 4), torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    diagnosis = gv.doctor(step, model, opt)
    w = gv.GraphWidget(diagnosis)
    leaf = next(iter(w.graph.leaves().values()))
    reply = w.answer({"id": 2, "kind": "why", "body": {"node": leaf}})
    assert reply is not None and reply["ok"] and recording_why[0][0] is diagnosis


class _Adapter(torch.nn.Module):
    """A frozen projection with a trainable adapter beside it; ``cut`` detaches the sum (the bug)."""

    def __init__(self, cut: bool) -> None:
        super().__init__()
        self.base = torch.nn.Linear(4, 4).requires_grad_(False)
        self.lora = torch.nn.Linear(4, 4, bias=False)
        self.cut = cut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x) + self.lora(x)
        return x + (out.detach() if self.cut else out)


def test_a_parameter_a_cut_left_outside_the_graph_is_selected_and_answered() -> None:
    """The dead adapter is in no graph of the loss: the Dashboard's select names it "p:<name>" (not the block
    around it), the chart follows back, and the why request answers for it as gv.why does; PyTorch agrees
    it has no gradient."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(_Adapter(False), _Adapter(True), torch.nn.Linear(4, 1))
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).pow(2).mean()
    loss.backward()
    assert model[1].lora.weight.grad is None and model[0].lora.weight.grad is not None
    dash = gv.Dashboard(model, loss, capture=cap, histograms=False)
    g = dash.graph.graph
    assert unreached(g) == ["1.lora.weight"]
    dash.select("1")  # the flagged adapter's module
    assert dash.graph.selected == "p:1.lora.weight"
    assert dash.layers_of("p:1.lora.weight") == ["1.lora"]
    body = why_body(g, g, {"node": "p:1.lora.weight"})
    assert body["answer"] is not None and body["answer"]["status"] == "none"
    assert body["answer"]["cause"] == gv.why(g, "1.lora.weight").cause
    with pytest.raises(gv.GradvizError, match="no leaf"):
        why_body(g, g, {"node": "p:0.lora.weight"})  # in the graph: asked by its node id

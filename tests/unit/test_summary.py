"""Values on demand (gradviz_nb/tracing/summary.py, gradviz_nb/widgets/page/values.py): a trace reads no
statistics; the details panel's ``values`` request gets a leaf's value and ``.grad`` summaries read then,
through weak references (the widget never keeps the model alive), matching torch; an exported page keeps
them within a budget; non-finite values and tensors that must not be read are handled."""

from __future__ import annotations

import gc
import json
import math

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.tracing.summary import EXACT_MAX, HEAD, Summarizer, summarize
from gradviz_nb.widgets.page import build, snapshot
from gradviz_nb.widgets.page.values import GONE, UNKNOWN, export_answers


def close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)


def ask(w: gv.GraphWidget, node: str) -> dict:  # type: ignore[type-arg]
    reply = w.answer({"id": 1, "kind": "values", "body": {"node": node}})
    assert reply is not None and reply["ok"], reply
    return reply["body"]  # type: ignore[return-value, typeddict-item]


def test_a_trace_reads_no_statistics_and_holds_leaves_weakly() -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    g = gv.trace(gpt2_loss(model), model=model)
    leaves = [n for n in g.nodes_of("leaf")]
    assert leaves and not any("stats" in g.nx.nodes[n] or "grad" in g.nx.nodes[n] for n in g.nx)
    assert set(g.tensors) == set(leaves)
    assert g.tensors[g.find("wte.weight")]() is model.wte.weight
    del model
    gc.collect()
    assert all(ref() is None for ref in g.tensors.values())  # the graph pinned nothing


def test_values_requests_match_torch_before_and_after_backward() -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    loss = gpt2_loss(model)
    w = gv.GraphWidget(loss, model=model)
    params = dict(model.named_parameters())
    assert all(ask(w, w.graph.find(name))["grad"] is None for name in params)  # no backward yet
    loss.backward()  # the request reads .grad as it is now, not when traced
    for name, p in params.items():
        body = ask(w, w.graph.find(name))
        assert body["missing"] == "" and body["node"] == w.graph.find(name)
        for s, t in ((body["value"], p.detach()), (body["grad"], p.grad)):
            assert t is not None and s["numel"] == t.numel() and s["nonfinite"] == 0
            assert s["head"] == pytest.approx(t.flatten()[: t.numel() if t.numel() <= 64 else HEAD].tolist())
            assert close(s["norm"], float(t.norm())) and close(s["mean"], float(t.mean()))
            assert close(s["std"], float(t.std())) and close(s["min"], float(t.min()))
            assert close(s["max"], float(t.max()))
        assert len(json.dumps(body)) < 1500  # a few numbers, whatever the tensor's size
    refused = w.answer({"id": 2, "kind": "values", "body": {"node": w.graph.roots[0]}})
    assert refused is not None and not refused["ok"] and "no leaf" in refused["error"]
    bad = w.answer({"id": 3, "kind": "values", "body": {"node": 7}})
    assert bad is not None and not bad["ok"] and "'node'" in bad["error"]


def test_the_widget_never_pins_the_model_and_says_when_a_tensor_is_gone() -> None:
    w_ = torch.randn(300, requires_grad=True)
    w = gv.GraphWidget((w_ * 2).sum(), names={"w": w_})
    node = w.graph.find("w")
    assert ask(w, node)["value"]["numel"] == 300
    del w_
    gc.collect()
    assert ask(w, node) == {"node": node, "value": None, "grad": None, "missing": GONE}
    loaded = gv.GraphWidget(gv.from_json(gv.to_json(w.graph)))  # plain data: no live tensors
    assert ask(loaded, node)["missing"] == UNKNOWN


def test_statistics_are_exact_for_large_views_low_spread_and_small_tensors() -> None:
    gen = torch.Generator().manual_seed(0)
    t = torch.randn(4, EXACT_MAX, generator=gen).t()  # a transposed view, over EXACT_MAX: no copy path
    s = summarize(t)
    assert s is not None and s["head"] == pytest.approx(t.flatten()[:HEAD].tolist())
    assert close(s["std"], float(t.std())) and close(s["norm"], float(t.norm()))
    flat = torch.randn(3 * EXACT_MAX, generator=gen) * 1e-3 + 5.0  # std 5,000x under the mean: no cancellation
    s = summarize(flat)
    assert s is not None and math.isclose(s["std"] or 0, float(flat.double().std()), rel_tol=1e-4)
    ones = torch.ones(768)  # a LayerNorm weight: std exactly 0
    assert summarize(ones) == {"numel": 768, "head": [1.0] * HEAD, "norm": pytest.approx(math.sqrt(768)),
                               "mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0, "nonfinite": 0, "skipped": ""}
    half = summarize(torch.randn(2 * EXACT_MAX, generator=gen).bfloat16())  # read in its own dtype
    assert half is not None and half["std"] is not None and abs(half["std"] - 1) < 0.02


def test_non_finite_values_are_counted_and_kept_out_of_the_statistics() -> None:
    for n in (100, 2 * EXACT_MAX):  # the exact path and the large one
        t = torch.zeros(n)
        t[:4] = torch.tensor([1.0, float("nan"), 3.0, float("inf")])
        s = summarize(t)
        assert s is not None
        assert s["head"][:4] == [1.0, "NaN", 3.0, "Infinity"] and s["nonfinite"] == 2
        assert s["max"] == 3.0 and close(s["norm"], math.sqrt(10)) and s["numel"] == n
        json.dumps(s, allow_nan=False)  # JSON-safe as it is: the page gets it unchanged
    s = summarize(torch.full((3,), float("nan")))
    assert s is not None and s["nonfinite"] == 3 and s["norm"] is None and s["skipped"] == "no finite values"


def test_tensors_that_must_not_be_read_get_no_summary() -> None:
    assert summarize(torch.empty(3, device="meta")) is None
    assert summarize(None) is None
    s = summarize(torch.tensor([True, False] * 40))
    assert s is not None and s["norm"] is None and s["skipped"] == "no statistics for bool"


def test_an_export_keeps_summaries_within_its_budget_smallest_first() -> None:
    small, big = torch.randn(100, requires_grad=True), torch.randn(5000, requires_grad=True)
    loss = (small.sum() * big.sum())
    loss.backward(retain_graph=True)
    g = gv.trace(loss, names={"small": small, "big": big})
    kept = export_answers(g, largest=1000, budget=10**6)
    assert set(kept) == {g.find("small")}
    assert close(kept[g.find("small")]["grad"]["norm"], float(small.grad.norm()))  # type: ignore[index, union-attr]
    assert set(export_answers(g, largest=10**6, budget=250)) == {g.find("small")}  # 100 + 100 (grad) fit
    assert Summarizer(budget=10).fits(torch.ones(11)) is False
    built = build(g)
    assert set(snapshot(g, built.state, None).answers["values"]) == {g.find("small"), g.find("big")}

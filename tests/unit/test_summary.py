"""Leaf summaries for the details panel (gradviz_nb/tracing/summary.py): a large leaf's first values and
statistics, and every leaf's ``.grad`` when traced, checked against torch on a real model; bounded in size
and time; non-finite values and tensors that must not be read handled."""

from __future__ import annotations

import json
import math

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.tracing.summary import HEAD, STATS_MAX, Summarizer
from gradviz_nb.widgets.page import graph as graph_payload


def close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)


def test_gpt2_leaves_carry_their_values_and_grads_as_torch_has_them() -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    before = gv.trace(gpt2_loss(model), model=model)  # no backward yet: every .grad is None
    leaves = {d["names"][0]: d for _, d in before.nx.nodes(data=True) if d["kind"] == "leaf"}
    assert leaves and all(d["grad"] is None for d in leaves.values())
    loss = gpt2_loss(model)
    loss.backward()
    g = gv.trace(loss, model=model)
    params = dict(model.named_parameters())
    checked = 0
    for _, d in g.nx.nodes(data=True):
        if d["kind"] != "leaf":
            assert "stats" not in d and "grad" not in d
            continue
        p = params[d["names"][0]]
        if p.numel() <= 64:
            assert d["stats"] is None and d["value"] == pytest.approx(p.detach().flatten().tolist())
        else:
            s = d["stats"]
            assert s["numel"] == p.numel() and s["head"] == pytest.approx(p.detach().flatten()[:HEAD].tolist())
            assert close(s["norm"], float(p.detach().norm())) and close(s["mean"], float(p.detach().mean()))
            assert close(s["std"], float(p.detach().std())) and close(s["min"], float(p.detach().min())) \
                and close(s["max"], float(p.detach().max()))
        grad = d["grad"]
        assert p.grad is not None and grad["numel"] == p.numel() and grad["nonfinite"] == 0
        assert grad["head"] == pytest.approx(p.grad.flatten()[: p.numel() if p.numel() <= 64 else HEAD].tolist())
        assert close(grad["norm"], float(p.grad.norm())) and close(grad["max"], float(p.grad.max()))
        checked += 1
    assert checked == len(params)
    # What the page gets: the same records, a few hundred bytes per leaf (at most 64 values each).
    payload = graph_payload(g)
    records = [n for n in payload["nodes"] if n["kind"] == "leaf"]
    assert all(n["grad"] is not None for n in records)
    assert max(len(json.dumps({"stats": n["stats"], "grad": n["grad"]})) for n in records) < 2500


def test_large_tensors_skip_statistics_and_say_why() -> None:
    big = torch.zeros(STATS_MAX + 1, requires_grad=True)
    g = gv.trace((big * 2).sum(), names={"big": big})
    s = g.nx.nodes[g.find("big")]["stats"]
    assert s["numel"] == STATS_MAX + 1 and s["head"] == [0.0] * HEAD and s["norm"] is None
    assert s["skipped"] == f"statistics skipped: over {STATS_MAX:,} elements"
    summarize = Summarizer(budget=150)
    assert summarize(torch.ones(100))["norm"] == 10.0  # type: ignore[index]
    spent = summarize(torch.ones(100))
    assert spent is not None and spent["norm"] is None and "budget" in spent["skipped"]


def test_non_finite_values_are_counted_and_kept_out_of_the_statistics() -> None:
    t = torch.tensor([1.0, float("nan"), 3.0, float("inf")] + [0.0] * 100)
    s = Summarizer()(t)
    assert s is not None
    assert s["head"][:4] == [1.0, "NaN", 3.0, "Infinity"] and s["nonfinite"] == 2
    assert s["max"] == 3.0 and close(s["norm"], math.sqrt(10)) and s["numel"] == 104
    json.dumps(s, allow_nan=False)  # JSON-safe as it is: the page gets it unchanged


def test_tensors_that_must_not_be_read_get_no_summary() -> None:
    assert Summarizer()(torch.empty(3, device="meta")) is None
    assert Summarizer()(None) is None
    b = torch.tensor([True, False] * 40)
    s = Summarizer()(b)
    assert s is not None and s["norm"] is None and s["skipped"] == "no statistics for bool"

"""gv.GradientMonitor: recorded numbers, bounded memory, stale gradients, NaN, hooks, save/load, charts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, gpt2_loss


def _hook_count(model: nn.Module) -> int:
    count = 0
    for p in model.parameters():
        node = p._backward_hooks if hasattr(p, "_backward_hooks") else None
        count += len(node or {})
        count += len(getattr(p, "_post_accumulate_grad_hooks", None) or {})
    return count


def _train(model: nn.Module, mon: gv.GradientMonitor, steps: int, zero: bool = True) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(steps):
        torch.manual_seed(i)
        model(torch.randn(4, 4)).pow(2).mean().backward()
        mon.step()
        opt.step()
        if zero:
            opt.zero_grad()


def test_records_equal_direct_layer_norms() -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    mon = gv.GradientMonitor(model)
    gpt2_loss(model, batch=2).backward()
    mon.step()
    norms = mon.history("norm")[0]
    for i, layer in enumerate(mon.layers):
        grads = [p.grad for n, p in model.named_parameters() if n.rpartition(".")[0] == layer]
        direct = torch.cat([g.flatten() for g in grads if g is not None]).norm().item()
        assert norms[i].item() == pytest.approx(direct, rel=1e-5)
    maxes = mon.history("max_abs")[0]
    assert maxes[mon.layers.index("ln_f")].item() == pytest.approx(
        max(model.ln_f.weight.grad.abs().max().item(), model.ln_f.bias.grad.abs().max().item()))
    assert mon.history("missing").sum().item() == 0
    flow = mon.flow()
    assert flow.module("ln_f").norm == pytest.approx(norms[mon.layers.index("ln_f")].item(), rel=1e-5)
    mon.close()


def test_every_and_bounded_memory_over_10000_steps() -> None:
    model = nn.Linear(4, 2)
    mon = gv.GradientMonitor(model, every=2, capacity=64)
    buffers = (mon._hist.data_ptr(), mon._hist.numel())
    x = torch.randn(3, 4)
    for _ in range(10_000):
        model(x).sum().backward()
        mon.step()
        model.zero_grad()
    assert mon.steps_seen == 10_000
    steps = mon.steps
    assert 32 <= len(steps) <= 64 and steps[0] == 1 and steps[-1] > 9_000  # spans the whole run
    assert steps == sorted(set(steps))
    assert (mon._hist.data_ptr(), mon._hist.numel()) == buffers  # preallocated, never grown
    assert mon.stride >= 64
    assert len(mon.events) == 0


def test_stale_gradients_are_flagged() -> None:
    model = MLP()
    mon = gv.GradientMonitor(model)
    _train(model, mon, 3, zero=True)
    assert [f for _, f in mon.flags() if f.kind == "stale-grad"] == []
    _train(model, mon, 3, zero=False)  # forgot zero_grad
    stale = [(s, f) for s, f in mon.flags() if f.kind == "stale-grad"]
    assert stale and stale[0][0] == 5 and stale[0][1].target == ""
    assert set(stale[0][1].params) == {n for n, _ in model.named_parameters()}
    # the message says what was observed, not a list of guesses
    assert "same object, with the same version, as when step 4 ended" in stale[0][1].reason
    assert "zero_grad" in mon.summary()
    # zero_grad(set_to_none=False) zeroes in place: not stale
    mon2 = gv.GradientMonitor(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        mon2.step()
        opt.zero_grad(set_to_none=False)
    assert list(mon2.events) == []
    mon.close()
    mon2.close()


def test_nan_and_missing_gradients_are_seen() -> None:
    model = MLP()
    mon = gv.GradientMonitor(model)
    out = model(torch.randn(2, 4))
    out.register_hook(lambda g: g * float("nan"))
    out.sum().backward()
    mon.step()
    model.zero_grad()
    model.fc2(torch.randn(2, 8)).sum().backward()  # fc1 gets no gradient this step
    mon.step()
    assert {(s, f.kind, f.target) for s, f in mon.flags()} == {(1, "nan", "fc1"), (1, "nan", "fc2")}
    assert mon.history("missing")[1].tolist() == [2.0, 0.0]
    assert math.isnan(mon.history("norm")[1][0].item())
    mon.close()


def test_close_leaves_no_hooks_and_no_side_effects() -> None:
    model = MLP()
    before = _hook_count(model)
    mon = gv.GradientMonitor(model, every=1)
    assert _hook_count(model) > before
    _train(model, mon, 2)
    mon.close()
    assert _hook_count(model) == before
    with gv.GradientMonitor(model) as m2:
        _train(model, m2, 1)
    assert _hook_count(model) == before
    # recording changes no gradient
    model(torch.randn(2, 4)).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    m3 = gv.GradientMonitor(model)
    m3.step()
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters(), strict=True))
    m3.close()


def test_save_and_load(tmp_path: Path) -> None:
    model = MLP()
    mon = gv.GradientMonitor(model, capacity=8)
    _train(model, mon, 5, zero=True)
    _train(model, mon, 15, zero=False)
    path = tmp_path / "history.pt"
    mon.save(path)
    loaded = gv.GradientMonitor.load(path)
    assert loaded.steps == mon.steps and loaded.layers == mon.layers and loaded.stride == mon.stride
    assert torch.equal(loaded.history().nan_to_num(-1), mon.history().nan_to_num(-1))
    assert [(s, f) for s, f in loaded.events] == [(s, f) for s, f in mon.events]
    assert loaded.summary() == mon.summary()
    with pytest.raises(gv.GradvizError):
        loaded.step()
    mon.close()


def test_live_chart_updates() -> None:
    model = MLP()
    mon = gv.GradientMonitor(model, live_interval=0.0)
    _train(model, mon, 2)
    layout = mon.chart(widget=False)
    heat = layout.children[0].renderers[0].data_source
    assert len(set(heat.data["step"])) == 2
    _train(model, mon, 3)
    assert len(set(heat.data["step"])) == 5  # pushed by step()
    widget = mon.chart()
    assert type(widget).__name__ == "BokehModel"
    mon.close()

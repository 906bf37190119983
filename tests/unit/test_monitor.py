"""gv.GradientMonitor: recorded numbers, bounded memory, stale gradients, NaN, hooks, save/load, charts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo.cases_monitor import _Detached
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
    buffers = (mon._rec.hist.data_ptr(), mon._rec.hist.numel())
    x = torch.randn(3, 4)
    for _ in range(10_000):
        model(x).sum().backward()
        mon.step()
        model.zero_grad()
    assert mon.steps_seen == 10_000
    steps = mon.steps
    assert 32 <= len(steps) <= 64 and steps[0] == 1 and steps[-1] > 9_000  # spans the whole run
    assert steps == sorted(set(steps))
    assert (mon._rec.hist.data_ptr(), mon._rec.hist.numel()) == buffers  # preallocated, never grown
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


# -- verdicts, each against what PyTorch really does -------------------------------------------


def _batch(seed: int, d_in: int = 4, d_out: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(16, d_in, generator=gen), torch.randn(16, d_out, generator=gen)


def _loss(model: nn.Module, seed: int) -> torch.Tensor:
    x, y = _batch(seed)
    return nn.functional.mse_loss(model(x), y)


def _kinds(mon: gv.GradientMonitor) -> set[tuple[str, str]]:
    return {(f.kind, f.target) for _, f in mon.flags()}


def _frozen_names(model: nn.Module, before: dict[str, torch.Tensor]) -> set[str]:
    return {n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])}


@pytest.mark.parametrize("with_optimizer", [False, True])
def test_stale_gradient_on_an_unrecorded_step_is_seen(with_optimizer: bool) -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = gv.GradientMonitor(model, every=10, optimizer=opt if with_optimizer else None)
    summed = {}
    for step in range(1, 26):
        before = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
        fresh = torch.autograd.grad(_loss(model, step), list(model.parameters()))
        _loss(model, step).backward()
        summed[step] = any(b.abs().sum() > 0 for b in before) and all(
            torch.allclose(p.grad, b + f, atol=1e-6) for p, b, f in zip(model.parameters(), before, fresh, strict=True))
        mon.step()
        opt.step()
        if step != 15:  # forgot zero_grad once, on a step the monitor does not record
            opt.zero_grad()
    assert mon.steps == [1, 11, 21]
    assert [s for s, v in summed.items() if v] == [16]  # PyTorch: only step 16's .grad is a sum
    assert [(s, f.kind, f.target) for s, f in mon.flags()] == [(16, "stale-grad", "")]
    mon.close()


def test_gradient_accumulation_is_not_stale() -> None:
    """Four micro-batches per optimizer step add up on purpose: with the optimizer given, the check is armed
    only when optimizer.step() ends, so the micro-batches are never blamed, and a missing zero_grad still is."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = gv.GradientMonitor(model, optimizer=opt)
    for i in range(12):
        (_loss(model, i) / 4).backward()
        if i % 4 == 3:
            mon.step()
            opt.step()
            opt.zero_grad()
    assert mon.flags() == []
    for i in range(8):
        (_loss(model, i) / 4).backward()
        if i % 4 == 3:
            mon.step()
            opt.step()  # no zero_grad: the next micro-batch adds onto the stepped gradient
    assert [(s, f.kind) for s, f in mon.flags()] == [(5, "stale-grad")]
    mon.close()


@pytest.mark.parametrize("with_optimizer", [True, False])
@pytest.mark.parametrize("zero", ["opt", "model"])
def test_parameter_missing_from_the_optimizer(zero: str, with_optimizer: bool) -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.fc1.parameters(), lr=0.1)  # fc2 forgotten
    mon = gv.GradientMonitor(model, optimizer=opt if with_optimizer else None)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    fc2_grad_summed = True
    for i in range(6):
        old = model.fc2.weight.grad.clone() if model.fc2.weight.grad is not None else None
        fresh = torch.autograd.grad(_loss(model, i), [model.fc2.weight])[0]
        _loss(model, i).backward()
        if i:
            fc2_grad_summed &= old is not None and torch.allclose(model.fc2.weight.grad, old + fresh)
        mon.step()
        opt.step()
        (opt if zero == "opt" else model).zero_grad()
    # PyTorch: fc2 never moved, fc1 did
    assert _frozen_names(model, before) == {"fc2.weight", "fc2.bias"}
    flags = [f for _, f in mon.flags()]
    assert [(f.kind, f.target) for f in flags] == [("not-in-optimizer", "fc2")]  # no stale-grad blame
    assert set(flags[0].params) == {"fc2.weight", "fc2.bias"}
    if with_optimizer:
        assert "has a gradient on step 1, in no param group of SGD" in flags[0].reason
    else:
        assert "has a gradient on steps 1, 2, 3, 4 but its value never changed" in flags[0].reason
    # with opt.zero_grad(), fc2's .grad is never cleared, and the monitor saw backward add onto it
    assert fc2_grad_summed == (zero == "opt")
    if not with_optimizer:
        assert ("never zeroed either" in flags[0].reason) == (zero == "opt")
    mon.close()


def test_not_in_optimizer_inferred_under_fused_adam() -> None:
    """Fused Adam does not bump parameters' versions; the weight norm still shows who moved."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.fc1.parameters(), lr=1e-2, fused=True)
    mon = gv.GradientMonitor(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for i in range(6):
        _loss(model, i).backward()
        mon.step()
        opt.step()
        model.zero_grad()
    assert _frozen_names(model, before) == {"fc2.weight", "fc2.bias"}
    assert _kinds(mon) == {("not-in-optimizer", "fc2")}
    # and with every parameter in the fused optimizer, nothing is flagged
    model2 = MLP()
    opt2 = torch.optim.Adam(model2.parameters(), lr=1e-2, fused=True)
    mon2 = gv.GradientMonitor(model2)
    for i in range(6):
        _loss(model2, i).backward()
        mon2.step()
        opt2.step()
        opt2.zero_grad()
    assert mon2.flags() == []
    mon.close()
    mon2.close()


def test_lr_zero_param_group_is_told_apart() -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD([{"params": model.fc1.parameters()}, {"params": model.fc2.parameters(), "lr": 0.0}], lr=0.1)
    mon = gv.GradientMonitor(model, optimizer=opt)
    blind = gv.GradientMonitor(model)  # without the optimizer: SGD touches fc2 (its version moves), so it is held
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for i in range(30):
        _loss(model, i).backward()
        mon.step()
        blind.step()
        opt.step()
        opt.zero_grad()
    assert _frozen_names(model, before) == {"fc2.weight", "fc2.bias"}
    flags = [(s, f) for s, f in mon.flags()]
    assert [(f.kind, f.target) for _, f in flags] == [("update-size", "fc2")]
    assert "lr=0 in param group 1 of SGD" in flags[0][1].reason and flags[0][0] == 26  # steps 21-25, judged at 26
    assert blind.flags() == []
    mon.close()
    blind.close()


def test_no_grad_after_three_recorded_steps() -> None:
    model = _Detached()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = gv.GradientMonitor(model, every=2)
    for i in range(5):
        _loss(model, i).backward()
        assert model.fc1.weight.grad is None and model.fc2.weight.grad is not None  # PyTorch's truth
        mon.step()
        if i == 2:
            assert mon.flags() == []  # two records (steps 1, 3): not yet
        opt.step()
        opt.zero_grad()
    flags = mon.flags()
    assert [(s, f.kind, f.target) for s, f in flags] == [(5, "no-grad", "fc1")]
    assert "no gradient on steps 1, 3, 5" in flags[0][1].reason
    mon.close()


def test_alternating_branches_are_not_no_grad() -> None:
    """Two heads trained on alternate steps (as GAN losses are): each misses a gradient every other step."""
    torch.manual_seed(0)
    model = nn.ModuleDict({"a": nn.Linear(4, 3), "b": nn.Linear(4, 3)})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = gv.GradientMonitor(model, optimizer=opt)
    for i in range(20):
        x, y = _batch(i)
        nn.functional.mse_loss(model["ab"[i % 2]](x), y).backward()
        assert model["ab"[(i + 1) % 2]].weight.grad is None
        mon.step()
        opt.step()
        opt.zero_grad()
    assert mon.flags() == []
    assert mon.history("missing")[:, 0].tolist() == [0.0, 2.0] * 10
    mon.close()


def test_spike_against_the_running_median() -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mon = gv.GradientMonitor(model, optimizer=opt)
    direct = []
    for i in range(40):
        x, y = _batch(i)
        if i == 29:
            x = x.clone()
            x[0] *= 30.0  # one outlier row
        nn.functional.mse_loss(model(x), y).backward()
        direct.append(torch.cat([p.grad.flatten() for p in model.fc1.parameters()]).norm().item())
        mon.step()
        opt.step()
        opt.zero_grad()
    jump = direct[29] / torch.tensor(direct[9:29]).median().item()
    assert jump > 10  # PyTorch: step 30's fc1 gradient really is >10x its running median
    spikes = [(s, f) for s, f in mon.flags() if f.kind == "spike"]
    assert [(s, f.target) for s, f in spikes if f.target == "fc1"] == [(30, "fc1")]
    assert f"{jump:.1f}x its running median" in spikes[0][1].reason
    mon.close()


def test_clipping_counts_summary_and_finding() -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = gv.GradientMonitor(model, every=5, optimizer=opt)
    totals = []
    for i in range(20):
        _loss(model, i).backward()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.6)
        totals.append(total.item())
        mon.step(grad_norm=total, max_norm=0.6)
        opt.step()
        opt.zero_grad()
    bit = sum(t > 0.6 for t in totals)
    assert 0 < bit <= 10 and mon.clipped == (bit, 20)  # counted on every step, not only recorded ones
    assert f"clipping bit on {bit} of 20 steps (max_norm=0.6)" in mon.summary()
    assert mon.flags() == []  # a summary line, not a finding, unless it bites on most steps
    mon2 = gv.GradientMonitor(model, optimizer=opt)
    for i in range(12):
        _loss(model, i).backward()
        mon2.step(grad_norm=float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)), max_norm=1e-3)
        opt.step()
        opt.zero_grad()
    assert _kinds(mon2) == {("clipping", "")} and mon2.clipped == (12, 12)
    with pytest.raises(gv.GradvizError):
        mon2.step(grad_norm=1.0)
    mon.close()
    mon2.close()


def test_update_ratio_is_the_optimizer_real_step() -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mon = gv.GradientMonitor(model, every=3, optimizer=opt)
    by_hand = []
    for i in range(10):
        _loss(model, i).backward()
        mon.step()
        before = [torch.cat([p.detach().flatten().clone() for p in m.parameters()]) for m in (model.fc1, model.fc2)]
        opt.step()
        after = [torch.cat([p.detach().flatten() for p in m.parameters()]) for m in (model.fc1, model.fc2)]
        by_hand.append([((a - b).norm() / b.norm()).item() for a, b in zip(after, before, strict=True)])
        opt.zero_grad()
    assert mon.steps == [1, 4, 7, 10]
    expected = torch.tensor([by_hand[s - 1] for s in mon.steps])
    assert torch.allclose(mon.history("update"), expected, rtol=1e-4)
    assert "update/weight ratio at the last measured step" in mon.summary()
    mon.close()
    blind = gv.GradientMonitor(model)  # without the optimizer nothing is measured
    _loss(model, 0).backward()
    blind.step()
    opt.step()
    assert bool(blind.history("update").isnan().all())
    blind.close()


def test_update_too_large_is_flagged() -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    mon = gv.GradientMonitor(model, optimizer=opt)
    ratios = []
    for i in range(30):
        _loss(model, i).backward()
        mon.step()
        w = torch.cat([p.detach().flatten().clone() for p in model.fc2.parameters()])
        opt.step()
        ratios.append((torch.cat([p.detach().flatten() for p in model.fc2.parameters()]) - w).norm().item() / w.norm())
        opt.zero_grad()
    assert min(ratios[20:25]) > 0.1  # PyTorch: the update really exceeds a tenth of the weights
    hits = [(s, f) for s, f in mon.flags() if f.kind == "update-size"]
    assert [(s, f.target) for s, f in hits] == [(26, "fc2")] and "too large" in hits[0][1].reason
    mon.close()


def _healthy_mlp(opt_name: str) -> gv.GradientMonitor:
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    model = MLP(8, 32, 3)
    opt = (torch.optim.SGD(model.parameters(), lr=0.1) if opt_name == "sgd"
           else torch.optim.Adam(model.parameters(), lr=1e-3))
    mon = gv.GradientMonitor(model, optimizer=opt)
    gen = torch.Generator().manual_seed(0)
    first = last = 0.0
    for i in range(200):
        x = torch.randn(32, 8, generator=gen)
        with torch.no_grad():
            y = teacher(x)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        mon.step()
        opt.step()
        opt.zero_grad()
        first, last = (loss.item(), last) if i == 0 else (first, loss.item())
    assert last < 0.5 * first  # it really learns
    return mon


def _healthy_gpt(lora: bool) -> gv.GradientMonitor:
    from gradviz_nb.demo_models import add_lora

    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    if lora:
        add_lora(model)  # lora_B starts at zero: update ratios near 1 at first
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1)
    mon = gv.GradientMonitor(model, optimizer=opt)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(80):
        idx = torch.randint(0, 101, (8, 16), generator=gen)
        _, loss = model(idx, idx)
        loss.backward()
        total = torch.nn.utils.clip_grad_norm_(params, 1.0)
        mon.step(grad_norm=total, max_norm=1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    return mon


@pytest.mark.parametrize("loop", ["mlp-sgd-0.1", "mlp-adam-1e-3", "gpt-adamw-clip", "gpt-lora-adamw-clip"])
def test_healthy_loops_have_no_flag(loop: str) -> None:
    mon = {"mlp-sgd-0.1": lambda: _healthy_mlp("sgd"), "mlp-adam-1e-3": lambda: _healthy_mlp("adam"),
           "gpt-adamw-clip": lambda: _healthy_gpt(False), "gpt-lora-adamw-clip": lambda: _healthy_gpt(True)}[loop]()
    mon.close()
    assert mon.flags() == [], mon.summary()
    upd = mon.history("update")
    assert bool(torch.isfinite(upd[:, ~mon.history("norm").isnan().all(dim=0)]).all())  # measured every record


def test_sparse_embedding_gradients() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8, sparse=True), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # SGD takes sparse gradients
    mon = gv.GradientMonitor(model, optimizer=opt)
    idx = torch.tensor([[1, 2, 2, 7], [7, 7, 3, 1]])  # repeated rows: an uncoalesced gradient
    model(idx).pow(2).mean().backward()
    grad = model[0].weight.grad
    assert grad.is_sparse and not grad.is_coalesced()
    mon.step()
    dense = grad.to_dense()
    assert mon.history("norm")[0, 0].item() == pytest.approx(dense.norm().item(), rel=1e-5)
    assert mon.history("max_abs")[0, 0].item() == pytest.approx(dense.abs().max().item(), rel=1e-6)
    opt.step()
    model(idx).pow(2).mean().backward()  # no zero_grad: the sparse .grad is added onto too
    mon.step()
    assert [(s, f.kind) for s, f in mon.flags()] == [(2, "stale-grad")]
    mon.close()


@pytest.mark.parametrize("unscale", [False, True])
@pytest.mark.parametrize("with_optimizer", [False, True])
def test_grad_scaler_norms_are_the_true_norms(unscale: bool, with_optimizer: bool) -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu")  # enabled on CPU in torch 2.13, scale 65536
    assert scaler.is_enabled()
    mon = gv.GradientMonitor(model, optimizer=opt if with_optimizer else None, scaler=scaler)
    for i in range(3):
        truth = torch.autograd.grad(_loss(model, i), list(model.parameters()))
        true_norms = torch.stack([torch.cat([g.flatten() for g in truth[k:k + 2]]).norm() for k in (0, 2)])
        scaler.scale(_loss(model, i)).backward()
        raw = model.fc1.weight.grad.norm().item()
        if unscale:
            scaler.unscale_(opt)
        mon.step()
        got = mon.history("norm")[-1]
        assert torch.allclose(got, true_norms, rtol=1e-5), (got, true_norms)
        assert (raw / truth[0].norm().item() == pytest.approx(65536.0, rel=1e-4))  # the raw .grad is scaled
        assert mon.scale_used == (None if unscale else 65536.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    assert mon.flags() == []
    mon.close()


def test_save_and_load_new_fields(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.fc1.parameters(), lr=0.1)
    mon = gv.GradientMonitor(model, optimizer=opt)
    for i in range(6):
        _loss(model, i).backward()
        mon.step(grad_norm=torch.tensor(2.0), max_norm=1.0)
        opt.step()
        opt.zero_grad()
    mon.close()
    mon.save(tmp_path / "m.pt")
    loaded = gv.GradientMonitor.load(tmp_path / "m.pt")
    assert torch.equal(loaded.history("update").nan_to_num(-1), mon.history("update").nan_to_num(-1))
    assert loaded.clipped == mon.clipped == (6, 6) and loaded.flags() == mon.flags()
    assert loaded.summary() == mon.summary()


def test_load_a_version_1_file(tmp_path: Path) -> None:
    """Files written before the update stat and the stale-grad name still load."""
    hist = torch.tensor([[[1.0, 0.5, 0.1, 0.0], [2.0, 1.0, 0.2, 0.0]]])
    torch.save({"version": 1, "layers": ["fc1", "fc2"], "every": 1, "capacity": 8, "stride": 1, "steps_seen": 1,
                "count": 1, "hist": hist, "steps": torch.tensor([1]), "rank_hist": hist[:, None].clone(),
                "events": [(1, "stale", "", "old message", ["fc1.weight"])]}, tmp_path / "v1.pt")
    loaded = gv.GradientMonitor.load(tmp_path / "v1.pt")
    assert loaded.history("norm").tolist() == [[1.0, 2.0]] and loaded.history("missing").tolist() == [[0.0, 0.0]]
    assert bool(loaded.history("update").isnan().all())
    assert loaded.per_rank("ratio").tolist() == [[[pytest.approx(0.1), pytest.approx(0.2)]]]  # type: ignore[union-attr]
    assert [(s, f.kind, f.params) for s, f in loaded.events] == [(1, "stale-grad", ("fc1.weight",))]


def test_close_removes_optimizer_hooks() -> None:
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hooks = (len(opt._optimizer_step_pre_hooks), len(opt._optimizer_step_post_hooks))
    before = _hook_count(model)
    mon = gv.GradientMonitor(model, optimizer=opt)
    assert (len(opt._optimizer_step_pre_hooks), len(opt._optimizer_step_post_hooks)) == (hooks[0] + 1, hooks[1] + 1)
    _loss(model, 0).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    mon.step()
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters(), strict=True))
    opt.step()
    mon.close()
    assert (len(opt._optimizer_step_pre_hooks), len(opt._optimizer_step_post_hooks)) == hooks
    assert _hook_count(model) == before


def test_live_chart_with_the_update_stat() -> None:
    from gradviz_nb.widgets.flow_charts import monitor_rows

    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    mon = gv.GradientMonitor(model, live_interval=0.0, optimizer=opt)
    layout = mon.chart(widget=False)
    for i in range(3):
        _loss(model, i).backward()
        mon.step()
        opt.step()
        opt.zero_grad()
    heat = layout.children[0].renderers[0].data_source
    assert len(set(heat.data["step"])) == 3
    assert monitor_rows(mon)[0]["norm"] == heat.data["norm"]
    assert bool(torch.isfinite(mon.history("update")).all())
    mon.close()


def test_grad_scaler_overflow_steps_are_not_nan_flags() -> None:
    """An inf gradient under GradScaler: the scaler skips the step and halves its scale (dynamic loss scaling
    working as designed), so the monitor reports it in the summary, not as a NaN; without a scaler it is a NaN."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu")
    mon = gv.GradientMonitor(model, optimizer=opt, scaler=scaler)
    for i in range(5):
        x, y = _batch(i)
        out = model(x)
        if i == 2:
            out.register_hook(lambda g: g * math.inf)
        scaler.scale(nn.functional.mse_loss(out, y)).backward()
        mon.step()
        before = [p.detach().clone() for p in model.parameters()]
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        skipped = all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
        assert skipped == (i == 2) and (scaler.get_scale() < scale) == (i == 2)  # PyTorch: step 3 was skipped
        opt.zero_grad()
    mon.close()
    assert not math.isfinite(mon.history("norm")[2, 0].item())
    assert mon.amp_skipped == [3] and mon.flags() == []
    assert "GradScaler skipped 1 recorded steps" in mon.summary()


def _clipped_loop(clip_first: bool, outlier: float) -> tuple[gv.GradientMonitor, list[float]]:
    """40 steps of an MLP with clip_grad_norm_(1.0); batch 30 has one row scaled by ``outlier``. ``clip_first``:
    the monitor's docstring order (clip, then step); else step before clipping (the integrations' order)."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mon = gv.GradientMonitor(model, optimizer=opt)
    totals = []
    for i in range(40):
        gen = torch.Generator().manual_seed(i)
        x, y = torch.randn(16, 4, generator=gen), torch.randn(16, 3, generator=gen)
        if i == 29:
            x[0] *= outlier
        nn.functional.mse_loss(model(x), y).backward()
        if clip_first:
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            mon.step(grad_norm=total, max_norm=1.0)
        else:
            total = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
            mon.step(grad_norm=total, max_norm=1.0)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        totals.append(float(total))
        opt.step()
        opt.zero_grad()
    mon.close()
    return mon, totals


def test_a_clipped_spike_is_judged_on_preclip_norms_in_either_call_order() -> None:
    for clip_first in (True, False):
        mon, totals = _clipped_loop(clip_first, outlier=1000.0)
        assert mon.preclip().tolist() == pytest.approx(totals, rel=1e-5)  # the pre-clip total of every record
        spikes = [(s, f) for s, f in mon.flags() if f.kind == "spike"]
        assert {f.target for _, f in spikes} == {"fc1", "fc2"} and {s for s, _ in spikes} == {30}
        ratio = float(spikes[0][1].reason.split(" is ")[1].split("x")[0])
        median = torch.tensor(totals[9:29]).median().item()
        assert ratio > 1000  # the pre-clip jump, not the clipped one (a few x)
        assert ("pre-clip" in spikes[0][1].reason) == clip_first  # only then were the norms it read scaled
        assert totals[29] / median > 1000
    quiet, _ = _clipped_loop(True, outlier=1.0)
    assert not [f for _, f in quiet.flags() if f.kind == "spike"]


def test_preclip_totals_survive_save_and_load(tmp_path: Path) -> None:
    mon, totals = _clipped_loop(True, outlier=1000.0)
    mon.save(tmp_path / "m.pt")
    back = gv.GradientMonitor.load(tmp_path / "m.pt")
    assert back.preclip().tolist() == pytest.approx(totals, rel=1e-5)
    assert "largest pre-clip total norm" in back.summary()

"""Bug-zoo cases for ``gv.GradientMonitor``: one broken training loop per verdict, each with PyTorch's truth.

Every case measures its truth in plain PyTorch inside ``run()``: the ``.grad`` that really holds two steps'
gradients, the weights that really never move, the layer whose ``.grad`` really stays ``None``, the norm that
really jumps, the update that really exceeds a tenth of the weights, the norms ``torch.linalg.vector_norm``
really gives. Two healthy loops expect no flag at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo.case import Case, Outcome, flag_outcome
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config


def _flags(mon: gv.GradientMonitor) -> set[tuple[str, str]]:
    return {(f.kind, f.target) for _, f in mon.flags()}


def _data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(16, 4, generator=gen), torch.randn(16, 3, generator=gen)


def _loss(model: nn.Module, seed: int) -> torch.Tensor:
    x, y = _data(seed)
    return nn.functional.mse_loss(model(x), y)


def _fresh_grads(model: nn.Module, seed: int) -> list[torch.Tensor]:
    """This step's own gradient (``autograd.grad`` leaves ``.grad`` alone)."""
    params = list(model.parameters())
    return list(torch.autograd.grad(_loss(model, seed), params))


def _accumulated(model: nn.Module, seed: int) -> bool:
    """Run one backward and say whether ``.grad`` became the previous ``.grad`` plus this step's gradient."""
    params = list(model.parameters())
    before = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    fresh = _fresh_grads(model, seed)
    _loss(model, seed).backward()
    return any(b.abs().sum() > 0 for b in before) and all(
        torch.allclose(p.grad, b + f, atol=1e-6) for p, b, f in zip(params, before, fresh, strict=True))


def stale_no_zero_grad() -> Outcome:
    """A loop without zero_grad. Truth: every step's .grad is the previous .grad plus the step's own gradient."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = gv.GradientMonitor(model, optimizer=opt)
    summed = []
    for i in range(4):
        summed.append(_accumulated(model, i))
        mon.step()
        opt.step()
    mon.close()
    return flag_outcome({("stale-grad", "")} if all(summed[1:]) else set(), _flags(mon))


def stale_unrecorded_step() -> Outcome:
    """every=10, zero_grad forgotten once, on step 15 (never recorded). Truth: step 16's .grad is a sum."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = gv.GradientMonitor(model, every=10)
    summed = {}
    for step in range(1, 26):
        summed[step] = _accumulated(model, step)
        mon.step()
        opt.step()
        if step != 15:
            opt.zero_grad()
    mon.close()
    truth = {("stale-grad", "")} if summed[16] and not any(v for s, v in summed.items() if s != 16) else set()
    out = flag_outcome(truth, _flags(mon))
    steps = sorted(s for s, f in mon.flags() if f.kind == "stale-grad")
    return Outcome(out.expected + " at step 16 (records at 1, 11, 21)", f"{out.got} at steps {steps}",
                   out.ok and steps == [16], out.false_alarms)


def _never_moved(model: nn.Module, step: Callable[[int], None], steps: int) -> tuple[set[str], set[str]]:
    """Run ``steps`` steps; names of parameters whose value never changed, and of those that did."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for i in range(steps):
        step(i)
    still = {n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])}
    return still, set(before) - still


def _layers(names: set[str]) -> set[str]:
    return {n.rpartition(".")[0] for n in names}


def not_in_optimizer_opt_zero_grad() -> Outcome:
    """The optimizer was built over fc1 only; the loop calls opt.zero_grad(). With optimizer= given.

    Truth: fc2 never moves while fc1 does, and its .grad keeps growing (opt.zero_grad() skips it): the monitor
    must say not-in-optimizer, not blame a missing zero_grad.
    """
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.fc1.parameters(), lr=0.1)
    mon = gv.GradientMonitor(model, optimizer=opt)

    def step(i: int) -> None:
        _loss(model, i).backward()
        mon.step()
        opt.step()
        opt.zero_grad()

    still, moved = _never_moved(model, step, 5)
    mon.close()
    truth = {("not-in-optimizer", layer) for layer in _layers(still)} if moved else set()
    return flag_outcome(truth, _flags(mon))


def not_in_optimizer_model_zero_grad() -> Outcome:
    """A new head replaces fc2 after the optimizer was built; the loop calls model.zero_grad(). No optimizer=:
    the monitor infers it from the weights that never change while the others do."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.fc2 = nn.Linear(8, 3)  # the classic: the optimizer still holds the old head's parameters
    mon = gv.GradientMonitor(model)

    def step(i: int) -> None:
        model.zero_grad()
        _loss(model, i).backward()
        mon.step()
        opt.step()

    still, moved = _never_moved(model, step, 6)
    mon.close()
    truth = {("not-in-optimizer", layer) for layer in _layers(still)} if moved else set()
    return flag_outcome(truth, _flags(mon))


class _Detached(nn.Module):
    """``fc1``'s output is detached by mistake: fc1 never gets a gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.fc1(x).relu().detach())
        return out


def no_grad_for_n_steps() -> Outcome:
    """Truth: after each backward, every fc1 parameter's .grad is None (3 recorded steps in a row)."""
    torch.manual_seed(0)
    model = _Detached()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = gv.GradientMonitor(model, every=2, optimizer=opt)
    none_steps: dict[str, int] = {"fc1": 0, "fc2": 0}
    for i in range(7):
        _loss(model, i).backward()
        for layer in none_steps:
            none_steps[layer] += all(p.grad is None for p in getattr(model, layer).parameters())
        mon.step()
        opt.step()
        opt.zero_grad()
    mon.close()
    records = len(mon.steps)
    truth = {("no-grad", layer) for layer, k in none_steps.items() if k == 7 and records >= 3}
    return flag_outcome(truth, _flags(mon))


def spike() -> Outcome:
    """Batch 30 holds a 30x outlier row. Truth: that step's gradient norm per layer (autograd.grad) against the
    median of the previous 20 steps."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mon = gv.GradientMonitor(model, optimizer=opt)
    layers = ("fc1", "fc2")
    norms: list[list[float]] = []
    for i in range(40):
        x, y = _data(i)
        if i == 29:
            x = x.clone()
            x[0] *= 30.0
        loss = nn.functional.mse_loss(model(x), y)
        grads = torch.autograd.grad(loss, [p for layer in layers for p in getattr(model, layer).parameters()],
                                    retain_graph=True)
        norms.append([torch.cat([g.flatten() for g in grads[2 * k: 2 * k + 2]]).norm().item() for k in range(2)])
        loss.backward()
        mon.step()
        opt.step()
        opt.zero_grad()
    mon.close()
    hist = torch.tensor(norms)
    median = hist[9:29].median(dim=0).values
    truth = {("spike", layers[k]) for k in range(2) if hist[29, k] > 10 * median[k]}
    return flag_outcome(truth, _flags(mon))


def spike_hidden_by_clipping() -> Outcome:
    """clip_grad_norm_(max_norm=1) then monitor.step(grad_norm=total, max_norm=1), as the monitor's docstring
    shows; batch 30 holds one outlier row 1000x the others. Clipping scales that step's gradients back to a
    total of 1, so the ``.grad`` the monitor reads looks ordinary. Truth: each layer's pre-clip norm
    (autograd.grad before clipping) against the median of its previous 20 steps."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mon = gv.GradientMonitor(model, optimizer=opt)
    layers = ("fc1", "fc2")
    pre: list[list[float]] = []
    post: list[list[float]] = []
    for i in range(40):
        x, y = _data(i)
        if i == 29:
            x = x.clone()
            x[0] *= 1000.0
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        pre.append([_layer_norm(model, la) for la in layers])
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        post.append([_layer_norm(model, la) for la in layers])
        mon.step(grad_norm=total, max_norm=1.0)
        opt.step()
        opt.zero_grad()
    mon.close()
    before, after = torch.tensor(pre), torch.tensor(post)
    jump = before[29] / before[9:29].median(dim=0).values
    seen_after = after[29] / after[9:29].median(dim=0).values
    truth = {("spike", layers[k]) for k in range(2) if jump[k] > 10}
    out = flag_outcome(truth, _flags(mon))
    return Outcome(out.expected + f" (pre-clip jump {jump.max().item():.3g}x; after clipping only "
                   f"{seen_after.max().item():.3g}x)", out.got, out.ok, out.false_alarms)


def _layer_norm(model: nn.Module, layer: str) -> float:
    return torch.cat([p.grad.flatten() for p in getattr(model, layer).parameters()]).norm().item()


def update_too_large() -> Outcome:
    """SGD with lr=2 on a small MLP (it bounces instead of learning). Truth: ||Δw||/||w|| of each layer
    measured around opt.step() by hand, above 0.1 on 5 steps in a row after step 20."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    mon = gv.GradientMonitor(model, optimizer=opt)
    layers = ("fc1", "fc2")
    ratios: list[list[float]] = []
    for i in range(30):
        x, y = _data(i)
        nn.functional.mse_loss(model(x), y).backward()
        mon.step()
        before = [torch.cat([p.detach().flatten().clone() for p in getattr(model, la).parameters()]) for la in layers]
        opt.step()
        after = [torch.cat([p.detach().flatten() for p in getattr(model, la).parameters()]) for la in layers]
        ratios.append([((a - b).norm() / b.norm()).item() for a, b in zip(after, before, strict=True)])
        opt.zero_grad()
    mon.close()
    big = torch.tensor(ratios)[20:25] > 0.1  # steps 21..25
    truth = {("update-size", layers[k]) for k in range(2) if bool(big[:, k].all())}
    measured = mon.history("update")
    same = torch.allclose(measured, torch.tensor(ratios), rtol=1e-4)
    out = flag_outcome(truth, _flags(mon), allowed={("spike", la) for la in layers})
    return Outcome(out.expected + " (recorded ratios = hand-measured)", f"{out.got}; ratios equal: {same}",
                   out.ok and same, out.false_alarms)


def clipping_most_steps() -> Outcome:
    """clip_grad_norm_(max_norm=0.01) on a loop whose gradients are ~1. Truth: the norms it returned."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mon = gv.GradientMonitor(model, optimizer=opt)
    bit = 0
    for i in range(20):
        _loss(model, i).backward()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
        bit += int(total > 0.01)
        mon.step(grad_norm=total, max_norm=0.01)
        opt.step()
        opt.zero_grad()
    mon.close()
    out = flag_outcome({("clipping", "")} if bit > 10 else set(), _flags(mon))
    return Outcome(out.expected + f" (bit on {bit} of 20)", f"{out.got}; counted {mon.clipped}",
                   out.ok and mon.clipped == (bit, 20), out.false_alarms)


def _rel_err(got: torch.Tensor, truth: torch.Tensor) -> float:
    return float(((got - truth).abs() / truth.abs()).max().item())


def sparse_embedding() -> Outcome:
    """nn.Embedding(sparse=True) with SparseAdam. Truth: norms and max |g| of the densified gradient."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(100, 16, sparse=True), nn.Linear(16, 3))
    opt_sparse = torch.optim.SparseAdam(list(model[0].parameters()), lr=1e-2)
    opt_dense = torch.optim.Adam(list(model[1].parameters()), lr=1e-2)
    mon = gv.GradientMonitor(model, optimizer=[opt_sparse, opt_dense])
    errs: list[float] = []
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        idx = torch.randint(0, 100, (8, 5), generator=gen)  # repeated indices: an uncoalesced sparse gradient
        model(idx).pow(2).mean().backward()
        dense = model[0].weight.grad.to_dense()
        truth = torch.tensor([dense.norm().item(), torch.cat([p.grad.flatten() for p in model[1].parameters()])
                              .norm().item()])
        mon.step()
        errs.append(_rel_err(mon.history("norm")[-1], truth))
        errs.append(_rel_err(mon.history("max_abs")[-1][:1], dense.abs().max().reshape(1)))
        opt_sparse.step()
        opt_dense.step()
        opt_sparse.zero_grad()
        opt_dense.zero_grad()
    mon.close()
    err = max(errs)
    return Outcome("no crash, norms = PyTorch's (rel 1e-5), no flag", f"max rel error {err:.1e}",
                   err < 1e-5, tuple(f"{k} {t or '(model)'}" for k, t in sorted(_flags(mon))))


def grad_scaler_without_unscale() -> Outcome:
    """torch.amp.GradScaler("cpu") (scale 65536), no unscale_ before monitor.step(). Truth: the same step's
    gradient norms without scaling (a separate fp32 backward)."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu")
    mon = gv.GradientMonitor(model, optimizer=opt, scaler=scaler)
    errs: list[float] = []
    scaled_ratio = math.nan
    for i in range(4):
        truth = [torch.cat([g.flatten() for g in _fresh_grads(model, i)[2 * k: 2 * k + 2]]).norm() for k in range(2)]
        scaler.scale(_loss(model, i)).backward()
        mon.step()
        scaled_ratio = model.fc1.weight.grad.norm().item() / model.fc1.weight.grad.div(scaler.get_scale()).norm().item()
        errs.append(_rel_err(mon.history("norm")[-1], torch.stack(truth)))
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    mon.close()
    err = max(errs)
    return Outcome("norms = unscaled truth (rel 1e-5), no flag",
                   f"max rel error {err:.1e} (raw .grad is {scaled_ratio:.0f}x the truth)", err < 1e-5,
                   tuple(f"{k} {t or '(model)'}" for k, t in sorted(_flags(mon))))


def healthy_mlp_sgd() -> Outcome:
    """MLP fitting a teacher network, SGD lr 0.1, zero_grad every step, 150 steps: no flag."""
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    model = MLP(8, 32, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = gv.GradientMonitor(model, optimizer=opt)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(150):
        x = torch.randn(32, 8, generator=gen)
        with torch.no_grad():
            y = teacher(x)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        mon.step()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    mon.close()
    out = flag_outcome(set(), _flags(mon))
    learned = losses[-1] < 0.5 * losses[0]
    return Outcome("no flag (and the loss halves)", f"{out.got}; loss {losses[0]:.3f} -> {losses[-1]:.3f}",
                   learned, out.false_alarms)


def healthy_transformer_adamw_clip() -> Outcome:
    """Tiny GPT-2 learning to copy its input, AdamW lr 1e-3, clip_grad_norm_(1.0), 60 steps: no flag."""
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    mon = gv.GradientMonitor(model, optimizer=opt)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(60):
        idx = torch.randint(0, 101, (8, 16), generator=gen)
        _, loss = model(idx, idx)
        loss.backward()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        mon.step(grad_norm=total, max_norm=1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    mon.close()
    out = flag_outcome(set(), _flags(mon))
    learned = losses[-1] < 0.8 * losses[0]
    return Outcome("no flag (and the loss falls)", f"{out.got}; loss {losses[0]:.2f} -> {losses[-1]:.2f}, "
                   f"clipping bit on {mon.clipped[0]} of {mon.clipped[1]} steps", learned, out.false_alarms)


CASES: list[Case] = [
    Case("monitor-stale-no-zero-grad", "stale-grad", stale_no_zero_grad),
    Case("monitor-stale-unrecorded-step", "stale-grad", stale_unrecorded_step),
    Case("monitor-not-in-opt-opt-zero", "not-in-optimizer", not_in_optimizer_opt_zero_grad),
    Case("monitor-not-in-opt-model-zero", "not-in-optimizer", not_in_optimizer_model_zero_grad),
    Case("monitor-no-grad-3-records", "no-grad", no_grad_for_n_steps),
    Case("monitor-spike", "spike", spike),
    Case("monitor-spike-hidden-by-clipping", "spike", spike_hidden_by_clipping),
    Case("monitor-update-too-large", "update-size", update_too_large),
    Case("monitor-clipping-most-steps", "clipping", clipping_most_steps),
    Case("monitor-sparse-embedding", "sparse", sparse_embedding),
    Case("monitor-grad-scaler", "amp", grad_scaler_without_unscale),
    Case("monitor-healthy-mlp-sgd", "healthy", healthy_mlp_sgd),
    Case("monitor-healthy-gpt-adamw-clip", "healthy", healthy_transformer_adamw_clip),
]

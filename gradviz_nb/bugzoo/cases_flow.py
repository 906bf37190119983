"""Bug-zoo cases for ``gv.gradient_flow``: vanishing, exploding, dead adapters, cut paths and their causes.

Each case measures PyTorch's truth first (which ``.grad`` is really ``None``, how far SGD really moves
each layer, whether one step really blows the loss up) and derives the expected flags from it.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Callable

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.analysis.layer_health import HORIZON_MOVE, HORIZON_STEPS
from gradviz_nb.bugzoo.case import Case, Outcome, flag_outcome
from gradviz_nb.probes.flow import GradientFlow

Pairs = set[tuple[str, str]]


def flags_of(flow: GradientFlow) -> Pairs:
    return {(f.kind, f.target) for f in flow.flags}


def no_grad_truth(model: nn.Module) -> set[str]:
    """Parameters that require grad and have ``.grad is None`` after the backward that just ran."""
    return {n for n, p in model.named_parameters() if p.requires_grad and p.grad is None}


def relative_moves(model: nn.Module, loss_fn: Callable[[nn.Module], torch.Tensor], steps: int = 10,
                   lr: float = 0.1) -> dict[str, float]:
    """How far SGD really moves each layer's weight, relative to its norm (the depth-trend truth)."""
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(model).backward()
        opt.step()
    return {n.rpartition(".")[0]: ((p.detach() - start[n]).norm() / start[n].norm()).item()
            for n, p in model.named_parameters() if n.endswith("weight")}


# -- vanishing / exploding ---------------------------------------------------------------------------


def deep_sigmoid(depth: int = 20, width: int = 16, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Sigmoid()]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def vanishing_sigmoid() -> Outcome:
    """20 sigmoid layers: the first layers' updates are lost. Expected: every layer SGD moves 100x less than
    the layers at the output end (median of the top quarter) is flagged vanishing; none within 3x of them is."""
    x, y = torch.randn(64, 16, generator=torch.Generator().manual_seed(1)), torch.zeros(64, 1)

    def loss_fn(m: nn.Module) -> torch.Tensor:
        return nn.functional.mse_loss(m(x), y)

    moves = relative_moves(deep_sigmoid(), loss_fn)
    top = statistics.median(list(moves.values())[-5:])  # the output end: the top quarter of the layers
    model = deep_sigmoid()
    loss_fn(model).backward()
    reported = flags_of(gv.gradient_flow(model))
    expected = {("vanishing", k) for k, v in moves.items() if v < top / 100}
    grey = {("vanishing", k) for k, v in moves.items() if top / 100 <= v < top / 3}
    return flag_outcome(expected, reported, allowed=grey)


def exploding_init() -> Outcome:
    """13 ReLU layers with weights scaled 4x at init. Truth: one SGD step at lr 1e-3 moves each layer by
    more than its own norm and the loss turns non-finite or grows 100x. Expected: all 13 exploding."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(13):
        linear = nn.Linear(64, 64)
        with torch.no_grad():
            linear.weight.mul_(4)
        layers += [linear, nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    x, y = torch.randn(32, 64), torch.randn(32, 64)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    reported = flags_of(gv.gradient_flow(model))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=1e-3).step()
    after = nn.functional.mse_loss(model(x), y).item()
    blew_up = not math.isfinite(after) or after > 100 * loss.item()
    moved = {n.rpartition(".")[0] for n, p in model.named_parameters()
             if n.endswith("weight") and (p.detach() - before[n]).norm() > before[n].norm()}
    expected = {("exploding", k) for k in moved} if blew_up else set()
    out = flag_outcome(expected, reported)
    return Outcome(f"{out.expected} (loss after one step: {after:.3g})", out.got, out.ok and blew_up, out.false_alarms)


class _ResidualSigmoid(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(16), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.sigmoid(self.fc(self.norm(x)))


def residual_without_final_norm() -> Outcome:
    """20 residual sigmoid blocks and a head with no final norm: the residual stream grows with depth and
    the head's gradient is 170x every other layer's. gradient_flow gets the loss as ``closure``. Truth: SGD at
    lr 1e-3 diverges within 10 steps, and one real SGD step of a layer alone (a copy of the model) raises the
    loss. Expected: exploding on the layers whose own step raises it."""
    torch.manual_seed(0)
    model = nn.Sequential(*[_ResidualSigmoid() for _ in range(20)], nn.Linear(16, 1))
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    reported = flags_of(gv.gradient_flow(model, closure=lambda: nn.functional.mse_loss(model(x), y)))
    raised = set()
    for layer in {n.rpartition(".")[0] for n, _ in model.named_parameters()}:
        alone = copy.deepcopy(model)  # a Parameter's deepcopy leaves .grad behind: copy it
        for (_, p), (_, q) in zip(model.named_parameters(), alone.named_parameters(), strict=True):
            q.grad = p.grad.clone()
        torch.optim.SGD([p for n, p in alone.named_parameters() if n.rpartition(".")[0] == layer], lr=1e-3).step()
        after = nn.functional.mse_loss(alone(x), y).item()
        if not after <= loss.item():
            raised.add(layer)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        step_loss = nn.functional.mse_loss(model(x), y)
        step_loss.backward()
        opt.step()
        losses.append(step_loss.item())
    diverged = not math.isfinite(losses[-1]) or losses[-1] > 10 * losses[0]
    out = flag_outcome({("exploding", k) for k in raised} if diverged else set(), reported)
    return Outcome(f"{out.expected} (loss {losses[0]:.3g} -> {losses[-1]:.3g} in 10 SGD steps)", out.got,
                   out.ok and diverged, out.false_alarms)

# -- a layer that stands out is judged by its consequence, not by the comparison ----------------------


def _regression(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 16, generator=gen)
    return x, 5 * torch.tanh(x @ torch.randn(16, 1, generator=gen)) + 5


def _one_step_moves(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable[[], torch.Tensor],
                    ) -> tuple[dict[str, float], float, float]:
    """One real optimizer step: each layer's ||Δw|| / ||w||, and the loss before and after it."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.zero_grad()
    loss = loss_fn()
    loss.backward()
    opt.step()
    moves: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for n, p in model.named_parameters():
        moves.setdefault(n.rpartition(".")[0], []).append((before[n].flatten(), p.detach().flatten()))
    rel = {k: (torch.cat([a for _, a in v]) - torch.cat([b for b, _ in v])).norm().item()
           / torch.cat([b for b, _ in v]).norm().item() for k, v in moves.items()}
    return rel, loss.item(), loss_fn().item()


def saturated_under_a_healthy_head() -> Outcome:
    """Linear-tanh, then a Linear whose bias of 15 saturates the sigmoid after it, then the head; SGD at lr
    0.01. The head's gradient norm is ~2e7x every other layer's, yet the loss falls at this lr: the head is
    not exploding, the layers under it are vanishing. Truth: one real SGD step (the head moves by less than
    its own norm and the loss falls; each layer a million such steps would move by under 10% of its norm
    is vanishing), and the loss over 50 steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Sigmoid(), nn.Linear(32, 1))
    with torch.no_grad():
        model[2].bias.fill_(15.0)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(256, 16, generator=gen)
    y = 3 + torch.randn(256, 1, generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)

    def loss_fn() -> torch.Tensor:
        return nn.functional.mse_loss(model(x), y)

    loss_fn().backward()
    reported = flags_of(gv.gradient_flow(model, optimizer=opt))
    moves, first, after = _one_step_moves(model, opt, loss_fn)
    for _ in range(49):
        _one_step_moves(model, opt, loss_fn)
    last = loss_fn().item()
    expected = {("vanishing", k) for k, v in moves.items() if v * HORIZON_STEPS < HORIZON_MOVE}
    expected |= {("exploding", k) for k, v in moves.items() if v > 1 or after > first}
    out = flag_outcome(expected, reported)
    return Outcome(f"{out.expected} (one step moves the head by {moves['4']:.2g} of its norm; loss {first:.3g} -> "
                   f"{after:.3g} after it, {last:.3g} after 50)", out.got, out.ok and last < first, out.false_alarms)


def _head_dominates(gain: float = 300.0) -> nn.Sequential:
    """Six Linear-LayerNorm-ReLU blocks with weights scaled ``gain`` x (LayerNorm undoes it forward, so their
    gradients are ``gain`` x smaller), then the head, whose gradient norm then dominates."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    width = 16
    for _ in range(6):
        linear = nn.Linear(width, 64)
        with torch.no_grad():
            linear.weight.mul_(gain)
            linear.bias.zero_()
        layers += [linear, nn.LayerNorm(64, elementwise_affine=False), nn.ReLU()]
        width = 64
    return nn.Sequential(*layers, nn.Linear(64, 1))


def healthy_deep_head_dominates() -> Outcome:
    """The head's gradient norm is ~30x every other layer's, and Adam (lr 1e-3) trains every layer: 300 steps
    move each layer's weights and the loss falls by more than half. Expected: no flag (the old rules called
    the head exploding and the six blocks vanishing)."""
    model = _head_dominates(gain=30.0)
    x, y = _regression()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    nn.functional.mse_loss(model(x), y).backward()
    layers = gv.gradient_flow(model, optimizer=opt).layers
    reported = flags_of(gv.gradient_flow(model, optimizer=opt))
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    losses = []
    for _ in range(300):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    moved = min(((p.detach() - start[n]).norm() / start[n].norm()).item()
                for n, p in model.named_parameters() if n.endswith("weight"))
    head = max(m.norm for m in layers) / sorted(m.norm for m in layers)[-2]
    out = flag_outcome(set(), reported)
    learns = losses[-1] < 0.5 * losses[0] and moved > 0.01
    return Outcome(f"no flag (head {head:.3g}x the next layer; loss {losses[0]:.3g} -> {losses[-1]:.3g}, every "
                   f"weight moved by >= {moved:.2g} of its norm)", out.got, learns and out.ok, out.false_alarms)


# -- no gradient: the cause must name the evidence ----------------------------------------------------


def _with_reason(flow: GradientFlow, target: str, needle: str) -> tuple[bool, str]:
    reasons = [f.reason for f in flow.flags if f.target == target and f.kind == "no-grad"]
    return any(needle in r for r in reasons), (reasons[0] if reasons else "no flag")


def _cause_outcome(model: nn.Module, flow: GradientFlow, target: str, needle: str,
                   allowed: Pairs = frozenset()) -> Outcome:  # type: ignore[assignment]
    truth = no_grad_truth(model)
    expected = {("no-grad", n) for n in truth}
    out = flag_outcome(expected, flags_of(flow), allowed)
    named, reason = _with_reason(flow, target, needle)
    return Outcome(f"{out.expected}; cause names {needle!r}", f"{out.got}; cause: {reason}", out.ok and named,
                   out.false_alarms)


class _Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc(h.detach())  # the bug: the head cuts the body off


def detach_in_other_module() -> Outcome:
    """body -> head, where head's forward detaches its input: the cause names head's detach and its line."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("body", nn.Linear(8, 8))
    model.add_module("head", _Head())
    with gv.capture(model) as cap:
        loss = model(torch.randn(4, 8)).sum()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    flow = gv.gradient_flow(model, graph=graph, capture=cap)
    return _cause_outcome(model, flow, "body.weight", "detach() in module 'head' at ")


def data_read() -> Outcome:
    """A forward reads ``fc1.weight.data``: only that weight loses its gradient; the cause names .data."""
    torch.manual_seed(0)
    model = nn.ModuleDict({"fc1": nn.Linear(4, 8), "fc2": nn.Linear(8, 1)})

    def forward(x: torch.Tensor) -> torch.Tensor:
        return model["fc2"](torch.relu(x @ model["fc1"].weight.data.T + model["fc1"].bias))

    with gv.capture(model) as cap:
        loss = forward(torch.randn(3, 4)).sum()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    return _cause_outcome(model, gv.gradient_flow(model, graph=graph, capture=cap), "fc1.weight", ".data")


def backward_not_run() -> Outcome:
    """Gradients inspected before ``loss.backward()``: the cause says backward has not run."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    model(torch.randn(2, 4)).sum()
    return _cause_outcome(model, gv.gradient_flow(model), "0.weight", "backward() has not run")


class MoE(nn.Module):
    """Top-1 routing to 4 experts; the router's bias keeps every token away from expert 3."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(8, 4)
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
        with torch.no_grad():
            self.router.bias.copy_(torch.tensor([0.0, 0.0, 0.0, -30.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.router(x).softmax(-1)
        choice = gate.argmax(-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            picked = choice == i
            if picked.any():
                out[picked] = expert(x[picked]) * gate[picked, i : i + 1]
        return out


def moe_unreached_expert() -> Outcome:
    """An MoE expert no token reaches: no gradient, and the cause is that its module was never called."""
    torch.manual_seed(0)
    model = MoE()
    with gv.capture(model) as cap:
        loss = model(torch.randn(16, 8)).pow(2).sum()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    flow = gv.gradient_flow(model, graph=graph, capture=cap)
    return _cause_outcome(model, flow, "experts.3.weight", "no call of its module 'experts.3'")


def nan_gradient() -> Outcome:
    """log of a value that reaches zero: NaN/Inf gradients, flagged on exactly the parameters holding them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    with torch.no_grad():
        model[2].bias.fill_(-100.0)  # relu(...) @ w + b < 0 everywhere: sqrt of a negative is NaN
    model(torch.randn(8, 4)).sqrt().sum().backward()
    truth = {n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()}
    reported = flags_of(gv.gradient_flow(model))
    return flag_outcome({("nan", n) for n in truth}, reported, allowed={("nan", n.rpartition(".")[0]) for n in truth})


# -- adapters -------------------------------------------------------------------------------------


def dead_lora_detached() -> Outcome:
    """LoRA on a small GPT-2, base frozen; a bug detaches blocks.1.attn's output. Expected: its two adapters
    flagged dead (and their parameters no-grad), as PyTorch's ``.grad is None`` says."""
    from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss

    torch.manual_seed(0)
    model = add_lora(GPT2(GPT2Config.small_test()))
    attn = model.blocks[1].attn
    original = attn.forward
    attn.forward = lambda h: original(h).detach()
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=2)
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    truth = no_grad_truth(model)
    dead = {n.split(".lora_")[0] for n in truth}
    expected = {("dead-adapter", d) for d in dead}
    return flag_outcome(expected, flags_of(gv.gradient_flow(model, graph=graph, capture=cap)),
                        allowed={("no-grad", n) for n in truth})


def peft_disabled_adapter() -> Outcome:
    """peft LoRA where one layer's adapter is switched off (``enable_adapters(False)``): flagged dead."""
    import peft
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0, fan_in_fan_out=True)
    model = peft.get_peft_model(transformers.GPT2LMHeadModel(config), lora)
    layer = model.base_model.model.transformer.h[0].attn.c_attn
    layer.enable_adapters(False)  # the bug
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    dead = {n.split(".lora_")[0] for n, p in model.named_parameters() if "lora_" in n and p.grad is None}
    return flag_outcome({("dead-adapter", d) for d in dead}, flags_of(gv.gradient_flow(model)))


# -- the optimizer, mixed precision, sparse gradients ------------------------------------------------


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))


def frozen_block() -> Outcome:
    """The optimizer was built over every parameter, then a block was frozen by mistake. Truth: after a
    real step, exactly that block's parameters never moved. Expected: frozen on each of them."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for p in model[2].parameters():
        p.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(torch.randn(4, 8)).sum().backward()
    flow = gv.gradient_flow(model, optimizer=opt)
    opt.step()
    still = {n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])}
    return flag_outcome({("frozen", n) for n in still}, flags_of(flow))


def grad_scaler_not_unscaled() -> Outcome:
    """bf16 autocast with a GradScaler, gradients read before ``unscale_``. Truth: the norms of an unscaled
    backward. Expected: with ``scaler=`` every norm equals the truth to 1e-5 and nothing is flagged."""
    model, x = _mlp(), torch.randn(4, 8)
    model(x).sum().backward()
    truth = {n: p.grad.norm().item() for n, p in model.named_parameters()}
    model.zero_grad()
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(x).sum()).backward()
    flow = gv.gradient_flow(model, scaler=scaler)
    worst = max(abs(flow.param(n).norm / v - 1) for n, v in truth.items())
    return Outcome("norms equal the unscaled truth, no flag", f"worst relative error {worst:.1e}; "
                   f"{len(flow.flags)} flags", worst < 1e-5, tuple(f"{f.kind} {f.target}" for f in flow.flags))


def sparse_embedding() -> Outcome:
    """``nn.Embedding(sparse=True)``: statistics and histograms of the sparse gradient, equal to its dense form."""
    from gradviz_nb.probes.flow import layer_histograms

    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8, sparse=True), nn.Linear(8, 1))
    model(torch.tensor([[1, 2, 2, 7]])).sum().backward()
    dense = model[0].weight.grad.to_dense()
    stats = gv.gradient_flow(model).param("0.weight")
    _, hists = layer_histograms(model)
    err = max(abs(stats.norm / dense.norm().item() - 1), abs(stats.max_abs / dense.abs().max().item() - 1),
              abs(hists["0"][0] - (dense == 0).double().mean().item()))
    return Outcome("norm, max and zero fraction of the dense gradient", f"worst relative error {err:.1e}",
                   err < 1e-5)


CASES: list[Case] = [
    Case("vanishing-deep-sigmoid", "vanishing", vanishing_sigmoid),
    Case("exploding-bad-init", "exploding", exploding_init),
    Case("exploding-residual-no-final-norm", "exploding", residual_without_final_norm),
    Case("vanishing-saturated-under-healthy-head", "vanishing", saturated_under_a_healthy_head),
    Case("healthy-deep-head-dominates", "healthy", healthy_deep_head_dominates),
    Case("detach-in-another-module", "cause", detach_in_other_module),
    Case("data-read-of-a-parameter", "cause", data_read),
    Case("backward-not-run-yet", "cause", backward_not_run),
    Case("moe-expert-unreached", "no-grad", moe_unreached_expert),
    Case("nan-gradient", "nan", nan_gradient),
    Case("dead-lora-detached", "dead-adapter", dead_lora_detached),
    Case("frozen-block", "frozen", frozen_block),
    Case("grad-scaler-not-unscaled", "wrong-figure", grad_scaler_not_unscaled),
    Case("sparse-embedding-flow", "wrong-figure", sparse_embedding),
    Case("peft-adapter-switched-off", "dead-adapter", peft_disabled_adapter, needs=("transformers", "peft")),
]

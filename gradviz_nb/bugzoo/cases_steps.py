# mypy: disable-error-code="no-untyped-call,union-attr,index,operator,arg-type,no-any-return,attr-defined"
# (bug-zoo cases drive real models the way user code does, like the cases listed in pyproject.toml's override)
"""Bug-zoo cases for the doctor's step arithmetic and registration: each broken loop next to its healthy twin.

The truth is measured in PyTorch on the same loop without the doctor: the gradient the optimizer really
used against one backward's, the update a parameter really received against its optimizer's rule, the
parameter that really never moves, the scheduler state really left as it was.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo.case import Case, Outcome, flag_outcome

_X = torch.randn(16, 8, generator=torch.Generator().manual_seed(3))
_Y = torch.randn(16, 1, generator=torch.Generator().manual_seed(4))


def _findings(dx: gv.Diagnosis) -> set[tuple[str, str]]:
    return {(f.kind, f.target) for f in dx.findings}


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _loss(model: nn.Module, x: torch.Tensor = _X, y: torch.Tensor = _Y) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)


def _grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _one_backward(model: nn.Module, loss: Callable[[nn.Module], torch.Tensor]) -> torch.Tensor:
    """The gradient one backward of ``loss`` gives, on a copy (the model is not touched)."""
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    loss(twin).backward()
    return _grads(twin)


def _both(truth: set[tuple[str, str]], step: Callable[[], Any], model: nn.Module,
          opt: torch.optim.Optimizer | None) -> Outcome:
    """The doctor with the optimizer and without it (then it learns optimizers from torch's global hooks)."""
    a = flag_outcome(truth, _findings(gv.doctor(step, model, opt)))
    b = flag_outcome(truth, _findings(gv.doctor(step, model)))
    return Outcome(f"{a.expected} (with and without optimizer=)", f"{a.got} | {b.got}", a.ok and b.ok,
                   a.false_alarms + b.false_alarms)


def double_backward() -> Outcome:
    """loss.backward(retain_graph=True) then loss.backward() again. Truth: the .grad SGD uses is twice one
    backward's gradient."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        loss = _loss(model)
        loss.backward(retain_graph=True)
        loss.backward()  # the bug
        opt.step()

    one = _one_backward(model, _loss)
    dx = gv.doctor(step, model, opt)
    opt.zero_grad()
    loss = _loss(model)
    loss.backward(retain_graph=True)
    loss.backward()
    doubled = torch.allclose(_grads(model), 2 * one, rtol=1e-5, atol=1e-7)
    opt.zero_grad(set_to_none=True)
    return flag_outcome({("double-backward", "(model)")} if doubled else set(), _findings(dx))


_MICRO = 4


def _accumulating(model: nn.Module, opt: torch.optim.Optimizer, divide: bool) -> Callable[[], None]:
    def step() -> None:
        opt.zero_grad()
        for xb, yb in zip(_X.chunk(_MICRO), _Y.chunk(_MICRO), strict=True):
            loss = _loss(model, xb, yb)
            (loss / _MICRO if divide else loss).backward()
        opt.step()

    return step


def _accumulation_truth(model: nn.Module, divide: bool) -> float:
    """|accumulated gradient| / |mean of the micro-batches' gradients|, measured on a copy."""
    twin = copy.deepcopy(model)
    micro = [_one_backward(twin, lambda m, xb=xb, yb=yb: _loss(m, xb, yb))  # type: ignore[misc]
             for xb, yb in zip(_X.chunk(_MICRO), _Y.chunk(_MICRO), strict=True)]
    mean = torch.stack(micro).mean(0)
    twin.zero_grad(set_to_none=True)
    for xb, yb in zip(_X.chunk(_MICRO), _Y.chunk(_MICRO), strict=True):
        loss = _loss(twin, xb, yb)
        (loss / _MICRO if divide else loss).backward()
    return float(_grads(twin).norm() / mean.norm())


def unscaled_accumulation() -> Outcome:
    """Four micro-batches accumulated without dividing the loss. Truth: the gradient SGD uses is 4x the
    micro-batches' mean gradient."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ratio = _accumulation_truth(model, divide=False)
    truth = {("unscaled-accumulation", "(model)")} if abs(ratio - _MICRO) < 1e-3 else set()
    return _both(truth, _accumulating(model, opt, divide=False), model, opt)


def healthy_accumulation() -> Outcome:
    """The same accumulation with each loss divided by 4. Truth: the gradient is the micro-batches' mean."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ratio = _accumulation_truth(model, divide=True)
    out = _both(set(), _accumulating(model, opt, divide=True), model, opt)
    return Outcome(out.expected + f" (|g| / mean = {ratio:.3f})", out.got, out.ok and abs(ratio - 1) < 1e-3,
                   out.false_alarms)


def two_optimizers() -> Outcome:
    """A second optimizer over the head, which the first (built from model.parameters()) also holds. Truth:
    the head moves by the sum of both SGD steps, 2x lr*g."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    head = torch.optim.SGD(model[2].parameters(), lr=0.1)  # the bug: model[2] is in both

    def step() -> None:
        opt.zero_grad()
        head.zero_grad()
        _loss(model).backward()
        opt.step()
        head.step()

    dx = gv.doctor(step, model, opt)
    before = model[2].weight.detach().clone()
    opt.zero_grad()
    _loss(model).backward()
    g = model[2].weight.grad.clone()
    opt.step()
    head.step()
    twice = torch.allclose(before - model[2].weight.detach(), 2 * 0.1 * g, atol=1e-6)
    return flag_outcome({("two-optimizers", "2")} if twice else set(), _findings(dx))


def healthy_two_optimizers() -> Outcome:
    """Two optimizers over disjoint parameters (body SGD, head Adam) and an LR scheduler stepping each step:
    ok. Truth: no parameter is in both; the doctor leaves the scheduler and the second optimizer as they were."""
    model = _mlp()
    body = torch.optim.SGD(model[0].parameters(), lr=0.1)
    head = torch.optim.Adam(model[2].parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(body, step_size=1, gamma=0.5)

    def step() -> None:
        body.zero_grad()
        head.zero_grad()
        _loss(model).backward()
        body.step()
        head.step()
        sched.step()

    disjoint = not {id(p) for p in model[0].parameters()} & {id(p) for p in model[2].parameters()}
    state = (copy.deepcopy(sched.state_dict()), body.param_groups[0]["lr"], len(head.state))
    out = _both(set(), step, model, body)
    after = (sched.state_dict(), body.param_groups[0]["lr"], len(head.state))
    kept = state == after
    return Outcome(out.expected + " (scheduler and second optimizer left as they were)",
                   out.got + ("" if kept else " | state changed"), out.ok and disjoint and kept, out.false_alarms)


def zero_grad_before_step() -> Outcome:
    """opt.zero_grad() between backward() and step(). Truth: backward gave every parameter a gradient, yet
    no parameter moves (the gradient reached them: they are not unused)."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        _loss(model).backward()
        opt.zero_grad()  # the bug
        opt.step()

    had = all(g.abs().sum() > 0 for g in [_one_backward(model, _loss)])
    before = [p.detach().clone() for p in model.parameters()]
    step()
    still = all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    return _both({("zero-grad-before-step", "(model)")} if had and still else set(), step, model, opt)


class _Recreating(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.gain = nn.Parameter(torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.gain = nn.Parameter(torch.ones(8))  # the bug: a new parameter at every call
        return (self.body(x) * self.gain).sum(-1, keepdim=True)


def recreated_parameter() -> Outcome:
    """A parameter re-created in forward. Truth: after a step the model's gain is a new object with a .grad,
    and the object the optimizer holds never moved."""
    torch.manual_seed(0)
    model = _Recreating()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    held = model.gain
    dx = gv.doctor(lambda: (opt.zero_grad(), _loss(model).backward(), opt.step()), model, opt)
    before = held.detach().clone()
    opt.zero_grad()
    _loss(model).backward()
    opt.step()
    truth = model.gain is not held and model.gain.grad is not None and torch.equal(held.detach(), before)
    return flag_outcome({("recreated-parameter", "gain")} if truth else set(), _findings(dx))


class _Unregistered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 1)
        self.gates = [nn.Parameter(torch.ones(8)), nn.Parameter(torch.ones(8))]  # the bug: a plain list
        self.register_buffer("temperature", torch.ones(1, requires_grad=True))  # the bug: a buffer
        self.decay = [self.fc.weight]  # a reference to a registered weight: fine

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x * self.gates[0] * self.gates[1]) / self.temperature


def not_a_parameter_list_and_buffer() -> Outcome:
    """Parameters in a plain list and a buffer made with requires_grad=True. Truth: both get a .grad from
    backward and never move; model.parameters() (and so the optimizer) holds neither."""
    torch.manual_seed(0)
    model = _Unregistered()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = lambda: (opt.zero_grad(), _loss(model).backward(), opt.step())  # noqa: E731
    dx = gv.doctor(step, model, opt)
    before = [g.detach().clone() for g in model.gates] + [model.temperature.detach().clone()]
    step()
    ids = {id(p) for p in model.parameters()}
    truth = set()
    if all(g.grad is not None and id(g) not in ids for g in model.gates) \
            and all(torch.equal(g, b) for g, b in zip(model.gates, before, strict=False)):
        truth.add(("not-a-parameter", "gates"))
    if model.temperature.grad is not None and torch.equal(model.temperature, before[-1]):
        truth.add(("not-a-parameter", "temperature"))
    return flag_outcome(truth, _findings(dx))


class _MoE(nn.Module):
    """Two experts and a router; the load-balancing loss is kept on the module for the loop to add."""

    def __init__(self) -> None:
        super().__init__()
        self.router, self.experts = nn.Linear(8, 2), nn.ModuleList([nn.Linear(8, 1), nn.Linear(8, 1)])
        self.aux_loss = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.router(x).softmax(-1)
        self.aux_loss = (gate.mean(0) ** 2).sum() * 2  # a value with a grad_fn, not a weight
        return sum(gate[:, i:i + 1] * e(x) for i, e in enumerate(self.experts))


def healthy_aux_loss() -> Outcome:
    """A mixture-of-experts load-balancing loss kept on the module (self.aux_loss = ...): ok. Truth: it has a
    grad_fn (a value computed in forward), so it is not a weight to register."""
    torch.manual_seed(0)
    model = _MoE()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        (_loss(model) + 0.01 * model.aux_loss).backward()
        opt.step()

    out = _both(set(), step, model, opt)
    value = model.aux_loss.grad_fn is not None
    return Outcome(out.expected, out.got, out.ok and value, out.false_alarms)


CASES: list[Case] = [
    Case("steps-double-backward", "double-backward", double_backward),
    Case("steps-unscaled-accumulation", "unscaled-accumulation", unscaled_accumulation),
    Case("steps-healthy-accumulation", "healthy", healthy_accumulation),
    Case("steps-two-optimizers", "two-optimizers", two_optimizers),
    Case("steps-healthy-two-optimizers-scheduler", "healthy", healthy_two_optimizers),
    Case("steps-zero-grad-before-step", "zero-grad-before-step", zero_grad_before_step),
    Case("steps-recreated-parameter", "recreated-parameter", recreated_parameter),
    Case("steps-not-a-parameter-list-buffer", "not-a-parameter", not_a_parameter_list_and_buffer),
    Case("steps-healthy-aux-loss", "healthy", healthy_aux_loss),
]

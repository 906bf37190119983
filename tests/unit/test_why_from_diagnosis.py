"""gv.why(diagnosis, name) answers from what the step measured: a finding about the whole step speaks of every
parameter, the status is the gradient the step used, and the line is the user's."""

from __future__ import annotations

import inspect

import torch
from torch import nn

import gradviz_nb as gv

X, Y = torch.randn(16, 4, generator=torch.Generator().manual_seed(1)), torch.randn(16, 2)


def _model() -> tuple[nn.Sequential, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_a_second_backward_is_why_every_gradient_is_scaled_with_its_line() -> None:
    model, opt = _model()

    def step() -> None:
        opt.zero_grad()
        loss = ((model(X) - Y) ** 2).mean()
        loss.backward(retain_graph=True)
        loss.backward()
        opt.step()

    dx = gv.doctor(step, model, opt)
    assert [f.kind for f in dx.findings] == ["double-backward"], dx.summary()
    second = f"test_why_from_diagnosis.py:{inspect.getsourcelines(step)[1] + 4}"
    for name in ("0.weight", "2.bias"):
        w = dx.why(name)
        assert (w.status, w.kind) == ("scaled", "double-backward"), w.text()
        assert second in w.evidence, w.text()


def test_clipping_to_nothing_is_why_the_gradient_is_tiny() -> None:
    model, opt = _model()

    def step() -> None:
        opt.zero_grad()
        ((model(X) - Y) ** 2).mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-9)
        opt.step()

    dx = gv.doctor(step, model, opt)
    w = dx.why("0.weight")
    assert (w.status, w.kind) == ("tiny", "clipped-away"), w.text()


class DropGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> None:
        return None  # the gradient stops here


def test_a_custom_backward_that_drops_the_gradient_is_named_with_the_line_that_applied_it() -> None:
    model, opt = _model()

    def loss() -> torch.Tensor:
        h = DropGrad.apply(model[0](X))
        return ((model[2](model[1](h)) - Y) ** 2).mean()

    def step() -> None:
        opt.zero_grad()
        loss().backward()
        opt.step()

    w = gv.doctor(step, model, opt).why("0.weight")
    applied = f"test_why_from_diagnosis.py:{inspect.getsourcelines(loss)[1] + 1}"
    assert (w.status, w.kind) == ("none", "custom-backward") and applied in w.cause, w.text()


def test_two_optimizers_are_named_with_the_lines_that_stepped_them() -> None:
    model, opt = _model()
    second = torch.optim.SGD(model[2].parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        ((model(X) - Y) ** 2).mean().backward()
        opt.step()
        second.step()

    w = gv.doctor(step, model, opt).why("2.weight")
    stepped = f"test_why_from_diagnosis.py:{inspect.getsourcelines(step)[1] + 4}"
    assert w.kind == "two-optimizers" and stepped in w.evidence, w.text()


def test_a_gradient_cleared_before_the_step_is_none_as_the_step_used_it() -> None:
    model, opt = _model()

    def step() -> None:
        opt.zero_grad()
        ((model(X) - Y) ** 2).mean().backward()
        opt.zero_grad()
        opt.step()

    dx = gv.doctor(step, model, opt)
    w = dx.why("0.weight")
    assert (w.status, w.kind) == ("none", "zero-grad-before-step"), w.text()
    assert dx.used["0.weight"] is None and dx.grad_norms["0.weight"]  # backward gave one; the step saw None

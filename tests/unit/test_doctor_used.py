"""What the step used: gradient writes measured in float64 with the caller's line, stale gradients judged per
parameter, learning rates as the steps used them, and custom Functions checked against finite differences."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.doctor.checks_values import function_factor
from gradviz_nb.doctor.values_watch import FunctionCall


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


# Drawn from their own generators: from the global RNG they would depend on which tests ran before (one
# draw in a couple of hundred made the healthy step of test_stale_is_per_parameter exploding).
X = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
Y = torch.randn(8, 1, generator=torch.Generator().manual_seed(2))


def test_a_write_into_grad_is_measured_in_float64_with_its_line() -> None:
    """Gradients of 1e-30 scaled by 1e-9: a float32 norm would underflow to 0 and hide the factor."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        (nn.functional.mse_loss(model(X), Y) * 1e-28).backward()
        for p in model[2].parameters():
            p.grad.mul_(1e-9)  # the line the finding must name
        opt.step()

    dx = gv.doctor(step, model, opt)
    found = [f for f in dx.findings if f.kind == "grad-edited"]
    assert [f.target for f in found] == ["2"]
    assert "test_doctor_used.py:" in found[0].evidence and "1e-09" in found[0].evidence


def test_clipping_that_keeps_the_gradient_is_no_finding() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        nn.functional.mse_loss(model(X), Y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)  # bites, leaves a direction
        opt.step()

    assert gv.doctor(step, model, opt).findings == []


def test_stale_is_per_parameter() -> None:
    """Two models, one step each per step; each optimizer zeroes its own just before its own backward: healthy.
    The same loop with the second zero_grad removed: the second model's parameters are stale, only them."""
    torch.manual_seed(0)
    model = nn.ModuleDict({"a": nn.Linear(4, 1), "b": nn.Linear(4, 1)})
    opt_a = torch.optim.SGD(model["a"].parameters(), lr=0.1)
    opt_b = torch.optim.SGD(model["b"].parameters(), lr=0.1)

    def step(zero_b: bool) -> None:
        opt_a.zero_grad()
        model["a"](X).pow(2).mean().backward()
        opt_a.step()
        if zero_b:
            opt_b.zero_grad()
        model["b"](X).pow(2).mean().backward()
        opt_b.step()

    healthy = gv.doctor(lambda: step(True), model, opt_a)
    assert healthy.findings == [], healthy.summary()
    stale = [f for f in gv.doctor(lambda: step(False), model, opt_a).findings if f.kind == "stale-grad"]
    assert [f.target for f in stale] == ["b"]


def test_lr_is_judged_on_the_rates_the_steps_used() -> None:
    """A group at lr 0 outside the step but 0.1 inside it is healthy; the reverse is lr-zero."""
    for inside, expected in ((0.1, []), (0.0, ["lr-zero"])):
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1 - inside)

        def step(lr: float = inside, model: nn.Module = model, opt: torch.optim.Optimizer = opt) -> None:
            opt.zero_grad()
            nn.functional.mse_loss(model(X), Y).backward()
            outside = opt.param_groups[0]["lr"]
            opt.param_groups[0]["lr"] = lr
            opt.step()
            opt.param_groups[0]["lr"] = outside

        assert [f.kind for f in gv.doctor(step, model, opt).findings] == expected


class _Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


class _Reversed(_Scaled):
    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return -0.3 * g


class _Wrong(_Scaled):
    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g.roll(1, 0)


def test_function_factor_against_finite_differences() -> None:
    x = (torch.randn(3, 2, dtype=torch.float64), True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert function_factor(FunctionCall(_Scaled, (x,), "")) [:2] == (True, 1.0)
        agrees, factor, _ = function_factor(FunctionCall(_Reversed, (x,), ""))
        assert not agrees and factor is not None and abs(factor + 0.15) < 1e-6  # -0.3 g against the true 2 g
        agrees, factor, err = function_factor(FunctionCall(_Wrong, (x,), ""))
        assert not agrees and factor is None and err > 0.1
    assert not torch.autograd.gradcheck(_Wrong.apply, (x[0].clone().requires_grad_(),), raise_exception=False)

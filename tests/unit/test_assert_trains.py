"""gv.assert_trains: silent on a healthy step, an AssertionError naming each problem otherwise (truth: the
parameters' own .grad and values, read with plain PyTorch)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import gradviz_nb as gv


def _model() -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)), torch.randn(16, 4), torch.randn(16, 1)


def test_healthy_step_is_silent_and_leaves_the_model_as_it_was() -> None:
    model, x, y = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]

    def step() -> None:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    dx = gv.assert_trains(step, model, opt)
    assert dx.ok and dx.moved == {n for n, _ in model.named_parameters()}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_detached_layer_is_listed() -> None:
    model, x, y = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        h = model[1](model[0](x)).detach()  # the first layer is cut off
        nn.functional.mse_loss(model[2](h), y).backward()
        opt.step()

    step()  # the truth, in plain PyTorch: the first layer gets no gradient
    assert model[0].weight.grad is None and model[2].weight.grad is not None
    with pytest.raises(AssertionError) as err:
        gv.assert_trains(step, model, opt)
    text = str(err.value)
    assert "[detached] 0.weight" in text and "0.bias" in text and "2.weight" not in text


def test_missing_zero_grad_and_a_parameter_outside_the_optimizer_are_listed() -> None:
    model, x, y = _model()
    opt = torch.optim.SGD([*model[0].parameters(), model[2].weight], lr=0.1)  # 2.bias left out

    def step() -> None:
        nn.functional.mse_loss(model(x), y).backward()  # no zero_grad: gradients pile up
        opt.step()

    with pytest.raises(AssertionError) as err:
        gv.assert_trains(step, model, opt)
    text = str(err.value)
    assert "[not-in-optimizer] 2.bias" in text and "[stale-grad]" in text


def test_an_update_below_the_dtype_resolution_is_a_parameter_that_never_moves() -> None:
    model, x, y = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-30)  # lr * grad is far below float32's spacing at |w|

    def step() -> None:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    w = model[0].weight.detach().clone()
    step()  # the truth: the step leaves the weights bit-identical
    assert torch.equal(w, model[0].weight) and model[0].weight.grad.abs().sum() > 0
    with pytest.raises(AssertionError) as err:
        gv.assert_trains(step, model, opt)
    assert "[not-moved] 0.weight" in str(err.value)


def test_a_nan_is_listed() -> None:
    model, x, y = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        out = model(x)
        (out.sqrt().mean() + nn.functional.mse_loss(out, y)).backward()  # sqrt of negatives: NaN
        opt.step()

    with pytest.raises(AssertionError) as err:
        gv.assert_trains(step, model, opt)
    assert "[nan-origin]" in str(err.value)

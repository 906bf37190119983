"""gradient_flow with the training loop's optimizer and GradScaler, checked against what PyTorch does."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import gradviz_nb as gv


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))


def _step(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    return before


def test_frozen_block_held_by_the_optimizer() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # built expecting everything to train
    for p in model[2].parameters():
        p.requires_grad_(False)  # the bug: a block frozen by mistake
    before = _step(model, opt)
    flow = gv.gradient_flow(model, optimizer=opt)
    opt.step()
    never_moved = {n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])}
    assert never_moved == {"2.weight", "2.bias"}  # PyTorch's truth
    assert {(f.kind, f.target) for f in flow.flags} == {("frozen", "2.weight"), ("frozen", "2.bias")}
    assert "requires_grad is False" in flow.flags[0].reason
    assert gv.gradient_flow(model).flags == []  # without the optimizer, freezing may be meant: no flag


def test_parameter_missing_from_the_optimizer_and_lr_zero() -> None:
    model = _model()
    opt = torch.optim.SGD([{"params": model[0].parameters(), "lr": 0.1},
                           {"params": model[2].parameters(), "lr": 0.0}], lr=0.1)  # model[4] forgotten
    before = _step(model, opt)
    flow = gv.gradient_flow(model, optimizer=opt)
    opt.step()
    never_moved = {n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])}
    flagged = {f.target for f in flow.flags if f.kind == "not-in-optimizer"}
    assert flagged == never_moved == {"2.weight", "2.bias", "4.weight", "4.bias"}
    reasons = {f.target: f.reason for f in flow.flags}
    assert "lr 0" in reasons["2.weight"] and "no param group" in reasons["4.weight"]


def test_grad_scaler_is_divided_out() -> None:
    model = _model()
    x = torch.randn(4, 8)
    model(x).sum().backward()
    truth = {n: p.grad.norm().item() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(x).sum()).backward()
    assert model[0].weight.grad is not None
    scaled = gv.gradient_flow(model)
    assert scaled.param("0.weight").norm == pytest.approx(65536 * truth["0.weight"], rel=1e-5)
    flow = gv.gradient_flow(model, scaler=scaler)
    assert flow.grad_scale == 65536.0
    assert all(flow.param(n).norm == pytest.approx(v, rel=1e-5) for n, v in truth.items())
    assert flow.flags == []
    scaler.unscale_(opt)  # now .grad is the true gradient: nothing left to divide
    flow = gv.gradient_flow(model, scaler=scaler)
    assert flow.grad_scale == 1.0
    assert all(flow.param(n).norm == pytest.approx(v, rel=1e-5) for n, v in truth.items())
    with pytest.raises(gv.GradvizError, match="GradScaler"):
        gv.gradient_flow(model, scaler=object())
    with pytest.raises(gv.GradvizError, match="Optimizer"):
        gv.gradient_flow(model, optimizer=object())  # type: ignore[arg-type]

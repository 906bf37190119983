"""gv.doctor leaves no trace: everything a step changes is put back, on success and when the step raises.

The findings themselves are checked against PyTorch in the bug zoo (gradviz_nb/bugzoo/cases_doctor.py).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.doctor.state import TrainingState, describe_differences


def _setup() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(32, 8)
    model[0].weight.grad = torch.full_like(model[0].weight, 0.5)  # a .grad the user already had
    model[4].eval()  # a mode the step will change
    return model, opt, x


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, fail_at: int | None = None):  # type: ignore[no-untyped-def]
    calls = {"n": 0}

    def step() -> None:
        calls["n"] += 1
        model.train()  # modes change
        model[4].bias.requires_grad_(False) if calls["n"] == 2 else None  # requires_grad changes
        opt.zero_grad()
        model(x).pow(2).mean().backward()  # dropout draws random numbers; batch norm updates buffers
        opt.step()  # parameters and Adam's state change
        torch.randn(3)  # the RNG moves
        if fail_at == calls["n"]:
            raise ValueError("the user's step failed")

    return step


def test_success_leaves_no_trace() -> None:
    model, opt, x = _setup()
    before = TrainingState.save(model, opt)
    rng = torch.get_rng_state()
    dx = gv.doctor(_step(model, opt, x), model, opt)
    assert dx.restored and dx.steps == 2
    assert describe_differences(before, TrainingState.save(model, opt)) == []
    assert torch.equal(rng, torch.get_rng_state())
    assert not opt.state  # Adam's momenta made by the doctor's steps are gone
    assert model[0].weight.grad is not None and torch.equal(model[0].weight.grad, torch.full_like(model[0].weight, 0.5))
    assert torch.autograd.backward.__module__ == "torch.autograd"  # the wrapper is gone


def test_a_raising_step_is_raised_again_and_leaves_no_trace() -> None:
    model, opt, x = _setup()
    before = TrainingState.save(model, opt)
    with pytest.raises(ValueError, match="the user's step failed"):
        gv.doctor(_step(model, opt, x, fail_at=2), model, opt)
    assert describe_differences(before, TrainingState.save(model, opt)) == []
    assert torch.autograd.backward.__module__ == "torch.autograd"


def test_the_check_itself_can_fail() -> None:
    """describe_differences is not blind: a real step shows up in it."""
    model, opt, x = _setup()
    before = TrainingState.save(model, opt)
    _step(model, opt, x)()
    changed = describe_differences(before, TrainingState.save(model, opt))
    assert {"parameter 0.weight", "buffer 1.running_mean", "torch RNG state", "optimizer state",
            "training mode of 4"} <= set(changed)


def test_restore_false_keeps_the_steps_effects() -> None:
    model, opt, x = _setup()
    before = TrainingState.save(model, opt)
    gv.doctor(_step(model, opt, x), model, opt, restore=False)
    assert "parameter 0.weight" in describe_differences(before, TrainingState.save(model, opt))


def test_clear_errors() -> None:
    model, opt, x = _setup()
    with pytest.raises(gv.GradvizError, match="step must be a function"):
        gv.doctor(model(x), model, opt)  # type: ignore[arg-type]
    with pytest.raises(gv.GradvizError, match="optimizer must be"):
        gv.doctor(_step(model, opt, x), model, object())  # type: ignore[arg-type]
    with pytest.raises(gv.GradvizError, match=r"nn\.Module"):
        gv.doctor(_step(model, opt, x), opt)  # type: ignore[arg-type]


def test_diagnosis_renders() -> None:
    model, opt, x = _setup()
    dx = gv.doctor(_step(model, opt, x), model, opt)
    assert dx.ok and "ok, nothing found" in dx.summary()
    assert dx.to_dict()["ok"] is True and "gradviz-diagnosis" in dx._repr_html_()
    assert dx.graph is not None and len(dx.graph) > 5

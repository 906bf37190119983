"""A step that freezes its own parameters, and cuts no table names (an in-place ``detach_()``, a numpy round
trip): found by what the steps did, explained by gv.why with the line, and proven against PyTorch's gradient of
the same model written without the bug."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import gradviz_nb as gv

X, Y = torch.randn(16, 4, generator=torch.Generator().manual_seed(1)), torch.randn(16, 2)


def _model(hook: Callable[..., Any] | None = None, where: str = "pre", at: int = 2) -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    if hook is not None and where == "pre":
        model[at].register_forward_pre_hook(hook)
    elif hook is not None:
        model[at].register_forward_hook(hook)
    return model


def _loss(model: nn.Module) -> torch.Tensor:
    return ((model(X) - Y) ** 2).mean()


def _step(model: nn.Module, opt: torch.optim.Optimizer) -> Callable[[], None]:
    def step() -> None:
        opt.zero_grad()
        _loss(model).backward()
        opt.step()
    return step


def _uncut(name: str) -> float:
    """PyTorch's gradient norm for ``name`` in the same model without the bug."""
    model = _model()
    _loss(model).backward()
    g = dict(model.named_parameters())[name].grad
    assert g is not None
    return float(g.double().norm())


def freeze_own(m: nn.Module, args: tuple[Any, ...]) -> None:
    for p in m.parameters():
        p.requires_grad_(False)


FREEZE_LINE = f"test_doctor_self_freeze.py:{inspect.getsourcelines(freeze_own)[1] + 2}"


def test_a_step_that_freezes_its_own_parameters_is_named_frozen_with_its_line_and_proven() -> None:
    model = _model(freeze_own)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dx = gv.doctor(_step(model, opt), model, opt)
    assert [(f.kind, f.target) for f in dx.findings] == [("frozen", "2")], dx.summary()
    assert FREEZE_LINE in dx.findings[0].message
    assert all(p.requires_grad for p in model.parameters())  # restored
    w = dx.why("2.weight")
    assert (w.status, w.kind) == ("none", "frozen") and FREEZE_LINE in w.cause
    proof = w.prove(fn=lambda: _loss(model), model=model)
    assert proof.proven and proof.before is None and proof.after is not None, proof.text()
    assert abs(proof.after - _uncut("2.weight")) < 1e-6 * proof.after  # the hook's refreeze was kept off
    assert all(p.requires_grad for p in model.parameters())  # prove() put requires_grad back too


def test_a_freeze_that_harms_nothing_is_no_finding() -> None:
    """A discriminator frozen for the generator's backward and stepped by its own optimizer afterwards (moves),
    and a backbone the optimizer does not hold (nothing meant to move it): the consequence is measured, not
    the switch."""
    torch.manual_seed(0)
    gen, disc = nn.Linear(4, 4), nn.Linear(4, 1)
    model = nn.ModuleDict({"gen": gen, "disc": disc})
    opt_g, opt_d = torch.optim.SGD(gen.parameters(), lr=0.1), torch.optim.SGD(disc.parameters(), lr=0.1)

    def gan_step() -> None:
        disc.requires_grad_(False)
        opt_g.zero_grad()
        (-disc(gen(X)).mean()).backward()
        opt_g.step()
        disc.requires_grad_(True)
        opt_d.zero_grad()
        (disc(gen(X).detach()).mean() - disc(X).mean()).backward()
        opt_d.step()

    assert not [f for f in gv.doctor(gan_step, model, opt_g).findings if f.kind == "frozen"]

    backbone = _model()
    head_opt = torch.optim.SGD(backbone[2].parameters(), lr=0.1)

    def fine_tune() -> None:
        backbone[0].requires_grad_(False)
        head_opt.zero_grad()
        _loss(backbone).backward()
        head_opt.step()

    assert gv.doctor(fine_tune, backbone, head_opt).ok


def detach_in_place(m: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
    return out.clone().detach_()


def numpy_round_trip(m: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(out.numpy(force=True))


def test_an_in_place_detach_is_a_cut_with_its_line_and_prove_gives_the_uncut_gradient() -> None:
    model = _model(detach_in_place, "post", 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dx = gv.doctor(_step(model, opt), model, opt)
    assert {(f.kind, f.target) for f in dx.findings} == {("detached", "0.weight"), ("detached", "0.bias")}
    w = dx.why("0.weight")
    line = f"test_doctor_self_freeze.py:{inspect.getsourcelines(detach_in_place)[1] + 1}"
    assert (w.status, w.kind) == ("none", "detached") and ".detach_()" in w.cause and line in w.cause, w.text()
    proof = w.prove(fn=lambda: _loss(model), model=model)
    assert proof.proven and proof.after is not None, proof.text()
    assert abs(proof.after - _uncut("0.weight")) < 1e-6 * proof.after


def test_prove_keeps_a_numpy_round_trip_a_tensor() -> None:
    model = _model(numpy_round_trip, "post", 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = gv.doctor(_step(model, opt), model, opt).why("0.weight")
    assert (w.status, w.kind) == ("none", "left-graph"), w.text()
    proof = w.prove(fn=lambda: _loss(model), model=model)
    assert proof.proven and proof.after is not None, proof.text()
    assert abs(proof.after - _uncut("0.weight")) < 1e-6 * proof.after

"""The doctor's step arithmetic (gradviz_nb/doctor/steps.py, checks_steps.py) and registration checks.

The zoo (gradviz_nb/bugzoo/cases_steps.py) proves one case per kind against PyTorch; these tests vary the
method's inputs (how many micro-batches, how the loss is scaled, who clears the gradients, which optimizer)
and check that every hook and patch is gone afterwards, also when the step raises.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import pytest
import torch
import torch.optim.optimizer as optimizer_globals
from torch import nn
from torch.optim.lr_scheduler import LRScheduler, StepLR

import gradviz_nb as gv


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


X = torch.randn(24, 8, generator=torch.Generator().manual_seed(1))
Y = torch.randn(24, 1, generator=torch.Generator().manual_seed(2))


def _loss(model: nn.Module, x: torch.Tensor = X, y: torch.Tensor = Y) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)


def _kinds(dx: gv.Diagnosis) -> set[str]:
    return {f.kind for f in dx.findings}


def _accumulate(model: nn.Module, opt: torch.optim.Optimizer, n: int, scale: Callable[[torch.Tensor], torch.Tensor]
                ) -> Callable[[], None]:
    def step() -> None:
        opt.zero_grad()
        for xb, yb in zip(X.chunk(n), Y.chunk(n), strict=True):
            scale(_loss(model, xb, yb)).backward()
        opt.step()

    return step


@pytest.mark.parametrize("n", [2, 3])
def test_undivided_accumulation_is_named_with_its_factor_and_divided_ones_are_not(n: int) -> None:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dx = gv.doctor(_accumulate(model, opt, n, lambda loss: loss), model, opt)
    [f] = dx.of_kind("unscaled-accumulation")
    assert f"{n}x the mean" in f.message and f"{n} backwards" in f.evidence
    assert f"{float(n):.2f}x the lr*|g|" in f.evidence  # SGD's update, measured, against lr * mean gradient
    for divided in (lambda loss: loss / n, lambda loss: loss * (1 / n), lambda loss: (loss / n) * torch.ones(())):
        assert gv.doctor(_accumulate(model, opt, n, divided), model, opt).ok
    half = gv.doctor(_accumulate(model, opt, 4, lambda loss: loss / 2), model, opt)  # divided, but by 2 of 4
    assert "scaled by 0.5 only" in half.of_kind("unscaled-accumulation")[0].evidence


def test_two_losses_from_one_forward_are_neither_double_nor_accumulation() -> None:
    torch.manual_seed(0)
    body, a, b = nn.Linear(8, 8), nn.Linear(8, 1), nn.Linear(8, 1)
    model = nn.ModuleDict({"body": body, "a": a, "b": b})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        h = body(X)
        nn.functional.mse_loss(a(h), Y).backward(retain_graph=True)
        nn.functional.mse_loss(b(h), Y).backward()
        opt.step()

    assert gv.doctor(step, model, opt).ok


def test_the_same_batch_twice_is_a_double_backward() -> None:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        for _ in range(2):
            _loss(model).backward()
        opt.step()

    [f] = gv.doctor(step, model, opt).of_kind("double-backward")
    assert "the same batch" in f.message and "2.00x" in f.message


@pytest.mark.parametrize("clear", ["model", "manual"])
def test_gradients_cleared_before_step_are_named_not_called_unused(clear: str) -> None:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        _loss(model).backward()
        if clear == "model":
            model.zero_grad()
        else:
            for p in model.parameters():
                p.grad = None
        opt.step()

    dx = gv.doctor(step, model, opt)
    assert _kinds(dx) == {"zero-grad-before-step"}
    [f] = dx.findings
    here = os.path.relpath(__file__)  # a file under the working directory reads relative to it
    assert (f"model.zero_grad() at {here}:" in f.message) == (clear == "model")


def test_two_adam_optimizers_are_compared_with_the_per_element_bound() -> None:
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    again = torch.optim.Adam(model[0].parameters(), lr=1e-2)

    def step() -> None:
        opt.zero_grad()
        again.zero_grad()
        _loss(model).backward()
        opt.step()
        again.step()

    [f] = gv.doctor(step, model).of_kind("two-optimizers")
    assert f.target == "0" and "opt (Adam)" in f.message and "again (Adam)" in f.message
    assert "2.00x the at most 0.01" in f.evidence


class _LocalWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = nn.Parameter(torch.ones(8, 1))  # made anew at every call
        return self.inner(x) @ w


def test_a_local_parameter_made_in_forward_is_recreated_but_another_models_is_not() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(_LocalWeight())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = lambda: (opt.zero_grad(), _loss(model).backward(), opt.step())  # noqa: E731
    [f] = gv.doctor(step, model, opt).of_kind("recreated-parameter")
    assert "different object" in f.evidence
    critic = nn.Linear(1, 1)  # another model's parameters enter the graph every step as the same objects
    gen = _mlp()
    gopt = torch.optim.SGD(gen.parameters(), lr=0.1)
    gstep = lambda: (gopt.zero_grad(), critic(gen(X)).mean().backward(), gopt.step())  # noqa: E731
    assert not gv.doctor(gstep, gen, gopt).of_kind("recreated-parameter")


class _Holders(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 1)
        self.scales = {"a": nn.Parameter(torch.ones(8))}  # a plain dict: not registered
        self.unused = [nn.Parameter(torch.ones(3))]  # not registered, but never used: no gradient
        self.decay = [self.fc.weight]  # a reference to a registered weight
        self.aux = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x * self.scales["a"])
        self.aux = out.pow(2).mean()  # a value with a grad_fn
        return out


def test_registration_names_what_received_a_gradient_and_no_optimizer_holds() -> None:
    torch.manual_seed(0)
    model = _Holders()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = lambda: (opt.zero_grad(), _loss(model).backward(), opt.step())  # noqa: E731
    [f] = gv.doctor(step, model, opt).of_kind("not-a-parameter")
    assert f.target == "scales" and "nn.ParameterDict" in f.fix and "backward gave it a gradient" in f.evidence
    assert model.scales["a"].grad is None  # the doctor's gradients on the unregistered weight were undone
    held = torch.optim.SGD([*model.parameters(), model.scales["a"]], lr=0.1)
    step2 = lambda: (held.zero_grad(), _loss(model).backward(), held.step())  # noqa: E731
    assert not gv.doctor(step2, model, held).of_kind("not-a-parameter")


def _hooks_and_patches() -> tuple[object, ...]:
    return (vars(torch.optim.Optimizer)["zero_grad"], vars(nn.Module)["zero_grad"],
            *(vars(c).get("step") for c in [LRScheduler, *LRScheduler.__subclasses__()]),
            dict(optimizer_globals._global_optimizer_pre_hooks), dict(optimizer_globals._global_optimizer_post_hooks),
            torch._C._len_torch_function_stack(), torch.autograd.backward)


@pytest.mark.parametrize("fail", [False, True])
def test_patches_and_optimizers_not_passed_in_are_put_back(fail: bool) -> None:
    model = _mlp()
    body = torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9)
    head = torch.optim.Adam(model[2].parameters(), lr=1e-2)
    sched = StepLR(head, step_size=1, gamma=0.5)
    before = _hooks_and_patches()
    states = (copy.deepcopy(head.state_dict()), copy.deepcopy(sched.state_dict()))

    def step() -> None:
        body.zero_grad()
        head.zero_grad()
        _loss(model).backward()
        body.step()
        head.step()
        sched.step()
        if fail:
            raise KeyError("the user's step failed")

    if fail:
        with pytest.raises(KeyError):
            gv.doctor(step, model, body)
    else:
        assert gv.doctor(step, model, body).ok
    after = _hooks_and_patches()
    assert all(a is b or a == b for a, b in zip(before, after, strict=True))
    assert not head.state and head.param_groups[0]["lr"] == 1e-2
    assert (head.state_dict(), sched.state_dict()) == states


@pytest.mark.parametrize("divide", [True, False])
def test_accumulation_under_a_grad_scaler_reads_the_division_through_the_scale(divide: bool) -> None:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def step() -> None:
        opt.zero_grad()
        for xb, yb in zip(X.chunk(3), Y.chunk(3), strict=True):
            loss = _loss(model, xb, yb)
            scaler.scale(loss / 3 if divide else loss).backward()
        scaler.step(opt)
        scaler.update()

    found = gv.doctor(step, model, opt).of_kind("unscaled-accumulation")
    assert bool(found) != divide
    if found:  # per-backward gradients in the loss's units (the scale taken out), like the one the step used
        each = [float(v) for v in found[0].evidence.split("|g| per backward ")[1].split(";")[0].split(", ")]
        used = float(found[0].evidence.split("their sum, |g| ")[1].split(" ")[0])
        assert max(each) < used * 3

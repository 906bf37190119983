# mypy: disable-error-code="no-untyped-call,union-attr,no-any-return,index,operator"
"""Bug-zoo cases for what ``optimizer.step()`` really used, and for gradients that exist but are wrong.

Each broken loop's truth is measured in PyTorch alone, on the same loop without the doctor: the gradient
at the moment the optimizer stepped (an optimizer step pre-hook) against the one backward left, whether the
parameters moved, ``torch.autograd.gradcheck`` on a custom Function, a parameter's values and version
counter around backward. Healthy twins (a warmup from lr 0, a GAN whose optimizers each zero their own
gradients, a gradient-reversal layer, clipping after unscaling) must give no finding.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo.case import Case, Outcome, flag_outcome

_X = torch.randn(16, 8, generator=torch.Generator().manual_seed(5))
_Y = torch.randn(16, 1, generator=torch.Generator().manual_seed(6))


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _loss(model: nn.Module, x: torch.Tensor = _X, y: torch.Tensor = _Y) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)


def _norm(model: nn.Module) -> float:
    return math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in model.parameters() if p.grad is not None))


def _at_step(make: Callable[[], tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]]) -> tuple[float, float]:
    """PyTorch's truth on a fresh build: (gradient norm one plain backward gives, gradient norm at step())."""
    model, opt, step = make()
    twin = copy.deepcopy(model)
    _loss(twin).backward()
    seen: list[float] = []
    hook = opt.register_step_pre_hook(lambda o, a, k: seen.append(_norm(model)))
    try:
        step()
    finally:
        hook.remove()
    return _norm(twin), seen[0] if seen else float("nan")


def _outcome(expected: set[tuple[str, str]], make: Callable[[], tuple[nn.Module, torch.optim.Optimizer,
                                                                       Callable[[], None]]],
             truth: bool) -> Outcome:
    model, opt, step = make()
    dx = gv.doctor(step, model, opt)
    out = flag_outcome(expected, {(f.kind, f.target) for f in dx.findings})
    return Outcome(out.expected, out.got, out.ok and truth, out.false_alarms)


def _sgd(clip: Callable[[nn.Module], object] | None = None, weight: float = 1.0
         ) -> Callable[[], tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]]:
    def make() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]:
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step() -> None:
            opt.zero_grad()
            (_loss(model) * weight).backward()
            if clip is not None:
                clip(model)
            opt.step()
        return model, opt, step
    return make


def clipped_away() -> Outcome:
    """clip_grad_norm_(max_norm=0.0): the step uses a zero gradient. Truth: norm at step() is 0."""
    make = _sgd(lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.0))
    plain, used = _at_step(make)
    return _outcome({("clipped-away", "(model)")}, make, plain > 0 and used == 0)


def grad_edited() -> Outcome:
    """A hand-written ``p.grad.mul_(1e-9)`` on the first layer's weight. Truth: its gradient at step() is 1e-9x."""
    make = _sgd(lambda m: m[0].weight.grad.mul_(1e-9))
    plain, used = _at_step(make)
    return _outcome({("grad-edited", "0")}, make, used < plain)


def _scaled(clip_first: bool, through_scaler: bool = True
            ) -> Callable[[], tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]]:
    def make() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]:
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)

        def step() -> None:
            opt.zero_grad()
            scaler.scale(_loss(model)).backward()
            if not through_scaler:
                opt.step()
                return
            if not clip_first:
                scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        return model, opt, step
    return make


def clip_before_unscale() -> Outcome:
    """Clipping at 1.0 while the gradients are still 65536x: the step uses about 1/65536 of a clipped gradient.
    Truth: the norm at step() is far below both the plain gradient and the threshold."""
    make = _scaled(clip_first=True)
    plain, used = _at_step(make)
    return _outcome({("clip-before-unscale", "(model)")}, make, used < min(plain, 1.0) * 1e-3)


def unscaled_step() -> Outcome:
    """``scaler.scale(loss).backward(); opt.step()``: the step uses the 65536x gradient. Truth: norm at step()."""
    make = _scaled(clip_first=False, through_scaler=False)
    plain, used = _at_step(make)
    return _outcome({("unscaled-step", "(model)")}, make, abs(used / plain - 2.0**16) < 1.0)


def loss_weight() -> Outcome:
    """The loss multiplied by a weight that is 0 at this step. Truth: every gradient at step() is zero."""
    make = _sgd(weight=0.0)
    plain, used = _at_step(make)
    return _outcome({("loss-weight", "(model)")}, make, plain > 0 and used == 0)


def _accumulating(zero_inside: bool) -> Callable[[], tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]]:
    def make() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]:
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step() -> None:
            opt.zero_grad()
            for x, y in zip(_X.chunk(4), _Y.chunk(4), strict=True):
                if zero_inside:
                    opt.zero_grad()
                (_loss(model, x, y) / 4).backward()
            opt.step()
        return model, opt, step
    return make


def zero_grad_in_accumulation() -> Outcome:
    """``zero_grad()`` inside the loop over 4 micro-batches. Truth: the gradient at step() is the last
    micro-batch's alone (a quarter of its gradient), not the mean over the four."""
    make = _accumulating(True)
    model, _, _ = make()
    last = copy.deepcopy(model)
    (_loss(last, _X.chunk(4)[-1], _Y.chunk(4)[-1]) / 4).backward()
    _, used = _at_step(make)
    return _outcome({("zero-grad-in-accumulation", "(model)")}, make, abs(used - _norm(last)) < 1e-6)


def lr_zero_in_step() -> Outcome:
    """The learning rate set to ``lr * (step // 1000)`` for ``step()`` and put back after. Truth: after two
    steps nothing moved, and the group reads lr 0.1."""
    def make() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]:
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        @contextlib.contextmanager
        def warm() -> Iterator[None]:
            for g in opt.param_groups:
                g["lr"] = 0.1 * (1 // 1000)
            yield
            for g in opt.param_groups:
                g["lr"] = 0.1

        def step() -> None:
            opt.zero_grad()
            _loss(model).backward()
            with warm():
                opt.step()
        return model, opt, step

    model, opt, step = make()
    before = [p.detach().clone() for p in model.parameters()]
    step()
    step()
    still = all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    return _outcome({("lr-zero", "(model)")}, make, still and opt.param_groups[0]["lr"] == 0.1)


class _Flipped(torch.autograd.Function):
    """An identity whose backward reverses the feature axis: wrong, and not a constant multiple."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g.flip(-1)


class _Reverse(torch.autograd.Function):
    """A gradient-reversal layer (DANN): backward is -0.5 times the true gradient, by design."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return -0.5 * g


def _with_function(fn: type[torch.autograd.Function]
                   ) -> Callable[[], tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]]:
    def make() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]:
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step() -> None:
            opt.zero_grad()
            h = fn.apply(model[0](_X))
            nn.functional.mse_loss(model[2](model[1](h)), _Y).backward()
            opt.step()
        return model, opt, step
    return make


def _gradcheck(fn: type[torch.autograd.Function]) -> bool:
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    return bool(torch.autograd.gradcheck(fn.apply, (x,), raise_exception=False))


def wrong_gradient() -> Outcome:
    """A custom Function whose backward flips the feature axis. Truth: torch.autograd.gradcheck fails."""
    return _outcome({("wrong-gradient", "0")}, _with_function(_Flipped), not _gradcheck(_Flipped))


def healthy_gradient_reversal() -> Outcome:
    """A gradient-reversal layer: gradcheck fails by design (-0.5 times the true gradient); no finding."""
    return _outcome(set(), _with_function(_Reverse), not _gradcheck(_Reverse))


def _halve_weight(m: nn.Module, args: object, out: object) -> None:
    m.weight.data.mul_(0.5)


def data_write() -> Outcome:
    """A forward hook halves the first layer's weight through ``.data`` after the layer ran. Truth: between
    forward and backward the weight's values changed while its version counter did not."""
    def make() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]:
        model = _mlp()
        model[0].register_forward_hook(_halve_weight)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step() -> None:
            opt.zero_grad()
            _loss(model).backward()
            opt.step()
        return model, opt, step

    model, _, _ = make()
    w = model[0].weight
    before, version = w.detach().clone(), w._version
    _loss(model)
    truth = not torch.equal(before, w.detach()) and w._version == version
    return _outcome({("data-write", "0.weight")}, make, truth)


def healthy_warmup_from_zero() -> Outcome:
    """A warmup whose first step uses lr 0 (LambdaLR from 0): the next step moves. Truth: step 1 moves nothing,
    step 2 moves every parameter."""
    def make() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]:
        model = _mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 10))

        def step() -> None:
            opt.zero_grad()
            _loss(model).backward()
            opt.step()
            sched.step()
        return model, opt, step

    model, _, step = make()
    start = [p.detach().clone() for p in model.parameters()]
    step()
    first = [p.detach().clone() for p in model.parameters()]
    step()
    truth = all(torch.equal(a, b) for a, b in zip(start, first, strict=True)) and not any(
        torch.equal(a, p) for a, p in zip(first, model.parameters(), strict=True))
    return _outcome(set(), make, truth)


def healthy_gan_own_zero_grad() -> Outcome:
    """A GAN step: D's optimizer zeroes D, G's zeroes G just before G's backward; G's .grad outlives a step
    (D's loss runs first) but is cleared before G's optimizer uses it. Truth: each step's G gradient equals
    one backward of G's loss."""
    def make() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]:
        torch.manual_seed(0)
        model = nn.ModuleDict({"G": nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8)),
                               "D": nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))})
        opt_g = torch.optim.Adam(model["G"].parameters(), lr=1e-3)
        opt_d = torch.optim.Adam(model["D"].parameters(), lr=1e-3)
        z, real = torch.randn(8, 4), torch.randn(8, 8)

        def step() -> None:
            fake = model["G"](z)
            opt_d.zero_grad()
            (model["D"](fake.detach()).mean() - model["D"](real).mean()).backward()
            opt_d.step()
            opt_g.zero_grad()
            (-model["D"](fake).mean()).backward()
            opt_g.step()
        return model, opt_g, step

    model, opt_g, step = make()
    step()
    seen: list[float] = []
    hook = opt_g.register_step_pre_hook(lambda o, a, k: seen.append(_norm(model["G"])))
    twin = copy.deepcopy(model)
    (-twin["D"](twin["G"](torch.randn(8, 4))).mean()).backward()
    step()
    hook.remove()
    return _outcome(set(), make, len(seen) == 1 and seen[0] > 0)


def healthy_clip_after_unscale() -> Outcome:
    """The torch.amp recipe: scale, backward, unscale_, clip at 1.0, scaler.step. Truth: the norm at step() is
    the plain gradient's, clipped to 1.0."""
    make = _scaled(clip_first=False)
    plain, used = _at_step(make)
    return _outcome(set(), make, abs(used - min(plain, 1.0)) < 1e-4 * max(plain, 1.0))


CASES: list[Case] = [
    Case("used-clipped-away", "clipped-away", clipped_away),
    Case("used-grad-edited", "grad-edited", grad_edited),
    Case("used-clip-before-unscale", "clip-before-unscale", clip_before_unscale),
    Case("used-unscaled-step", "unscaled-step", unscaled_step),
    Case("used-loss-weight", "loss-weight", loss_weight),
    Case("used-zero-grad-in-accumulation", "zero-grad-in-accumulation", zero_grad_in_accumulation),
    Case("used-lr-zero", "lr-zero", lr_zero_in_step),
    Case("used-wrong-gradient", "wrong-gradient", wrong_gradient),
    Case("used-data-write", "data-write", data_write),
    Case("used-healthy-warmup-from-zero", "healthy", healthy_warmup_from_zero),
    Case("used-healthy-gan-own-zero-grad", "healthy", healthy_gan_own_zero_grad),
    Case("used-healthy-gradient-reversal", "healthy", healthy_gradient_reversal),
    Case("used-healthy-clip-after-unscale", "healthy", healthy_clip_after_unscale),
]

"""A host turned into a runnable training setup, and the one step closure every mutant runs.

:class:`Plan` is what an operator edits: the model (in place), the parameter list the optimizer is built
from, a second optimizer's parameters, and the :class:`Recipe` of the step's arithmetic. :func:`build`
turns it into ``(model, optimizer, step)``; ``step`` is written the way a user writes a training step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from gradviz_nb.bugzoo.mutants.hosts import Host
from gradviz_nb.tracing import typed_torch

__all__ = ["Plan", "Recipe", "Setup", "Site", "build", "patch_forward", "probe_sites"]


@dataclass
class Recipe:
    """The step's arithmetic. ``micro``: micro-batches accumulated per step (each loss divided by
    ``micro`` when ``divide``); ``zero_grad``: where ``optimizer.zero_grad()`` sits; ``weight_decay``: an
    L2 term added to the loss; ``detach_pred``: the prediction is detached before the loss; ``zero_grad="each"``:
    inside the accumulation loop, before every micro-batch's backward; ``loss_weight``: the loss is multiplied
    by it; ``scaler``: a ``GradScaler`` scales the loss and steps (``unscale``: ``scaler.unscale_`` before
    ``between``; ``bypass_scaler``: ``optimizer.step()`` instead of ``scaler.step``); ``between``: edits run
    after the last backward and before ``step()`` (clipping, say);
    ``around_step``: a context manager around ``optimizer.step()`` (what the step sees of the learning rate)."""

    micro: int = 1
    divide: bool = True
    backward_twice: bool = False
    zero_grad: Literal["before", "between", "never", "each"] = "before"
    weight_decay: float = 0.0
    detach_pred: bool = False
    forward_context: Callable[[], contextlib.AbstractContextManager[object]] | None = None
    loss_weight: float | None = None
    scaler: bool = False
    unscale: bool = True
    bypass_scaler: bool = False
    between: list[Callable[[nn.Module], object]] = field(default_factory=list)
    around_step: Callable[[torch.optim.Optimizer], contextlib.AbstractContextManager[object]] | None = None


@dataclass
class Plan:
    host: Host
    params: list[nn.Parameter]
    second: list[nn.Parameter] = field(default_factory=list)
    recipe: Recipe = field(default_factory=Recipe)

    @property
    def model(self) -> nn.Module:
        return self.host.model


@dataclass
class Setup:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    step: Callable[[], None]
    second: torch.optim.Optimizer | None = None
    loss: Callable[[], Tensor] | None = None  # the step's loss on the whole batch, as a function (for prove())


def _chunks(batch: tuple[Tensor, Tensor], n: int) -> Iterator[tuple[Tensor, Tensor]]:
    return zip(batch[0].chunk(n), batch[1].chunk(n), strict=True)


def build(plan: Plan) -> Setup:
    """The model, its optimizer(s) and the training step the plan describes."""
    host, r = plan.host, plan.recipe
    model = host.model
    opt = host.make_optimizer(plan.params)
    second = torch.optim.SGD(plan.second, lr=0.01) if plan.second else None
    context = r.forward_context or contextlib.nullcontext
    scaler = torch.amp.GradScaler("cpu") if r.scaler else None
    around = r.around_step or (lambda _: contextlib.nullcontext())

    def forward_loss(x: Tensor, y: Tensor) -> Tensor:
        with context():
            pred = host.forward(model, x)
        if r.detach_pred:
            pred = pred.detach()
        loss = host.criterion(model, pred, y)
        if r.weight_decay:
            loss = loss + r.weight_decay * sum(p.pow(2).sum() for p in model.parameters() if p.requires_grad)
        return loss

    def step() -> None:
        if r.zero_grad == "before":
            opt.zero_grad()
        for x, y in _chunks(host.batch, r.micro):
            if r.zero_grad == "each":
                opt.zero_grad()
            loss = forward_loss(x, y)
            if r.divide and r.micro > 1:
                loss = loss / r.micro
            if r.loss_weight is not None:
                loss = loss * r.loss_weight
            if scaler is not None:
                loss = scaler.scale(loss)
            typed_torch.backward(loss, retain_graph=r.backward_twice)
            if r.backward_twice:
                typed_torch.backward(loss)
        if r.zero_grad == "between":
            opt.zero_grad()
        if scaler is not None and r.unscale:
            scaler.unscale_(opt)
        for edit in r.between:
            edit(model)
        with around(opt):
            if scaler is not None and not r.bypass_scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
        if second is not None:
            second.step()

    def whole_loss() -> Tensor:
        loss = forward_loss(*host.batch)
        return loss * r.loss_weight if r.loss_weight is not None else loss

    return Setup(model, opt, step, second, whole_loss)


def patch_forward(module: nn.Module, after: Callable[[Tensor], Tensor] | None = None,
                  around: Callable[[Callable[..., Tensor]], Callable[..., Tensor]] | None = None) -> None:
    """Edit one module's forward as a user would edit its source: ``after`` rewrites its output,
    ``around`` wraps the call (a ``torch.no_grad()`` region, a checkpoint)."""
    inner: Callable[..., Tensor] = module.forward
    call = around(inner) if around is not None else inner

    def forward(*args: object, **kwargs: object) -> Tensor:
        out = call(*args, **kwargs)
        return after(out) if after is not None else out

    module.forward = forward


@dataclass(frozen=True)
class Site:
    """One module call seen in the host's forward: its output is one floating tensor; ``input_grad``:
    its first input requires grad; ``same_shape``: output shape equals the first input's."""

    path: str
    input_grad: bool
    same_shape: bool
    owns_params: bool


def probe_sites(host: Host) -> list[Site]:
    """The modules an output-editing mutation can sit on, found by running the host's forward once."""
    seen: dict[str, Site] = {}
    handles = []

    def hook(path: str) -> Callable[[nn.Module, tuple[object, ...], object], None]:
        def record(module: nn.Module, args: tuple[object, ...], out: object) -> None:
            if path in seen or not isinstance(out, Tensor) or not out.is_floating_point():
                return
            first = args[0] if args and isinstance(args[0], Tensor) else None
            seen[path] = Site(path, bool(first is not None and first.requires_grad),
                              first is not None and first.shape == out.shape,
                              any(True for _ in module.parameters()))
        return record

    for path, module in host.model.named_modules():
        if path:
            handles.append(module.register_forward_hook(hook(path)))
    try:
        host.forward(host.model, host.batch[0])  # on a throwaway build: it may move BatchNorm statistics
    finally:
        for h in handles:
            h.remove()
    return list(seen.values())

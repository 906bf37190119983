"""Running the user's training step under observation, one step at a time.

The step is the user's own code, so the doctor cannot be told where the loss is. It watches instead:
``torch.autograd.backward`` (which ``loss.backward()`` calls) is wrapped while the step runs, so the
doctor sees each backward's root, traces its graph before the engine frees it, checks whether
``.grad`` was cleared since the previous step, and reads the gradients right after backward, before
the optimizer or a ``zero_grad()`` can change them; with the optimizer given, again just before its
``step()``, when the gradients are final (accumulated, unscaled by a GradScaler, clipped). Everything is
undone when the step returns or raises.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gradviz_nb.probes.flow import GradientFlow, gradient_flow
from gradviz_nb.probes.sharded import reshard_fsdp
from gradviz_nb.tracing import AutogradGraph, Capture, capture, trace

__all__ = ["StepRecord", "observe_step"]


@dataclass
class StepRecord:
    """What one observed step did."""

    index: int
    backwards: int = 0
    graph: AutogradGraph | None = None
    cap: Capture | None = None
    flow: GradientFlow | None = None
    loss: float | None = None
    training_at_backward: bool | None = None
    training_at_forward: bool | None = None
    stale: dict[str, int] = field(default_factory=dict)  # parameter -> version its .grad still had
    moved: set[str] = field(default_factory=set)  # parameters whose value changed during the step
    error: BaseException | None = None
    grads_after: dict[str, tuple[weakref.ref[torch.Tensor], int]] = field(default_factory=dict)


def _grad_marks(named: dict[str, nn.Parameter]) -> dict[str, tuple[weakref.ref[torch.Tensor], int]]:
    return {n: (weakref.ref(p.grad), p.grad._version) for n, p in named.items() if p.grad is not None}


@contextmanager
def _watch_backward(on_backward: Callable[[Any, Callable[[], None]], None]) -> Iterator[None]:
    original = torch.autograd.backward

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        result: list[Any] = []
        on_backward(tensors, lambda: result.append(original(tensors, *args, **kwargs)))
        return result[0] if result else None

    torch.autograd.backward = backward
    try:
        yield
    finally:
        torch.autograd.backward = original


def observe_step(step: Callable[[], Any], model: nn.Module, optimizer: torch.optim.Optimizer | None, index: int,
                 previous: StepRecord | None) -> StepRecord:
    """Run ``step()`` once, watching every backward it makes; exceptions are kept in ``.error``."""
    named = dict(model.named_parameters())
    rec = StepRecord(index)
    before = {n: p.detach().clone() for n, p in named.items()}

    def on_backward(tensors: Any, run: Callable[[], None]) -> None:
        assert rec.cap is not None
        with rec.cap.paused():
            _before_backward(tensors)
        run()
        with rec.cap.paused():
            rec.grads_after = _grad_marks(named)
            rec.flow = gradient_flow(model, graph=rec.graph, capture=rec.cap, optimizer=optimizer)

    def _before_backward(tensors: Any) -> None:
        rec.backwards += 1
        first = rec.backwards == 1
        if first:
            rec.training_at_backward = model.training
            root = tensors if isinstance(tensors, torch.Tensor) else next(iter(tensors), None)
            if isinstance(root, torch.Tensor) and root.grad_fn is not None:
                rec.loss = float(root.detach().float().sum()) if root.numel() else None
                rec.graph = trace(root, model=model, capture=rec.cap)
            marks = previous.grads_after if previous is not None else {}
            for n, (ref, version) in marks.items():
                g = named[n].grad
                if g is not None and ref() is g and g._version == version:
                    rec.stale[n] = version

    def before_optimizer_step(*_: Any) -> None:
        # The gradients as the optimizer will use them: accumulated, unscaled by a GradScaler, clipped.
        if rec.backwards and rec.cap is not None:
            with rec.cap.paused():
                rec.flow = gradient_flow(model, graph=rec.graph, capture=rec.cap, optimizer=optimizer)

    hook = optimizer.register_step_pre_hook(before_optimizer_step) if optimizer is not None else None
    rec.training_at_forward = model.training
    with capture(model) as cap:
        rec.cap = cap
        with _watch_backward(on_backward):
            try:
                step()
            except Exception as err:  # the doctor reports it; the state is restored by the caller
                rec.error = err
            finally:
                if hook is not None:
                    hook.remove()
    if reshard_fsdp(model):  # a step without backward under FSDP2 ends unsharded: compare shards with shards
        named = dict(model.named_parameters())
    rec.moved = {n for n, p in named.items() if not torch.equal(p.detach(), before[n])}
    return rec

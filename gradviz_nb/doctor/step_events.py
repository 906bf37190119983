"""What one run of a training step did, as records: each backward, ``zero_grad()``, optimizer and scheduler
step (:class:`StepEvents`), and the user's line of each. :class:`~gradviz_nb.doctor.steps.StepWatch` fills
them; the checks read them."""

from __future__ import annotations

import os
import sys
import weakref
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch

from gradviz_nb.doctor.grad_edits import GradEdit
from gradviz_nb.doctor.values_watch import DataWrite, FunctionCall
from gradviz_nb.tracing.places import source_line

__all__ = ["Backward", "Foreign", "OptimizerStep", "SchedulerStep", "StepEvents", "ZeroGrad", "caller_line",
           "used_grads"]

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gradviz_nb/
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


def caller_line() -> str:
    """``file.py:LINE`` of the innermost frame outside torch and gradviz_nb (the user's code)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        inside_lib = path.startswith(_HERE) and "bugzoo" not in path
        if not inside_lib and not path.startswith(_TORCH) and not path.startswith("<"):
            return source_line(path, frame.f_lineno)
        frame = frame.f_back
    return ""


@dataclass
class Backward:
    """One backward call: ``loss`` value, ``scale`` (product of the numbers the loss was multiplied or divided
    by before backward, 1.0 when none was seen) with the lines that did it, ``forward`` (how many model forwards
    had run in the step when it started), ``batch`` (that forward's input fingerprint), ``repeat_of`` (index
    of an earlier backward of this step on the very same loss tensor), ``contrib`` (name -> L2 norm of the
    ``.grad`` delta it added, divided by ``amp``: a GradScaler's scale the loss was multiplied by)."""

    order: int
    index: int
    loss: float | None
    scale: float = 1.0
    scale_lines: tuple[str, ...] = ()
    forward: int = 0
    batch: tuple[Any, ...] | None = None
    repeat_of: int | None = None
    contrib: dict[str, float] = field(default_factory=dict)
    amp: float = 1.0  # a GradScaler's scale on the loss, taken out of ``contrib``
    cleared: frozenset[str] = frozenset()  # fed by an earlier backward not yet stepped, None or zero again here
    frozen: frozenset[str] = frozenset()  # tensors with requires_grad=False when it started
    line: str = ""  # the user's line that called it


@dataclass
class ZeroGrad:
    """One ``zero_grad()`` call: ``who`` (``"SGD.zero_grad()"``, ``"model.zero_grad()"``) at ``line``."""

    order: int
    who: str
    line: str


@dataclass
class OptimizerStep:
    """One ``optimizer.step()``: per tensor it held with a gradient, the gradient norm it used, the value
    change it made (norm and largest element), the learning rate, and ``rule``: for SGD without a momentum
    history the update norm its rule gives (``lr * |g + wd * p|``), for Adam-family optimizers on their first
    step the per-element bound (``lr``, plus AdamW's decay); NaN when the rule gives no such number.
    ``zeroed``: tensors a backward of this step fed whose ``.grad`` was None or zero here (name -> how).
    ``lr_all``: the learning rate this step used for every tensor its groups hold, as it was at the step;
    ``line``: the user's line that called ``step()``."""

    order: int
    label: str
    kind: str
    key: int
    lr: dict[str, float] = field(default_factory=dict)
    grad: dict[str, float] = field(default_factory=dict)
    update: dict[str, float] = field(default_factory=dict)
    update_max: dict[str, float] = field(default_factory=dict)
    rule: dict[str, float] = field(default_factory=dict)
    rule_is_bound: bool = False
    zeroed: dict[str, str] = field(default_factory=dict)
    lr_all: dict[str, float] = field(default_factory=dict)
    line: str = ""  # the user's line that called step()


def used_grads(events: list[StepEvents]) -> dict[str, float | None]:
    """The gradient norm each tensor's first optimizer step used, over the observed steps in order: None when its
    ``.grad`` was None then, 0.0 when it was all zeros (a backward fed it, and something cleared it before the
    step); tensors the step held without a gradient from any backward are left out (nothing was measured)."""
    out: dict[str, float | None] = {}
    for ev in events:
        for s in ev.optimizer_steps:
            for n in s.lr_all:
                if n in out:
                    continue
                if n in s.grad:
                    out[n] = s.grad[n]
                elif n in s.zeroed:
                    out[n] = None if s.zeroed[n] == "None" else 0.0
    return out


@dataclass
class SchedulerStep:
    """One learning-rate scheduler ``step()`` seen during a training step: its order among the step's events, the
    scheduler's label and the learning rates before and after."""
    order: int
    label: str
    lr_before: list[float]
    lr_after: list[float]


@dataclass
class Foreign:
    """An ``nn.Parameter`` leaf of a backward's graph that the model does not hold: its shape, the module call
    that used it, the object (weakly) and its gradient norm after the step."""

    shape: tuple[int, ...]
    call: str
    ref: weakref.ref[torch.Tensor]
    grad: float = 0.0


@dataclass
class StepEvents:
    """Everything :class:`StepWatch` saw in one step (see the module docstring)."""

    backwards: list[Backward] = field(default_factory=list)
    zeros: list[ZeroGrad] = field(default_factory=list)
    optimizer_steps: list[OptimizerStep] = field(default_factory=list)
    scheduler_steps: list[SchedulerStep] = field(default_factory=list)
    forwards: int = 0
    recreated: dict[str, int] = field(default_factory=dict)  # parameter name -> id of the object it started as
    recreated_held: dict[str, bool] = field(default_factory=dict)  # ... and whether an optimizer holds the new one
    foreign: list[Foreign] = field(default_factory=list)  # nn.Parameter leaves of the graph the model does not hold
    optimizers: dict[int, torch.optim.Optimizer] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)  # optimizer id -> label
    edits: list[GradEdit] = field(default_factory=list)  # in-place writes into gradients after a backward
    writes: list[DataWrite] = field(default_factory=list)  # parameters written through .data during a forward
    calls: dict[type, FunctionCall] = field(default_factory=dict)  # custom autograd.Function classes called
    switched_off: dict[str, str] = field(default_factory=dict)  # parameter -> the line that set requires_grad False

"""What happened to the gradients between backward and ``optimizer.step()``, measured as it happened.

After each backward, every ``.grad`` tensor is *tracked*. The step's ``TorchFunctionMode``
(:class:`~gradviz_nb.doctor.steps.StepWatch`'s) hands every in-place op to :meth:`GradEdits.before` /
:meth:`GradEdits.after`: when the op writes into tracked gradients (``clip_grad_norm_``'s ``_foreach_mul_``,
``clip_grad_value_``'s clamps, a GradScaler's unscale, ``zero_()``, a hand-written ``p.grad.mul_(k)``), its
:class:`GradEdit` records the factor (norm after over norm before, in float64, over the tensors it wrote),
the public function the user called (its qualified name, for wording only) and the user's line. Whether
anything changed is decided by the measured factor, never by the op's name.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from gradviz_nb.tracing.places import source_line

__all__ = ["GradEdit", "GradEdits", "caller_api", "clip_arguments"]

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gradviz_nb/
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


def caller_api() -> tuple[str, str]:
    """``(file.py:LINE, api)``: the user's line, and the qualified name of the outermost public torch function
    it called on the way here (``clip_grad_norm_``, ``GradScaler.unscale_``); ``""`` when the user's code
    made the op itself."""
    frame: FrameType | None = sys._getframe(1)
    api = ""
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        ours = path.startswith(_HERE) and "bugzoo" not in path
        if path.startswith(_TORCH) or path.startswith("<"):
            name = frame.f_code.co_qualname
            if not name.split(".")[-1].startswith("_") and "<locals>" not in name:
                api = name
        elif not ours:
            return source_line(path, frame.f_lineno), api
        frame = frame.f_back
    return "", api


def clip_arguments() -> tuple[float, float] | None:
    """``(max_norm, total_norm)`` of the torch clipping call on the stack (``clip_grads_with_norm_``, which
    ``clip_grad_norm_`` calls with the total norm it computed): the threshold and the norm the clip divided by,
    read from its frame (a ``DTensor`` total norm as its full value). None when no such call is running."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("clip_grads_with_norm_", "_clip_grads_with_norm_") and code.co_filename.startswith(_TORCH):
            max_norm, total = frame.f_locals.get("max_norm"), frame.f_locals.get("total_norm")
            full = getattr(total, "full_tensor", None)
            total = full() if callable(full) else total
            try:
                return float(max_norm), float(total)  # type: ignore[arg-type]
            except (TypeError, ValueError, RuntimeError):
                return None
        frame = frame.f_back
    return None


@dataclass
class GradEdit:
    """One in-place write into gradients between a backward and a step: ``op`` (the torch op), ``api`` (the
    function the user called, or ``""``), ``line``, the tensors' ``names`` and ``factor`` (their norm after
    over before; 1.0 when both are zero)."""

    order: int
    op: str
    api: str
    line: str
    names: frozenset[str]
    before: float
    after: float
    clip: tuple[float, float] | None = None  # (max_norm, the total norm it divided by) of a torch clipping call

    @property
    def factor(self) -> float:
        """Norm after over norm before (1.0 when both are zero)."""
        return self.after / self.before if self.before > 0 else (1.0 if self.after == 0 else float("inf"))

    @property
    def who(self) -> str:
        """What made the write and where, for a finding's text."""
        return f"{self.api or self.op}{f' at {self.line}' if self.line else ''}"


def _inplace(func: Any) -> bool:
    name = getattr(func, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


def _total(ts: list[torch.Tensor]) -> float:
    parts = []
    for t in ts:
        to_local = getattr(t, "to_local", None)
        t = to_local() if callable(to_local) else t
        if t.is_sparse or not (t.is_floating_point() or t.is_complex()):
            continue
        parts.append(t.detach())
    if not parts:
        return 0.0
    with torch.no_grad():
        norms = torch._foreach_norm(parts, 2, dtype=torch.float64)
        return float(torch.stack(list(norms)).norm())


class GradEdits:
    """The tracked gradients (id -> name) and every :class:`GradEdit` made to them."""

    def __init__(self) -> None:
        self.tracked: dict[int, str] = {}
        self.log: list[GradEdit] = []

    def track(self, grads: dict[str, torch.Tensor]) -> None:
        """Follow these gradient tensors (by name) from now on."""
        self.tracked = {id(g): n for n, g in grads.items()}

    def hit(self, func: Any, args: Any) -> list[torch.Tensor] | None:
        """The tracked gradients an in-place op is about to write (its first argument), else None."""
        if not self.tracked or not args or not _inplace(func):
            return None
        a = args[0]
        if isinstance(a, torch.Tensor):
            return [a] if id(a) in self.tracked else None
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            return [t for t in a if id(t) in self.tracked] or None
        return None

    def record(self, order: int, func: Any, ts: list[torch.Tensor], before: float) -> None:
        """After an in-place op on tracked gradients: keep it when their norm changed."""
        after = _total(ts)
        if after == before:
            return
        line, api = caller_api()
        op = getattr(func, "__name__", str(func))
        self.log.append(GradEdit(order, op, api, line, frozenset(self.tracked[id(t)] for t in ts), before, after,
                                 clip_arguments()))

    @staticmethod
    def norm(ts: list[torch.Tensor]) -> float:
        """The float64 norm of these tensors together."""
        return _total(ts)

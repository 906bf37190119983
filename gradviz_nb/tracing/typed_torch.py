"""Typed doors to the few torch calls this torch's stubs leave untyped (``Tensor.backward``,
``Tensor.register_hook``): the one mypy exception each needs lives here, not at every call.

They are the same calls, made at call time (a tool that wraps ``Tensor.backward``, such as the doctor's step
observer, still sees them).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.hooks import RemovableHandle

__all__ = ["backward", "register_hook"]


def backward(loss: torch.Tensor, grad: torch.Tensor | None = None, retain_graph: bool | None = None) -> None:
    """``loss.backward(grad, retain_graph=retain_graph)``."""
    loss.backward(grad, retain_graph=retain_graph)  # type: ignore[no-untyped-call]


def register_hook(t: torch.Tensor, hook: Callable[[torch.Tensor], torch.Tensor | None]) -> RemovableHandle:
    """``t.register_hook(hook)``: the handle that removes it."""
    handle: RemovableHandle = t.register_hook(hook)  # type: ignore[no-untyped-call]
    return handle

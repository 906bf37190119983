"""Engine calls made inside a running backward: a reentrant checkpoint's inner backward, an
``autograd.grad`` or ``backward`` in a custom Function's backward or in a hook.

Such a call starts a new graph task over nodes the outer graph does not hold (a reentrant checkpoint
recomputes its block in backward and runs ``torch.autograd.backward`` over the new nodes inside
``CheckpointFunction.backward``): hooks on the outer nodes never see those steps. While :class:`Nested` is
active, ``torch.autograd.backward`` and ``torch.autograd.grad`` are wrapped, and a call made on the
recording thread *inside a backward* (``torch._C._current_graph_task_id() != -1``) first hands its roots to
``on_nested``, which hooks the new nodes; the hooks come off when that call returns. Calls from other
threads, and calls outside a backward, go straight to PyTorch's functions: the wrapper changes nothing for
them. The originals are put back on exit (unless someone replaced the wrapper meanwhile: then theirs stays).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["Nested", "roots_of"]


def roots_of(x: Any) -> list[torch.Tensor]:
    """The tensors of a ``backward`` / ``grad`` first argument that have a ``grad_fn``."""
    items: Sequence[Any] = (x,) if isinstance(x, torch.Tensor) else x if isinstance(x, (list, tuple)) else ()
    return [t for t in items if isinstance(t, torch.Tensor) and t.grad_fn is not None]


class Nested:
    """Follow engine calls made inside a backward on this thread (see the module docstring).

    ``on_nested(roots, node)`` gets the nested call's root tensors and the outer node running it
    (``torch._C._current_autograd_node()``), and returns what undoes its hooks."""

    def __init__(self, on_nested: Callable[[list[torch.Tensor], Any], Callable[[], None]]) -> None:
        self.on_nested = on_nested
        self.owner = threading.get_ident()
        self._saved: tuple[Any, Any] | None = None
        self._wrappers: tuple[Any, Any] | None = None

    def _follow(self, original: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self.owner or torch._C._current_graph_task_id() == -1:
                return original(*args, **kwargs)
            first = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
            roots = roots_of(first)
            undo = None
            if roots:
                try:
                    undo = self.on_nested(roots, torch._C._current_autograd_node())
                except Exception:  # never break the user's backward: that call is only not followed
                    undo = None
            try:
                return original(*args, **kwargs)
            finally:
                if undo is not None:
                    undo()
        vars(wrapped)["__wrapped__"] = original  # what inspect.unwrap follows
        wrapped.__doc__ = original.__doc__
        return wrapped

    def __enter__(self) -> Nested:
        backward, grad = torch.autograd.backward, torch.autograd.grad
        self._saved = (backward, grad)
        self._wrappers = (self._follow(backward), self._follow(grad))
        torch.autograd.backward, torch.autograd.grad = self._wrappers
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._saved is not None and self._wrappers is not None
        if torch.autograd.backward is self._wrappers[0]:
            torch.autograd.backward = self._saved[0]
        if torch.autograd.grad is self._wrappers[1]:
            torch.autograd.grad = self._saved[1]

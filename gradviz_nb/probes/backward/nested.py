"""Engine calls made inside a running backward: a reentrant checkpoint's inner backward, an
``autograd.grad`` or ``backward`` in a custom Function's backward or in a hook.

Such a call starts a new graph task over nodes the outer graph does not hold (a reentrant checkpoint
recomputes its block in backward and runs ``torch.autograd.backward`` over the new nodes inside
``CheckpointFunction.backward``): hooks on the outer nodes never see those steps. While :class:`Nested` is
active, ``torch.autograd.backward`` and ``torch.autograd.grad`` are wrapped, and a call made on the
recording thread *inside a backward* (``torch._C._current_graph_task_id() != -1``) first hands its roots to
``on_nested``, which hooks the new nodes; the hooks come off when that call returns. Calls from other
threads, and calls outside a backward, go straight to PyTorch's functions (``probes.owned.for_this_thread``):
the wrapper changes nothing for them, and the functions end as they began.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import torch

from gradviz_nb.probes.owned import for_this_thread

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
        self._stack = ExitStack()

    def _follow(self) -> Callable[..., Any]:
        def replacement(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            if torch._C._current_graph_task_id() == -1:
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
        return replacement

    def __enter__(self) -> Nested:
        # for the recording thread only (probes/owned.py): other threads' calls never reach the replacement, and
        # the functions end as they began whatever order threads enter and leave in
        self._stack = ExitStack()
        self._stack.enter_context(for_this_thread(torch.autograd, "backward", self._follow()))
        self._stack.enter_context(for_this_thread(torch.autograd, "grad", self._follow()))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

"""Wrong-but-nonzero gradients, watched for during the step: parameters written through ``.data`` while a
forward's graph holds them, and the calls of custom ``autograd.Function`` classes (checked after the step).

:class:`ValueWatch` is fed by the step's ``TorchFunctionMode`` (:mod:`gradviz_nb.doctor.steps`): a
parameter's ``.data`` read remembers the alias; an in-place op on that alias, or a ``p.data = ...``, between
the model's forward and the backward that uses it, is a :class:`DataWrite` when the values really changed
(compared with a copy taken just before the op); the version counter the graph checks never moved. While
the step runs, ``Function.apply`` is wrapped to keep the first call of each user-defined Function class:
its inputs as small float64 copies and the user's line (:class:`FunctionCall`).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from gradviz_nb.doctor.grad_edits import caller_api
from gradviz_nb.probes.owned import for_this_thread

__all__ = ["DataWrite", "FunctionCall", "ValueWatch"]

_DATA = vars(torch._C.TensorBase)["data"]
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_LIB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_INPUT = 4096  # elements per input kept for the check (rows beyond it are sliced off)


@dataclass
class DataWrite:
    """``name`` was written by ``op`` at ``line`` during a forward; ``change``: the largest change of an element."""

    name: str
    op: str
    line: str
    change: float


@dataclass
class FunctionCall:
    """The first call of a custom ``autograd.Function`` class in the step: its inputs (float64 copies of the
    tensors, sliced to a few rows), which need grad, the user's line, and the output's sequence number."""

    cls: type
    inputs: tuple[Any, ...]
    line: str
    seq: int | None = None


def _small(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.numel() > MAX_INPUT and t.dim() > 0:
        t = t[: max(1, MAX_INPUT // max(1, t[0].numel()))]
    return t.to(torch.float64) if t.is_floating_point() else t.clone()


def _user_defined(cls: type) -> bool:
    path = os.path.abspath(getattr(__import__("sys").modules.get(cls.__module__), "__file__", "") or "")
    return not path.startswith(_TORCH) and (not path.startswith(_LIB) or "bugzoo" in path)


@dataclass
class ValueWatch:
    """The parameters by id, whether a forward is running, the ``.data`` aliases it handed out, and what was
    seen: :class:`DataWrite` records and the first :class:`FunctionCall` of each Function class."""

    params: dict[int, str] = field(default_factory=dict)
    in_forward: bool = False
    aliases: dict[int, tuple[weakref.ref[torch.Tensor], str]] = field(default_factory=dict)
    writes: list[DataWrite] = field(default_factory=list)
    calls: dict[type, FunctionCall] = field(default_factory=dict)

    def before(self, func: Any, args: Any) -> tuple[str, torch.Tensor] | None:
        """Called before every op: the parameter and a copy of its values when the op writes through an alias."""
        if not self.in_forward or not args or not isinstance(args[0], torch.Tensor):
            return None
        owner = getattr(func, "__self__", None)
        if owner is _DATA:
            if getattr(func, "__name__", "") == "__set__" and id(args[0]) in self.params:
                return self.params[id(args[0])], args[0].detach().clone()
            return None
        hit = self.aliases.get(id(args[0]))
        name = getattr(func, "__name__", "")
        if hit is None or hit[0]() is not args[0] or not name.endswith("_") or name.endswith("__"):
            return None
        return hit[1], args[0].detach().clone()

    def after(self, func: Any, args: Any, out: Any, before: tuple[str, torch.Tensor] | None) -> None:
        """Called after every op: a write that changed values is kept; a parameter's ``.data`` read is followed."""
        if before is not None:
            name, old = before
            now = args[0].detach()
            if now.shape != old.shape or not torch.equal(now, old):
                change = float((now - old).abs().max()) if now.shape == old.shape else float("inf")
                line, _ = caller_api()
                op = "p.data = ..." if getattr(func, "__self__", None) is _DATA else f".data.{func.__name__}"
                self.writes.append(DataWrite(name, op, line, change))
            return
        if getattr(func, "__self__", None) is _DATA and getattr(func, "__name__", "") == "__get__" \
                and args and id(args[0]) in self.params and isinstance(out, torch.Tensor):
            self.aliases[id(out)] = (weakref.ref(out), self.params[id(args[0])])

    @contextmanager
    def functions(self) -> Iterator[None]:
        """``Function.apply`` wrapped for the block, in this thread only (:func:`for_this_thread`: other threads'
        Functions run untouched): the first call of each user-defined class is kept."""
        watch = self

        def apply(original: Callable[..., Any], cls: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(cls, *args, **kwargs)
            if cls not in watch.calls and torch.is_grad_enabled() and _user_defined(cls):
                first = out[0] if isinstance(out, (tuple, list)) and out else out
                fn = getattr(first, "grad_fn", None)
                seq = fn._sequence_nr() if fn is not None else None
                line, _ = caller_api()
                inputs = tuple((_small(a), a.requires_grad) if isinstance(a, torch.Tensor) else (a, False)
                               for a in args)
                watch.calls[cls] = FunctionCall(cls, inputs, line, seq)
            return out

        with for_this_thread(torch.autograd.Function, "apply", apply):
            yield

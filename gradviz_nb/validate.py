"""Argument checks at the public boundary: each helper returns the value (normalised) or raises
:class:`GradvizError` naming the parameter, what was given and what is accepted.

Every public function and constructor checks its arguments with these at its top, before anything runs, so a
nonsense value (``every=nan``, ``height=-5``, ``lazy="yes"``, a non-tensor in ``names=``) is refused at once
instead of being silently accepted or failing deep inside with a ``TypeError``. Example::

    every = positive_int("every", every)              # GradvizError: every must be a whole number >= 1; got nan
    lr = finite_number("lr", lr, lo=0, lo_open=True)
    mode = choice("stat", stat, ("norm", "max_abs"))
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from gradviz_nb.errors import GradvizError

__all__ = [
    "boolean", "choice", "finite_number", "function", "given", "instance", "model_or_none", "module",
    "not_meta", "optional_bool", "positive_int", "tensor_mapping", "text", "text_list",
]

T = TypeVar("T")


def given(value: object) -> str:
    """How a refused value is shown in a message: its short repr and type (``nan (float)``)."""
    try:
        text = repr(value)
    except Exception:  # a repr that raises is no reason to hide the real problem
        text = f"<{type(value).__name__}>"
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _fail(name: str, want: str, value: object, hint: str = "") -> GradvizError:
    return GradvizError(f"{name} must be {want}; got {given(value)}." + (f" {hint}" if hint else ""))


def _range(lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False) -> str:
    parts = ([f"{'>' if lo_open else '>='} {_number(lo)}"] if lo is not None else []) + (
        [f"{'<' if hi_open else '<='} {_number(hi)}"] if hi is not None else [])
    return " and ".join(parts)


def _number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def positive_int(name: str, value: object, *, lo: int = 1, hi: int | None = None, hint: str = "") -> int:
    """A whole number (``int``, or a float with no fraction) in ``[lo, hi]``; never a bool, NaN or string."""
    want = "a whole number " + _range(lo, hi)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(name, want, value, hint)
    if isinstance(value, numbers.Integral):
        number = int(value)
    else:
        as_float = float(value)
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise _fail(name, want, value, hint)
        number = int(as_float)
    if number < lo or (hi is not None and number > hi):
        raise _fail(name, want, value, hint)
    return number


def finite_number(name: str, value: object, *, lo: float | None = None, hi: float | None = None,
                  lo_open: bool = False, hi_open: bool = False, hint: str = "") -> float:
    """A finite real number (int, float, numpy scalar; not a bool, string or tensor) within the bounds given."""
    bounds = _range(lo, hi, lo_open, hi_open)
    want = "a finite number" + (f" {bounds}" if bounds else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(name, want, value, hint)
    else:
        try:
            number = float(value)
        except (OverflowError, ValueError):
            raise _fail(name, want, value, hint) from None
    if not math.isfinite(number):
        raise _fail(name, want, value, hint)
    if lo is not None and (number < lo or (lo_open and number == lo)):
        raise _fail(name, want, value, hint)
    if hi is not None and (number > hi or (hi_open and number == hi)):
        raise _fail(name, want, value, hint)
    return number


def boolean(name: str, value: object) -> bool:
    """``True`` or ``False`` (not ``"yes"``, not 1)."""
    if not isinstance(value, bool):
        raise _fail(name, "True or False", value)
    return value


def optional_bool(name: str, value: object) -> bool | None:
    """``True``, ``False`` or ``None`` (None: decide automatically)."""
    if value is not None and not isinstance(value, bool):
        raise _fail(name, "True, False or None (decide automatically)", value)
    return value


def choice(name: str, value: T, options: Sequence[T]) -> T:
    """One of ``options`` (compared with ``==``; unhashable values are simply refused)."""
    if not any(type(value) is type(o) and value == o for o in options):
        raise _fail(name, "one of " + ", ".join(repr(o) for o in options), value)
    return value


def instance(name: str, value: object, types: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is an instance of ``types`` (``what`` says it in words: "an AutogradGraph")."""
    if not isinstance(value, types):
        raise _fail(name, what, value)
    return value


def module(name: str, value: object) -> nn.Module:
    """An ``nn.Module``."""
    if not isinstance(value, nn.Module):
        hint = ("Pass the nn.Module it trains." if isinstance(value, torch.optim.Optimizer) else "")
        raise _fail(name, "an nn.Module (the model)", value, hint)
    return value


def model_or_none(name: str, value: object) -> nn.Module | None:
    """An ``nn.Module`` or ``None``."""
    return None if value is None else module(name, value)


def function(name: str, value: object, example: str) -> Callable[..., Any]:
    """A callable (``example`` shows one), never a tensor or a module (a result passed instead of the code)."""
    if not callable(value) or isinstance(value, (torch.Tensor, nn.Module)):
        raise _fail(name, f"a function, e.g. {example}", value)
    return value


def text(name: str, value: object, *, none_ok: bool = False) -> str | None:
    """A string (or ``None`` when ``none_ok``)."""
    if value is None and none_ok:
        return None
    if not isinstance(value, str):
        raise _fail(name, "a string" + (" or None" if none_ok else ""), value)
    return value


def text_list(name: str, value: object, known: Iterable[str] | None = None, what: str = "ids") -> list[str]:
    """A list (or tuple) of strings; with ``known``, each must be one of them."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or \
            not all(isinstance(v, str) for v in value):
        raise _fail(name, f"a list of strings ({what})", value)
    if known is not None:
        allowed = set(known)
        unknown = [v for v in value if v not in allowed]
        if unknown:
            shown = ", ".join(repr(v) for v in sorted(allowed)[:8]) + (", ..." if len(allowed) > 8 else "")
            raise GradvizError(f"{name}: unknown {what} {', '.join(repr(u) for u in unknown[:5])}; "
                               f"the known ones are {shown or '(none)'}.")
    return list(value)


def tensor_mapping(name: str, value: object, *, none_values: bool = False) -> Mapping[str, Any]:
    """A mapping of string names to tensors (``{"x": x}``); with ``none_values``, a value may be ``None``."""
    want = "a dict of name -> tensor, e.g. {'x': x}" + (" (None for no tensor)" if none_values else "")
    if not isinstance(value, Mapping):
        raise _fail(name, want, value)
    for key, item in value.items():
        if not isinstance(key, str):
            raise GradvizError(f"{name} must be {want}; the key {given(key)} is not a string.")
        if not (isinstance(item, torch.Tensor) or (none_values and item is None)):
            raise GradvizError(f"{name} must be {want}; {name}[{key!r}] is {given(item)}, not a tensor.")
    return value


def not_meta(tool: str, *things: object) -> None:
    """Refuse models and tensors on PyTorch's ``meta`` device (shapes without data) for a tool that needs values.

    ``things`` are modules (their parameters and buffers are checked) or tensors; anything else is skipped."""
    for thing in things:
        if isinstance(thing, nn.Module):
            tensors = [*thing.parameters(), *thing.buffers()]
            what = "the model's parameters are"
        elif isinstance(thing, torch.Tensor):
            tensors, what = [thing], "the tensor is"
        else:
            continue
        if any(t.is_meta for t in tensors):
            raise GradvizError(
                f"{tool} needs real values, but {what} on the meta device (shapes only, no data). Materialize the "
                "model first (model.to_empty(device='cpu') and load its weights), then run it again.")

"""Cuts found by one rule: an op whose inputs include a tensor that requires grad, and whose output does not.

During ``gv.capture`` (grad mode on) the capture's torch function mode
(:class:`~gradviz_nb.tracing.ghosts.ForwardObserver`) hands every call's output to :func:`dropped_grad`. When no
tensor in the output requires grad (or the output is Python data: a number, a list, an array) while an input
does, :func:`carries_values` asks whether the output depends on that input's *values* at all, by measuring:
the op runs again, twice with the input's values replaced by zeros and once by distinct values (same shape,
dtype and device, grad off, the RNG put back between runs). The same output for the same values and another
for other values: the values flowed into a result autograd does not follow, and the op is a cut, whatever its
name (``.item()``, ``torch.tensor(t)``, ``t.new_tensor(t)``, ``argmax``, ``unique``, an integer cast, ...).
Equal outputs: the input was only a template (``zeros_like``, ``new_zeros``, ``.size()``), not a cut; different
outputs for the same values: not a function of them (``data_ptr()``). Only calls made by the user's code are
measured, not another gradviz_nb tool's. The answer is kept per op and signature, so a forward pays for each
measurement once.

No table here decides whether a cut exists; :data:`~gradviz_nb.tracing.evidence.WATCHED` only words known ops.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["carries_values", "describe_value", "dropped_grad", "grad_input", "op_text"]

_DATA = (bool, int, float, complex)
_SEEN: dict[tuple[Any, ...], bool] = {}  # (op, signature) -> the output depends on the grad input's values
_SEEN_LIMIT = 4096


def dropped_grad(out: Any) -> bool:
    """The output carries nothing autograd follows: tensors that do not require grad (at least one), or Python
    data (a number, a list or tuple of numbers, a numpy array). None, handles, dtypes and strings: no."""
    if isinstance(out, torch.Tensor):
        return not out.requires_grad
    if isinstance(out, _DATA):
        return True
    if isinstance(out, (list, tuple)):
        if not out:
            return False
        if all(isinstance(v, torch.Tensor) for v in out):
            return not any(v.requires_grad for v in out)
        return all(isinstance(v, (*_DATA, list, tuple)) for v in out)
    return type(out).__module__ == "numpy" and type(out).__name__ == "ndarray"


def _slots(args: Any, kwargs: dict[str, Any]) -> Iterator[tuple[Any, torch.Tensor]]:
    """``(position, tensor)`` for each tensor argument: an int, ``(int, int)`` inside a list, or a kwarg name."""
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            yield i, a
        elif isinstance(a, (list, tuple)):
            for j, t in enumerate(a):
                if isinstance(t, torch.Tensor):
                    yield (i, j), t
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            yield k, v


def grad_input(args: Any, kwargs: dict[str, Any]) -> tuple[Any, torch.Tensor] | None:
    """The first tensor argument that requires grad, with its position."""
    return next(((pos, t) for pos, t in _slots(args, kwargs) if t.requires_grad), None)


def _measurable(t: torch.Tensor) -> bool:
    # A parameter is a plain tensor to every op (nn.Parameter opts out of __torch_function__): probing it with a
    # plain tensor measures the same op. Other subclasses (DTensor, fakes) may dispatch elsewhere: not measured.
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided and not t.is_meta and \
        (t.is_floating_point() or t.is_complex())


def _probe(t: torch.Tensor, distinct: bool) -> torch.Tensor:
    if not distinct:
        return torch.zeros(t.shape, dtype=t.dtype, device=t.device)
    # Distinct, deterministic values (no RNG drawn): the largest is not first, none is zero.
    n = t.numel()
    v = (torch.arange(n, dtype=torch.float64, device=t.device) * 0.7 + 1.3) % 5.0 + 0.25
    return v.reshape(t.shape).to(t.dtype)


def _swap(args: Any, kwargs: dict[str, Any], distinct: bool) -> tuple[list[Any], dict[str, Any]]:
    new_args = [list(a) if isinstance(a, (list, tuple)) else a for a in args]
    new_kwargs = dict(kwargs)
    for pos, t in _slots(args, kwargs):
        if not t.requires_grad:
            continue
        p = _probe(t, distinct)
        if isinstance(pos, str):
            new_kwargs[pos] = p
        elif isinstance(pos, tuple):
            new_args[pos[0]][pos[1]] = p
        else:
            new_args[pos] = p
    for i, a in enumerate(args):
        if isinstance(a, tuple):
            new_args[i] = tuple(new_args[i])
    return new_args, new_kwargs


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a).__module__ == "numpy":
        import numpy as np

        return bool(np.array_equal(a, b))
    return bool(a == b)


def _signature(func: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, ...]:
    key = getattr(func, "__self__", None) if type(func).__name__ == "method-wrapper" else func
    parts: list[Any] = [key]
    for pos, t in _slots(args, kwargs):
        parts.append((pos, tuple(t.shape), t.dtype, t.requires_grad))
    parts += [type(a) for a in args if not isinstance(a, torch.Tensor)]
    parts += [(k, type(v)) for k, v in kwargs.items() if not isinstance(v, torch.Tensor)]
    return tuple(parts)


def carries_values(func: Any, args: Any, kwargs: dict[str, Any],
                   worth: Callable[[], bool] | None = None) -> bool:
    """Does the op's output depend on the values of its inputs that require grad? Measured (see the module
    docstring); True when it cannot be measured (an in-place op, a tensor subclass, an op that refuses the
    probe values), so a cut is never missed for want of a measurement. ``worth``: asked before a measurement
    that no earlier call answered; when it says no, the answer is False and nothing is remembered."""
    name = getattr(func, "__name__", "")
    if (name.endswith("_") and not name.endswith("__")) or "out" in kwargs:
        return True
    if not all(_measurable(t) for _, t in _slots(args, kwargs) if t.requires_grad):
        return True
    try:
        sig = _signature(func, args, kwargs)
        known = _SEEN.get(sig)
    except TypeError:  # an unhashable argument type
        sig, known = None, None
    if known is not None:
        return known
    if worth is not None and not worth():
        return False
    state = torch.get_rng_state()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user saw the op's own warning once, from the real call
            runs = []
            for distinct in (False, False, True):
                torch.set_rng_state(state)
                run_args, run_kwargs = _swap(args, kwargs, distinct)
                runs.append(func(*run_args, **run_kwargs))
        # The same values twice must give the same output (not an address, an id, a clock), and other values
        # another output.
        depends = _same(runs[0], runs[1]) and not _same(runs[0], runs[2])
    except Exception:  # the probe values were refused: assume the op reads the values
        depends = True
    finally:
        torch.set_rng_state(state)
    if sig is not None:
        if len(_SEEN) >= _SEEN_LIMIT:
            _SEEN.clear()
        _SEEN[sig] = depends
    return depends


def describe_value(out: Any) -> str:
    """What the op returned, in words: "a Python float", "an int64 tensor [4]", "a float32 tensor [3, 8] with
    no gradient history"."""
    if isinstance(out, torch.Tensor):
        dtype = str(out.dtype).removeprefix("torch.")
        shape = list(out.shape)
        if out.is_floating_point() or out.is_complex():
            return f"a {dtype} tensor {shape} with no gradient history"
        return f"an integer/boolean ({dtype}) tensor {shape}"
    if isinstance(out, (list, tuple)) and out and all(isinstance(v, torch.Tensor) for v in out):
        return f"{len(out)} tensors with no gradient history"
    if isinstance(out, (list, tuple)):
        return f"a Python {type(out).__name__}"
    if type(out).__module__ == "numpy":
        return "a numpy array"
    return f"a Python {type(out).__name__}"


def op_text(func: Any) -> str:
    """How the user wrote the op: ``float(...)``, ``.item()``, ``torch.unique(...)``, ``F.one_hot(...)``."""
    name = getattr(func, "__name__", None) or str(func)
    if name == "__get__":
        owner = getattr(func, "__self__", None)
        return f".{getattr(owner, '__name__', 'attribute')}"
    if name.startswith("__") and name.endswith("__"):
        return f"{name.strip('_')}(...)"
    qual = getattr(func, "__qualname__", "") or ""
    module = getattr(func, "__module__", "") or ""
    if qual.startswith(("TensorBase.", "Tensor.", "_TensorBase.")) or getattr(func, "__objclass__", None) is not None:
        return f".{name}()"
    if module.startswith("torch.nn.functional"):
        return f"F.{name}(...)"
    return f"torch.{name}(...)"

"""Forward-time evidence for why a gradient is missing, zero or tiny, recorded by the capture's mode.

The backward graph cannot show a value that left it (``.item()``, ``.tolist()``, a numpy round trip, an
integer cast, a comparison), a region run under ``torch.no_grad()``, how saturated an activation was, or
what a tensor hook did to the gradient. :class:`~gradviz_nb.tracing.observer.ForwardObserver` sees each of
these as a torch call and records an :class:`Evidence` with the module, the user's source line and the
measured numbers.

Cost: the observer looks each call up in :data:`WATCHED` (one dict lookup); only the few calls found there
do more. A saturating op adds one reduction, kept as a tensor (no device sync) until read.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
import torch.nn.functional as F

from gradviz_nb.tracing.places import source_line

__all__ = ["WATCHED", "Evidence", "checkpoint_call_line", "clamp_tie_derivative", "hook_name", "hook_wrapper",
           "saturation_stats"]

_T = torch.Tensor
# What each watched call is evidence of, for wording and for the zero and saturation evidence. Whether a call
# is a cut is decided by measurement for every op (tracing/cuts.py), never by this table.
WATCHED: dict[Any, str] = {}
_f: Any
for _f in (_T.item, _T.tolist, _T.numpy, _T.__float__, _T.__int__, _T.__bool__, _T.__index__):
    WATCHED[_f] = "leave"
for _f in (_T.long, _T.int, _T.short, _T.bool, _T.byte, _T.char, _T.to, _T.type):
    WATCHED[_f] = "cast"
for _f in (torch.tensor, torch.as_tensor, torch.from_numpy, torch.scalar_tensor, torch.full):
    WATCHED[_f] = "enter"
for _f in (torch.round, _T.round, torch.sign, _T.sign, torch.sgn, _T.sgn, torch.floor, _T.floor, torch.ceil,
           _T.ceil, torch.trunc, _T.trunc, torch.fix, _T.fix):
    WATCHED[_f] = "zero-derivative"
for _f in (torch.gt, torch.lt, torch.ge, torch.le, torch.eq, torch.ne, _T.gt, _T.lt, _T.ge, _T.le, _T.eq, _T.ne,
           _T.__gt__, _T.__lt__, _T.__ge__, _T.__le__, _T.__eq__, _T.__ne__, torch.argmax, torch.argmin,
           _T.argmax, _T.argmin, torch.heaviside):
    WATCHED[_f] = "compare"
for _f in (torch.relu, _T.relu, F.relu, F.relu6, torch.sigmoid, _T.sigmoid, F.sigmoid, torch.tanh, _T.tanh,
           F.tanh, torch.clamp, _T.clamp, torch.clip, _T.clip, torch.clamp_min, _T.clamp_min, torch.clamp_max,
           _T.clamp_max, F.hardtanh):
    WATCHED[_f] = "saturating"
WATCHED[_T.register_hook] = "hook"

SIGMOID_FLAT = 0.49  # |sigmoid - 0.5| above this: derivative below 0.01 (a hundredth of its peak 0.25)
TANH_FLAT = 0.99  # |tanh| above this: derivative below 0.02


@dataclass(eq=False)
class Evidence:
    """One forward-time fact about a gradient path. ``kind``: "detached", "data-access", "left-graph",
    "entered", "zero-derivative", "saturated", "hook", "no-grad", "reentrant-checkpoint".

    ``order`` sorts events in forward order; ``seq`` is the autograd sequence number of the node the op
    made (zero-derivative and saturating ops, a hooked tensor's node), else None; ``cut`` the parameters
    whose path to the loss ends here (upstream of a value that left, or used under no_grad).
    """

    kind: str
    op: str
    where: str
    line: str
    order: int
    seq: int | None = None
    cut: list[str] = field(default_factory=list)
    shape: list[int] = field(default_factory=list)
    hook: str = ""  # a tensor hook's name
    via: str = ""  # reentrant checkpoint: the line calling checkpoint(...); left-graph: where a new tensor came in
    targets: list[Any] = field(default_factory=list)  # a detach: the ops that used the detached value again
    arg: str = ""  # a cut: which input required grad ("input 0, a float32 tensor [4, 8]")
    value: str = ""  # a cut: what came out ("a Python float", "an int64 tensor [4]")
    _stats: Any = None  # saturating op: tensor [saturated count, derivative sum, numel]; hook: [in, out] norms

    @property
    def numbers(self) -> dict[str, float]:
        """The measured numbers, read (one device sync) on first use: ``fraction`` saturated and mean
        local ``derivative`` of a saturating op (a clipping op's ``on_bound``: the fraction of its inputs
        exactly on a bound, where its derivative is 0); ``grad_in`` / ``grad_out`` norms of a hook's gradient."""
        stats = self._stats
        if isinstance(stats, dict):
            return stats
        if stats is None:
            return {}
        values = [float(v) for v in stats.tolist()] if isinstance(stats, torch.Tensor) else []
        if self.kind == "zero-derivative" and len(values) == 3 and values[2]:
            out = {"zeros": values[0] / values[2]}
        elif self.kind == "saturated" and len(values) in (3, 4) and values[2]:
            out = {"fraction": values[0] / values[2], "derivative": values[1] / values[2]}
            if len(values) == 4:
                out["on_bound"] = values[3] / values[2]  # inputs exactly on a bound, counted flat
        elif self.kind == "hook" and len(values) == 2:
            out = {"grad_in": values[0], "grad_out": values[1]}
        else:
            out = {}
        self._stats = out
        return out


@functools.cache
def clamp_tie_derivative(tensor_bound: bool = False) -> float:
    """The derivative this torch's ``clamp`` (``clamp_min``, ``clamp_max``, ``clip``) gives where the input
    equals a bound: up to torch 2.13, 1; from 2.14 on, 0 for a number bound and 0.5 for a tensor bound (split
    as ``maximum`` splits a tie). Measured once per kind on the installed torch, not read off its version."""
    with torch.inference_mode(False), torch.enable_grad(), torch._C.DisableTorchFunction():
        x = torch.zeros(1, requires_grad=True)
        bound = torch.zeros(1) if tensor_bound else 0.0
        (grad,) = torch.autograd.grad(torch.clamp(x, min=bound).sum(), x)
    return float(grad.item())


def _bounds(name: str, args: Any, kwargs: Any) -> tuple[Any, Any]:
    """The (lower, upper) bound of a clipping op's call; None where it has none."""

    def arg(i: int, key: str, default: Any = None) -> Any:
        return args[i] if len(args) > i else kwargs.get(key, default)

    if name == "relu":
        return 0.0, None
    if name == "relu6":
        return 0.0, 6.0
    if name == "hardtanh":
        return arg(1, "min_val", -1.0), arg(2, "max_val", 1.0)
    if name == "clamp_min":
        return arg(1, "min"), None
    if name == "clamp_max":
        return None, arg(1, "max")
    return arg(1, "min"), arg(2, "max")  # clamp, clip


def saturation_stats(func: Any, out: torch.Tensor, args: Any, kwargs: Any) -> torch.Tensor | None:
    """``[saturated count, sum of the local derivative, numel]`` of a saturating op's output, as one
    tensor (no sync), plus, for a clipping op, the count of inputs exactly on a bound that are counted flat;
    None when the op is not one whose saturation we know how to read.

    A clipped element has derivative 0. An input exactly on a bound has derivative 0 for ``relu``,
    ``relu6`` and ``hardtanh`` (every torch), and for ``clamp`` what :func:`clamp_tie_derivative` measures
    (0 from torch 2.14 on for a number bound: flat)."""
    y = out.detach()
    name = getattr(func, "__name__", "")
    if name in ("relu", "relu6", "clamp", "clip", "clamp_min", "clamp_max", "hardtanh"):
        x = args[0].detach() if args and isinstance(args[0], torch.Tensor) else None
        if x is None or x.shape != y.shape:
            return None
        flat = y != x  # clipped elements (an in-place relu has y == x: its bound test below finds them)
        on_bound = torch.zeros_like(flat)
        tensor_bound = False
        for b in _bounds(name, args, kwargs or {}):
            if b is not None:
                tensor_bound |= isinstance(b, torch.Tensor)
                on_bound |= x == (b.detach() if isinstance(b, torch.Tensor) else b)
        at = on_bound & ~flat  # inputs exactly on a bound, passed through unchanged
        tie = 0.0 if name in ("relu", "relu6", "hardtanh") else clamp_tie_derivative(tensor_bound)
        if tie == 0.0:  # a tie is flat: counted with the clipped ones, and reported
            flat, ties = flat | at, at.sum()
        else:  # a tie passes `tie` of the gradient
            ties = torch.zeros((), dtype=at.dtype, device=y.device).sum()
        count = flat.sum().to(torch.float32)
        deriv = (flat.numel() - count) - (1.0 - tie) * at.sum().to(torch.float32)
        return torch.stack([count, deriv, torch.tensor(float(y.numel()), device=y.device), ties.to(torch.float32)])
    if name == "sigmoid":
        yf = y.to(torch.float32)
        count = ((yf - 0.5).abs() > SIGMOID_FLAT).sum()
        deriv = (yf * (1 - yf)).sum()
    elif name == "tanh":
        yf = y.to(torch.float32)
        count = (yf.abs() > TANH_FLAT).sum()
        deriv = (1 - yf * yf).sum()
    else:
        return None
    return torch.stack([count.to(torch.float32), deriv.to(torch.float32),
                        torch.tensor(float(y.numel()), device=y.device)])


def hook_wrapper(hook: Callable[[torch.Tensor], Any], event: Evidence) -> Callable[[torch.Tensor], Any]:
    """The user's tensor hook, measuring the norm of the gradient it received and of what it returned."""

    def measured(grad: torch.Tensor) -> Any:
        result = hook(grad)
        with torch.no_grad():
            after = result if isinstance(result, torch.Tensor) else grad
            event._stats = torch.stack([grad.detach().float().norm(), after.detach().float().norm()])
        return result

    vars(measured)["__wrapped__"] = hook  # what inspect.unwrap follows to the user's hook
    return measured


def hook_name(hook: Any) -> str:
    """A hook's name for evidence: its qualified name and where it is defined (``file:line``)."""
    name = getattr(hook, "__qualname__", None) or type(hook).__name__
    code = getattr(hook, "__code__", None)
    return f"{name} ({source_line(code.co_filename, code.co_firstlineno)})" if code is not None else str(name)


def checkpoint_call_line(is_library: Callable[[str], bool]) -> str:
    """``file:line`` of the user's ``checkpoint(...)`` call when the current frame runs inside a reentrant
    checkpoint's forward (``CheckpointFunction.forward``), else ``""``."""
    frame: FrameType | None = sys._getframe(1)
    inside = False
    while frame is not None:
        code = frame.f_code
        if not inside:
            inside = code.co_name == "forward" and code.co_filename.endswith("checkpoint.py") and \
                "ctx" in frame.f_locals and "run_function" in frame.f_locals
        elif not is_library(code.co_filename):
            return source_line(code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return ""

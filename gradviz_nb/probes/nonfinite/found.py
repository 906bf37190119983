"""What :func:`gv.find_nonfinite` reports: the records (:class:`NonFinite`, :class:`Site`,
:class:`InputInfo`) and the cause of a birth read from the op and the values it read (:func:`classify`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gradviz_nb import schema

CAUSES = ("0/0", "log(0)", "log of a negative", "exp overflow", "division by zero", "sqrt of a negative",
          "overflow", "constant", "already non-finite", "other")


# -- results ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputInfo:
    """One input of the op: a tensor (``scalar`` False) or a Python number argument (``shape == ()``).

    ``max_abs`` is the largest absolute value that is not NaN (``inf`` when an Inf is there), ``min`` the
    smallest; ``nan`` / ``inf`` / ``zeros`` count elements."""

    shape: tuple[int, ...]
    dtype: str
    nan: int
    inf: int
    zeros: int
    max_abs: float
    min: float
    scalar: bool = False

    @property
    def nonfinite(self) -> bool:
        """True when this input holds a NaN or an Inf."""
        return bool(self.nan or self.inf)

    def describe(self) -> str:
        """One line: the input's shape and dtype, its range, and how many NaN/Inf it holds."""
        what = "scalar" if self.scalar else f"{list(self.shape)} {self.dtype}"
        state = (f"{self.nan} NaN, {self.inf} Inf" if self.nonfinite else "finite")
        return f"{what}, {state}, max |x| {_num(self.max_abs)}, min {_num(self.min)}, {self.zeros} zeros"


@dataclass(frozen=True)
class Site:
    """Where an op ran: ``phase`` "forward"/"backward", aten ``op``, module path, source line, and in
    backward the autograd ``node`` running it."""

    phase: str
    op: str
    module: str
    module_type: str
    line: str
    node: str = ""

    def describe(self) -> str:
        """Where, in words: the op, its pass, module and source line."""
        where = f"in {self.module or '(top level)'}" + (f" ({self.module_type})" if self.module_type else "")
        node = f" [{self.node}]" if self.node else ""
        return f"{self.phase} {self.op}{node} {where} at {self.line or '(unknown line)'}"


@dataclass(frozen=True)
class NonFinite:
    """The first op whose NaN/Inf reached the loss or the training state (see :func:`find_nonfinite`).

    ``kind`` is what the op's output held ("NaN", "Inf" or "NaN and Inf"); ``cause`` one of :data:`CAUSES`
    with ``detail`` in words; ``inputs`` the op's inputs (values as the op read them; for an in-place op the
    written input is shown after the write); ``became_nan`` where infinities from this op turned into the
    NaN that reached (``None`` if they reached as they were); ``reached`` where its values arrived;
    ``others`` how many later births also reached. Under ``torch.distributed`` with ``DTensor`` parameters:
    ``rank``, the rank where it was born, and ``ranks``, every rank whose own run saw a NaN/Inf reach (None and
    ``()`` in one process)."""

    phase: str
    op: str
    module: str
    module_type: str
    line: str
    node: str
    kind: str
    cause: str
    detail: str
    inputs: tuple[InputInfo, ...]
    reached: tuple[str, ...]
    became_nan: Site | None = None
    others: int = 0
    rank: int | None = None
    ranks: tuple[int, ...] = ()

    @property
    def site(self) -> Site:
        """Where it was born (:class:`Site`): pass, op, module, module type, source line and graph node."""
        return Site(self.phase, self.op, self.module, self.module_type, self.line, self.node)

    def summary(self) -> str:
        """The origin as text: what was born where, its cause, and the op's inputs."""
        lines = [f"{self.kind} born in {self.site.describe()}", f"  cause: {self.cause}: {self.detail}"]
        lines += [f"  input {i}: {x.describe()}" for i, x in enumerate(self.inputs)]
        if self.became_nan is not None:
            lines.append(f"  became NaN in {self.became_nan.describe()}")
        lines.append(f"  reached: {'; '.join(self.reached)}")
        if self.others:
            lines.append(f"  ({self.others} later birth{'s' if self.others > 1 else ''} also reached)")
        if self.rank is not None:
            lines.append(f"  born on rank {self.rank}; seen on ranks {', '.join(map(str, self.ranks))}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        where = self.module or "(top level)"
        on = f" on rank {self.rank}" if self.rank is not None else ""
        return f"<NonFinite {self.kind} {self.phase} {self.op} in {where} at {self.line or '?'}{on}: {self.cause}>"

    def to_dict(self) -> dict[str, Any]:
        """The origin as plain data (kind, phase, op, module, line, cause, detail, inputs)."""
        out = asdict(self)
        out["inputs"] = [{**asdict(x), "nonfinite": x.nonfinite} for x in self.inputs]
        return out

    def to_json(self, indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``nonfinite`` type)."""
        return schema.dumps(schema.nonfinite(self), indent)


# -- helpers ------------------------------------------------------------------------------------------------


def _num(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else str(x)


def input_info(x: Any) -> InputInfo:
    """What one op input looked like when the NaN/Inf was born (shape, dtype, range, NaN/Inf counts)."""
    if not isinstance(x, torch.Tensor):
        v = float(x)
        return InputInfo((), type(x).__name__, int(math.isnan(v)), int(math.isinf(v)), int(v == 0),
                         abs(v) if not math.isnan(v) else math.nan, v, scalar=True)
    t = x.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.layout != torch.strided or t.device.type == "meta":
        return InputInfo(tuple(t.shape), str(t.dtype).replace("torch.", ""), 0, 0, 0, math.nan, math.nan)
    f = t if t.is_floating_point() else t.double()
    nan = f.isnan()
    n_nan = int(nan.sum())
    kept = f[~nan] if n_nan else f
    max_abs = float(kept.abs().max()) if kept.numel() else math.nan
    low = float(kept.min()) if kept.numel() else math.nan
    return InputInfo(tuple(t.shape), str(x.dtype).replace("torch.", ""), n_nan, int(f.isinf().sum()),
                     int((f == 0).sum()), max_abs, low)


def _any(x: Any, pred: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    t = x if isinstance(x, torch.Tensor) else torch.tensor(float(x))
    return bool(pred(t.detach()).any())


def classify(base: str, values: list[Any], nan: bool, inf: bool) -> tuple[str, str]:
    """Cause of a birth, from the op and the values it read."""
    tensors = [v for v in values if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())]
    numbers = [v for v in values if not isinstance(v, torch.Tensor)]
    if any(not math.isfinite(float(v)) for v in numbers if isinstance(v, (int, float))) or not tensors:
        return "constant", "a NaN/Inf constant was written (a fill value, a mask, a literal)"
    first = values[0] if values else tensors[0]
    if base in ("log", "log2", "log10", "log1p", "xlogy", "special_xlog1py"):
        x = values[1] if base in ("xlogy", "special_xlog1py") and len(values) > 1 else first
        edge = -1.0 if base in ("log1p", "special_xlog1py") else 0.0
        neg, zero = _any(x, lambda t: t < edge), _any(x, lambda t: t == edge)
        if neg and (nan or not zero):
            return "log of a negative", f"{base} of values below {edge:g} is NaN"
        if zero:
            return "log(0)", f"{base} of {edge:g} is -inf (an input reaches {edge:g}, e.g. a probability underflowing)"
    if base in ("sqrt", "rsqrt") and _any(first, lambda t: t < 0):
        return "sqrt of a negative", f"{base} of a negative value is NaN"
    if base == "pow" and len(values) > 1:
        b, e = values[0], values[1]
        if nan and _any(b, lambda t: t < 0) and _any(e, lambda t: t != torch.round(t)):
            return "sqrt of a negative", "a negative number to a fractional power (x ** 0.5 is a square root) is NaN"
        if _any(b, lambda t: t == 0) and _any(e, lambda t: t < 0):
            return "division by zero", "0 to a negative power is a division by zero"
    if base in ("div", "true_divide", "floor_divide", "reciprocal", "rsqrt") and values:
        num, den = (None, first) if base in ("reciprocal", "rsqrt") else (first, values[1] if len(values) > 1 else None)
        if den is not None and _any(den, lambda t: t == 0):
            if num is not None and nan:
                tn = num if isinstance(num, torch.Tensor) else torch.tensor(float(num))
                td = den if isinstance(den, torch.Tensor) else torch.tensor(float(den))
                try:
                    both = bool(((tn.detach() == 0) & (td.detach() == 0)).any())
                except RuntimeError:  # shapes that do not broadcast (never for a div that ran)
                    both = False
                if both:
                    return "0/0", "zero divided by zero (e.g. x / x.norm() of an all-zero vector) is NaN"
            return "division by zero", "a divisor is exactly 0 (e.g. a norm or a count that is 0)"
    if base in ("exp", "exp2", "expm1", "sinh", "cosh", "_softmax") and inf:
        top = max((float(t.detach().abs().max()) for t in tensors), default=math.nan)
        return "exp overflow", f"{base} of values up to {_num(top)} exceeds the dtype's range"
    if inf and not nan:
        return "overflow", "finite inputs gave a result beyond the dtype's largest value"
    return "other", f"{base} turned finite inputs into {'NaN' if nan else 'Inf'}"


@dataclass
class _Birth:
    site: Site
    kind: str
    cause: str
    detail: str
    inputs: tuple[InputInfo, ...]
    parents: frozenset[int] = frozenset()  # a transition: NaN made from these births' infinities



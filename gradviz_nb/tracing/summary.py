"""What the details panel shows of a leaf tensor and its ``.grad``: the first values and exact statistics
(norm, mean, std, min, max, how many are not finite), computed ON DEMAND when a node is selected (the
trace itself reads no values but those of tiny tensors, ``SMALL`` elements at most).

Cost, measured on one core (float32): four vectorized reductions straight on the tensor, in its own dtype
and without any copy (``sum``, ``amax``, ``amin`` and the 2-norm: about 1 ns per element for all four, 40 ms
for GPT-2's 38.6M-element embedding, transposed views included). The norm and sum give mean and std. A
single-pass alternative (``var_mean``, Welford) plus ``aminmax`` measured 6x slower (258 ms), so the
four passes are the cheaper "one pass over the statistics". Exceptions, each said where it happens:

- tensors of at most ``EXACT_MAX`` elements are summarized in float64 (a copy of at most 512 KB, 0.1 ms):
  their std must be exact even when it is tiny against the mean (a LayerNorm weight of ones), and the page
  computes the statistics of the same few values in float64 itself, so both agree digit for digit;
- a large tensor whose std is under 1% of its mean would lose digits to cancellation in
  ``norm² - n·mean²``: its std takes a second pass over ``t - mean`` (one temporary);
- a tensor with NaN or Inf (seen in the sum, no extra pass otherwise): a mask and the finite elements
  are copied once, as statistics are over the finite ones.

Only plain tensors are read: a tensor subclass (an FSDP2 ``DTensor`` shard: reading one would be a
collective) or unallocated storage gets no summary at all. :class:`Summarizer` bounds the total work
when many summaries are made ahead of time (an exported page).
"""

from __future__ import annotations

import math
from typing import TypedDict

import torch
from torch import nn

SMALL = 64  # tensors of at most this many elements are kept whole: forward values in a trace, gradients recorded
HEAD = 8  # first values shown of a tensor too large to show whole
EXACT_MAX = 1 << 16  # tensors up to this many elements: float64 statistics (see the module doc)
STATS_MAX = 1 << 20  # ahead-of-time summaries (Summarizer): only tensors up to this many elements
STATS_BUDGET = 1 << 23  # ... and at most this many elements summed over one Summarizer
_INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


class TensorSummary(TypedDict):
    """A tensor in a few numbers. ``head``: its first values in row-major order (all of them when
    ``numel <= SMALL``, else the first ``HEAD``), non-finite ones as ``"NaN"`` / ``"Infinity"`` /
    ``"-Infinity"``. Statistics are over the finite elements (``nonfinite`` counts the others); ``None``
    with ``skipped`` saying why when not computed."""

    numel: int
    head: list[float | str]
    norm: float | None
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    nonfinite: int | None
    skipped: str


def readable(t: torch.Tensor) -> bool:
    """A plain, allocated tensor whose values may be read here (real numbers: not a complex or sparse one)."""
    if type(t) not in (torch.Tensor, nn.Parameter) or t.is_meta or t.layout != torch.strided or t.is_complex():
        return False
    return not t.numel() or t.untyped_storage().nbytes() >= (t.storage_offset() + 1) * t.element_size()


def _short(x: float) -> float:
    """7 significant digits: float32's precision, and about half the JSON of a double's repr."""
    return float(f"{x:.7g}")


def _json_float(x: float) -> float | str:
    if math.isfinite(x):
        return _short(x)
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _head(t: torch.Tensor, k: int) -> list[float]:
    """The first ``k`` values in row-major order, without flattening a non-contiguous tensor (a copy)."""
    if t.is_contiguous():
        head: list[float] = t.view(-1)[:k].tolist()
        return head
    out = []
    for i in range(k):
        index, rest = [], i
        for size in reversed(t.shape):
            index.append(rest % size)
            rest //= size
        out.append(float(t[tuple(reversed(index))]))
    return out


def summarize(t: torch.Tensor | None) -> TensorSummary | None:
    """The summary of ``t`` (see the module doc), or None when there is no tensor or it must not be read."""
    if t is None or not readable(t):
        return None
    with torch.no_grad():
        t = t.detach()
        n = t.numel()
        head = [_json_float(float(x)) for x in _head(t, n if n <= SMALL else min(HEAD, n))]
        empty: TensorSummary = {"numel": n, "head": head, "norm": None, "mean": None, "std": None,
                                "min": None, "max": None, "nonfinite": None, "skipped": ""}
        if not (t.is_floating_point() or t.dtype in _INTS):
            return {**empty, "skipped": f"no statistics for {str(t.dtype).removeprefix('torch.')}"}
        if n == 0:
            return {**empty, "nonfinite": 0, "skipped": "no values"}
        return _with_stats(empty, t)


def _with_stats(s: TensorSummary, t: torch.Tensor) -> TensorSummary:
    exact = t.numel() <= EXACT_MAX or not t.is_floating_point()
    if exact:
        t = t.double()  # small (or integer, never a leaf): exact, see the module doc
    total = float(t.sum())
    nonfinite = 0
    if not math.isfinite(total):  # NaN/Inf somewhere (or a finite sum overflowing: then nonfinite stays 0)
        finite = torch.isfinite(t)
        nonfinite = int(t.numel() - int(finite.sum()))
        if nonfinite:
            t = t[finite]
            if not t.numel():
                return {**s, "nonfinite": nonfinite, "skipped": "no finite values"}
        if t.dtype != torch.float64:
            t = t.double()  # the finite values overflow the dtype's sum: add them up in float64
        total = float(t.sum())
    n = t.numel()
    norm = float(torch.linalg.vector_norm(t))
    mean = total / n
    lo, hi = float(t.amin()), float(t.amax())
    std = 0.0
    if n > 1:
        var = max(0.0, (norm * norm - n * mean * mean) / (n - 1))
        if exact or var < 1e-4 * mean * mean:  # exact, or cancellation in the sums: measure the spread itself
            var = float(torch.linalg.vector_norm(t - mean)) ** 2 / (n - 1)
        std = math.sqrt(var)
    return {**s, "norm": _short(norm), "mean": _short(mean), "std": _short(std), "min": _short(lo),
            "max": _short(hi), "nonfinite": nonfinite}


class Summarizer:
    """Summaries made ahead of time (an exported page has no kernel to ask), sharing a budget: tensors
    over ``STATS_MAX`` elements, and any once ``budget`` elements were summarized, get none (None)."""

    def __init__(self, budget: int = STATS_BUDGET, largest: int = STATS_MAX) -> None:
        self.budget = budget
        self.largest = largest

    def fits(self, t: torch.Tensor | None) -> bool:
        """True (and the budget charged) when ``t``'s summary may be made."""
        n = 0 if t is None else t.numel()
        if n > self.largest or n > self.budget:
            return False
        self.budget -= n
        return True

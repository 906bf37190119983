"""What the details panel shows of a leaf tensor and its ``.grad``, read once at trace time: the first
values and, bounded in time, exact statistics (norm, mean, std, min, max).

A small tensor's values are all on the node already (``value``, at most ``SMALL_VALUE`` elements); this is
for the rest. Statistics cost a few passes over the tensor (about 40 ns per element per pass on a busy
2-core machine), so they are computed only for tensors of at most ``STATS_MAX`` elements and within
``STATS_BUDGET`` elements per trace; a skipped summary says why. Only plain tensors are read: a tensor
subclass (an FSDP2 ``DTensor`` shard) or unallocated storage gets no summary at all (reading it would
be a collective, or fail).
"""

from __future__ import annotations

import math
from typing import TypedDict

import torch
from torch import nn

from gradviz_nb.tracing.ghosts import SMALL_VALUE

HEAD = 8  # first values shown of a tensor too large to show whole
STATS_MAX = 1 << 20  # exact statistics for tensors up to this many elements
STATS_BUDGET = 1 << 23  # ... and at most this many elements summed over one trace


class TensorSummary(TypedDict):
    """A tensor in a few numbers. ``head``: its first values in row-major order (all of them when
    ``numel <= SMALL_VALUE``, else the first ``HEAD``), non-finite ones as ``"NaN"`` / ``"Infinity"`` /
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


def _readable(t: torch.Tensor) -> bool:
    if type(t) not in (torch.Tensor, nn.Parameter) or t.is_meta:
        return False
    return not t.numel() or t.untyped_storage().nbytes() >= (t.storage_offset() + 1) * t.element_size()


def _short(x: float) -> float:
    """7 significant digits: float32's precision, and about half the JSON of a double's repr."""
    return float(f"{x:.7g}")


def _json_float(x: float) -> float | str:
    if math.isfinite(x):
        return _short(x)
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


class Summarizer:
    """Summaries for one trace, sharing the statistics budget."""

    def __init__(self, budget: int = STATS_BUDGET) -> None:
        self.budget = budget

    def __call__(self, t: torch.Tensor | None) -> TensorSummary | None:
        """The summary of ``t``, or None when there is no tensor or it must not be read."""
        if t is None or not _readable(t):
            return None
        with torch.no_grad():
            t = t.detach()
            n = t.numel()
            flat = t.reshape(-1)  # a view when contiguous (parameters are); a copy only otherwise
            head = [_json_float(float(x)) for x in flat[: n if n <= SMALL_VALUE else HEAD].tolist()]
            empty: TensorSummary = {"numel": n, "head": head, "norm": None, "mean": None, "std": None,
                                    "min": None, "max": None, "nonfinite": None, "skipped": ""}
            if not (t.is_floating_point() or t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)):
                return {**empty, "skipped": f"no statistics for {str(t.dtype).removeprefix('torch.')}"}
            if n > STATS_MAX:
                return {**empty, "skipped": f"statistics skipped: over {STATS_MAX:,} elements"}
            if n > self.budget:
                return {**empty, "skipped": "statistics skipped: this trace's time budget was spent on other tensors"}
            self.budget -= n
            return _with_stats(empty, flat)


def _with_stats(s: TensorSummary, flat: torch.Tensor) -> TensorSummary:
    x = flat.double()
    finite = torch.isfinite(x)
    nonfinite = int(x.numel() - int(finite.sum()))
    if nonfinite:
        x = x[finite]
    if not x.numel():
        return {**s, "nonfinite": nonfinite, "skipped": "no finite values"}
    lo, hi = torch.aminmax(x)
    return {**s, "norm": _short(float(torch.linalg.vector_norm(x))), "mean": _short(float(x.mean())),
            "std": _short(float(x.std())) if x.numel() > 1 else 0.0, "min": _short(float(lo)),
            "max": _short(float(hi)), "nonfinite": nonfinite}

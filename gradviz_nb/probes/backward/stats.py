"""Gradient statistics for :func:`gv.record_backward`, read during the pass and turned into numbers once after it.

A ``.item()`` per gradient per node would triple the backward time; here each gradient costs three or four
reductions left as tensors (no stack, no copy), and :func:`resolve` stacks every one of them once and reads
them with a single ``tolist()``. A gradient is read once: what a node sends into a buffer with one incoming
slot is the tensor its producer receives next (:class:`Tracker`), and what a reshaping op sends
(:data:`SAME_ELEMENTS`) holds the elements it received.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import torch

SMALL = 64  # gradients with at most this many elements keep their full values
# Ops whose gradient is the gradient received, only reshaped or permuted: same elements, same statistics.
SAME_ELEMENTS = frozenset({
    "TBackward0", "TransposeBackward0", "TransposeBackward1", "PermuteBackward0", "ViewBackward0",
    "UnsafeViewBackward0", "ReshapeAliasBackward0", "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2",
    "SqueezeBackward3", "SqueezeBackward4", "UnsqueezeBackward0", "CloneBackward0", "AliasBackward0",
})


@dataclass(slots=True)  # one per distinct gradient of every recorded pass
class GradStats:
    """One gradient tensor: shape and statistics always; ``value`` when small, asked for, or a leaf's."""

    shape: list[int]
    norm: float
    mean: float
    max_abs: float
    nonfinite: bool
    value: torch.Tensor | None = field(default=None, repr=False)


def reductions(stored: torch.Tensor) -> list[torch.Tensor]:
    """Norm, sum, max and min as 0-d tensors. Measured per call on 2 CPU cores (64x128 float32): aminmax
    4.4 us against 8.1 for amax + amin, but 17 us on a transposed view (725 against 76 us at 768x768),
    and autograd hands out many transposed views: aminmax only when contiguous. No stack here (5 us a
    gradient): :func:`resolve` stacks them all at once."""
    if stored.is_contiguous():
        low, top = torch.aminmax(stored)
    else:
        top, low = stored.amax(), stored.amin()
    return [torch.linalg.vector_norm(stored), stored.sum(), top, low]


class Pending:
    """One gradient's statistics as 0-d tensors; converted to floats once, after the pass."""

    def __init__(self, t: torch.Tensor, keep: bool, copy: bool = True) -> None:
        g = t.detach() if t.requires_grad else t  # gradients seldom require grad: no new tensor object per read
        n = g.numel()
        # A sparse gradient (nn.Embedding(sparse=True)) stores only the rows used: reduce its coalesced
        # values (the rest are zeros, which change neither norm nor max) and divide the sum by every element.
        stored = g.coalesce()._values() if g.is_sparse else g
        if n == 0 or stored.numel() == 0:
            self.stats = [torch.zeros((), device=g.device)] * 4
        else:
            if stored.is_complex():  # statistics of the magnitudes |g|: the true norm and max |g|
                stored = stored.abs()
            self.stats = reductions(stored)
        self.n = n
        self.shape = list(g.shape)
        # A leaf's incoming gradient is kept by reference (it costs what .grad would) unless later
        # passes may add into it in place (accumulate=True).
        if g.is_sparse and n <= SMALL:
            g = g.to_dense()  # small values reach the page as plain lists
        self.value = (g.clone() if copy else g) if keep or n <= SMALL else None

    def resolve(self, numbers: list[float]) -> GradStats:
        norm, total, top, bottom = numbers
        bad = not math.isfinite(total) or norm != norm  # a NaN or Inf element makes the sum non-finite
        return GradStats(self.shape, norm, total / self.n if self.n else 0.0, max(top, -bottom), bad, self.value)

    def alias(self, t: torch.Tensor, keep: bool, copy: bool) -> Pending:
        """The statistics of ``t``, a reshaped or transposed view of this gradient (same elements), without
        reading it again; its own shape and value."""
        twin = Pending.__new__(Pending)
        twin.stats, twin.n, twin.shape = self.stats, self.n, list(t.shape)
        g = t.detach() if t.requires_grad else t
        twin.value = (g.clone() if copy else g) if keep or self.n <= SMALL else None
        return twin


class Tracker:
    """Statistics once per gradient tensor where that is safe: what a node sends into a producer's
    buffer that has *one* incoming slot is the very tensor the producer receives next, unmodified (with
    several slots the engine may sum into it in place). Identity is checked through a weak reference."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[weakref.ref[torch.Tensor], Pending]] = {}

    def __call__(self, t: torch.Tensor | None, keep: bool, copy: bool = True, reuse: bool = False) -> Pending | None:
        if not isinstance(t, torch.Tensor):
            return None
        ref, pending = self._seen.get(id(t), (None, None)) if reuse else (None, None)
        if ref is not None and pending is not None and ref() is t:
            if keep and pending.value is None:
                pending.value = t.detach().clone() if copy else t.detach()
            return pending
        pending = Pending(t, keep, copy)
        self._seen[id(t)] = (weakref.ref(t), pending)
        return pending

    def same(self, t: torch.Tensor | None, of: Pending | None, keep: bool) -> Pending | None:
        """What a view op (``SAME_ELEMENTS``) sent: ``t`` holds exactly the elements it received (``of``),
        reshaped or transposed, so the statistics are shared instead of read again (on GPT-2 124M each
        weight gradient passes a ``TBackward0``: this halves the reductions over weight gradients)."""
        if not isinstance(t, torch.Tensor) or of is None or t.numel() != of.n or t.is_sparse:
            return self(t, keep)
        pending = of.alias(t, keep, copy=True)
        self._seen[id(t)] = (weakref.ref(t), pending)
        return pending


def resolve(tracked: list[Pending]) -> dict[int, GradStats]:
    """Every pending statistic to floats in one go: one stack and one ``tolist`` per device (a stack of
    mixed float dtypes promotes to the widest, which holds every value exactly). Returns
    ``id(pending) -> GradStats``."""
    unique = list({id(t): t for t in tracked}.values())
    groups: dict[torch.device, list[Pending]] = {}
    for t in unique:  # a gradient's four statistics share its device: one read per gradient
        groups.setdefault(t.stats[0].device, []).append(t)
    out: dict[int, GradStats] = {}
    for members in groups.values():
        numbers: list[float] = torch.stack([s for t in members for s in t.stats]).tolist()
        for k, t in enumerate(members):
            out[id(t)] = t.resolve(numbers[4 * k: 4 * k + 4])
    return out

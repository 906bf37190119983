"""Timing for the overhead table: interleaved rounds, minimum process CPU time (see :mod:`gradviz_nb.bench`)."""

from __future__ import annotations

import gc
import importlib.util
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Row:
    """One line of the table: ``feature`` against ``plain`` (minimum seconds), or why it was skipped."""

    model: str
    feature: str
    plain: str
    t_feature: float = math.nan
    t_plain: float = math.nan
    goal: str = ""
    skipped: str = ""
    peers: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.t_feature / self.t_plain


def _once(fn: Callable[[], object], before: Callable[[], object] | None) -> float:
    if before is not None:
        before()
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        fn()
        return time.process_time() - t0
    finally:
        gc.enable()


def interleaved(variants: dict[str, Callable[[], object]], reps: int,
                before: Callable[[], object] | None = None) -> dict[str, float]:
    """Minimum process CPU time of each variant over ``reps`` rounds; each round runs every variant once, the
    order rotating from round to round. One warm-up round first (not timed). ``before`` runs untimed
    before every call (e.g. clearing ``.grad``)."""
    keys = list(variants)
    for k in keys:
        _once(variants[k], before)
    best = dict.fromkeys(keys, math.inf)
    for r in range(reps):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            best[k] = min(best[k], _once(variants[k], before))
    return best


def available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None

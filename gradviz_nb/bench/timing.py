"""Timing for the overhead table: interleaved rounds of process CPU time (see :mod:`gradviz_nb.bench`).

A ratio is the median over rounds of feature / plain, both timed in the same round: this machine's
speed drifts over seconds (another VM on the host), and the ratio of two minima taken at different
moments swung 0.99-1.18 over four consecutive blocks of 31 rounds of ``gv.trace`` against ``make_dot``
in one process, where the median of the paired ratios stayed at 0.94-0.98. Times shown are minima."""

from __future__ import annotations

import gc
import importlib.util
import math
import statistics
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
    paired: float = math.nan  # the median of per-round ratios, when both were timed in the same rounds
    low: float = math.nan  # over several full runs (combine): the lowest and highest run's ratio
    high: float = math.nan
    runs: int = 1  # how many full runs the ratio is the median of

    @property
    def ratio(self) -> float:
        """Feature / plain: the median of paired per-round ratios when timed so, else the ratio of the minima."""
        return self.paired if not math.isnan(self.paired) else self.t_feature / self.t_plain


def combine(runs: list[list[Row]]) -> list[Row]:
    """Several full runs' tables as one: each row's ratio is the median of the runs' ratios, with their
    lowest and highest beside it (``low``, ``high``); times are the median of the runs' minima. Rows are
    matched by model and feature, in the first run's order; a row skipped in any run stays skipped."""
    if not runs:
        return []
    out: list[Row] = []
    for first in runs[0]:
        same = [r for run in runs for r in run if (r.model, r.feature) == (first.model, first.feature)]
        skipped = next((r.skipped for r in same if r.skipped), "")
        ratios = [r.ratio for r in same if not math.isnan(r.ratio)]
        if skipped or not ratios:
            out.append(Row(first.model, first.feature, first.plain, goal=first.goal,
                           skipped=skipped or "no ratio measured", runs=len(same)))
            continue
        out.append(Row(first.model, first.feature, first.plain, statistics.median(r.t_feature for r in same),
                       statistics.median(r.t_plain for r in same), first.goal, peers=first.peers,
                       paired=statistics.median(ratios), low=min(ratios), high=max(ratios), runs=len(same)))
    return out


@dataclass
class Timings:
    """Every round's time of each variant (``t["x"]``: the minimum)."""

    runs: dict[str, list[float]]

    def __getitem__(self, key: str) -> float:
        return min(self.runs[key])

    def __contains__(self, key: str) -> bool:
        return key in self.runs

    def ratio(self, feature: str, plain: str) -> float:
        """The median over rounds of ``feature / plain`` (both timed in the same round)."""
        pairs = [f / p for f, p in zip(self.runs[feature], self.runs[plain], strict=True) if p > 0]
        return statistics.median(pairs) if pairs else math.nan

    def row(self, model: str, feature: str, plain: str, key: str, plain_key: str, goal: str = "") -> Row:
        """A table row from two variants' timings: their minima and the paired median ratio."""
        return Row(model, feature, plain, self[key], self[plain_key], goal, paired=self.ratio(key, plain_key))


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
                before: Callable[[], object] | None = None) -> Timings:
    """Process CPU time of each variant in each of ``reps`` rounds; each round runs every variant once, the
    order rotating from round to round. One warm-up round first (not timed). ``before`` runs untimed
    before every call (e.g. clearing ``.grad``)."""
    keys = list(variants)
    for k in keys:
        _once(variants[k], before)
    runs: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(reps):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            runs[k].append(_once(variants[k], before))
    return Timings(runs)


def available(module: str) -> bool:
    """Whether ``module`` can be imported (a peer that is not installed is reported as skipped)."""
    return importlib.util.find_spec(module) is not None

"""Draw mutants from a seed, measure their truth, run the doctor, and tally the score."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from random import Random

import torch

from gradviz_nb.bugzoo.mutants import FAMILIES, HOSTS
from gradviz_nb.bugzoo.mutants.score import Score, doctor_built, judge
from gradviz_nb.bugzoo.mutants.split import half
from gradviz_nb.bugzoo.mutants.truth import Truth, measure
from gradviz_nb.bugzoo.mutants.why_score import WhyScore, score_why

__all__ = ["RESULTS", "Result", "Run", "run"]

RESULTS = Path(__file__).with_name("results.json")


@dataclass
class Result:
    index: int
    family: str
    host: str
    seed: int
    truth: Truth
    score: Score
    why: WhyScore = field(default_factory=WhyScore)


@dataclass
class Run:
    seed: int
    results: list[Result] = field(default_factory=list)
    no_effect: list[str] = field(default_factory=list)  # mutants whose truth shows nothing: discarded
    loud: list[str] = field(default_factory=list)  # mutants whose step raises: discarded (not silent)
    no_site: int = 0
    seconds: float = 0.0
    recipes: dict[str, object] = field(default_factory=dict)  # the healthy recipes: count, clean, alarms

    def tally(self, key: Callable[[Result], str]) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for r in self.results:
            named, total = out.get(key(r), (0, 0))
            out[key(r)] = (named + r.score.named, total + 1)
        return dict(sorted(out.items()))

    def why_tally(self, key: Callable[[Result], str]) -> dict[str, list[int]]:
        """``key -> [why right, parameters asked, proofs right, proofs tried]`` (:mod:`.why_score`)."""
        out: dict[str, list[int]] = {}
        for r in self.results:
            row = out.setdefault(key(r), [0, 0, 0, 0])
            for i, v in enumerate((r.why.right, r.why.params, r.why.proven, r.why.proofs)):
                row[i] += v
        return dict(sorted(out.items()))

    @property
    def named(self) -> int:
        return sum(r.score.named for r in self.results)

    def summary(self) -> dict[str, object]:
        """What the README block and the test compare: counts only, per family, per host and per half
        (:mod:`.split`: the original families, the tuned half and the held-out half of the later ones)."""
        return {"seed": self.seed, "mutants": len(self.results), "named": self.named,
                "discarded_no_effect": len(self.no_effect), "discarded_loud": len(self.loud),
                "families": {k: list(v) for k, v in self.tally(lambda r: r.family).items()},
                "hosts": {k: list(v) for k, v in self.tally(lambda r: r.host).items()},
                "halves": {k: list(v) for k, v in self.tally(lambda r: half(r.family)).items()},
                "half_of": {k: half(k) for k in sorted({r.family for r in self.results})},
                "why": {"halves": self.why_tally(lambda r: half(r.family)),
                        "families": self.why_tally(lambda r: r.family)},
                **({"recipes": self.recipes} if self.recipes else {})}

    def save(self, path: Path = RESULTS) -> None:
        path.write_text(json.dumps(self.summary(), indent=1) + "\n", encoding="utf-8")


Draw = tuple[str, str, int, str, "Truth | None", "Score | None", "WhyScore | None"]
# family, host, seed, label, truth, the doctor's score, why's score


def _draw(seed: int, i: int, family: str | None, host: str | None) -> Draw | None:
    """Draw ``i`` of a run: its mutant, its truth, and the doctor's score when it has an effect."""
    fams = [f for f in FAMILIES.values() if family in (None, f.name)]
    hosts = [h for h in HOSTS if host in (None, h)]
    rng = Random(seed * 1_000_003 + i)
    fam = fams[i % len(fams)]
    pool = [h for h in hosts if not fam.hosts or h in fam.hosts]
    if not pool:
        return None
    host_name, mseed = rng.choice(pool), rng.randrange(2**31)
    truth = measure(fam, host_name, mseed)
    label = f"#{i} {fam.name} on {host_name} (seed {mseed})"
    if truth is None or truth.error or not truth.affected:
        return fam.name, host_name, mseed, label, truth, None, None
    try:
        dx, built = doctor_built(fam, host_name, mseed)
    except Exception as err:  # the doctor crashing on a mutant is a miss, shown with its error
        score = Score(False, sorted(truth.affected), [], f"doctor raised {type(err).__name__}: {err}")
        return fam.name, host_name, mseed, label, truth, score, WhyScore(params=len(truth.affected))
    score = judge(fam, truth, dx)
    try:
        whys = score_why(fam, truth, dx, built.setup)
    except Exception as err:  # gv.why crashing is every answer wrong, shown with its error
        whys = WhyScore(params=len(truth.affected), wrong=[f"gv.why raised {type(err).__name__}: {err}"])
    return fam.name, host_name, mseed, label, truth, score, whys


def _draw_args(args: tuple[int, int, str | None, str | None]) -> Draw | None:
    return _draw(*args)


def _one_thread() -> None:
    torch.set_num_threads(1)  # workers share the cores: one thread each, no oversubscription


def run(seed: int, n: int, family: str | None = None, host: str | None = None,
        progress: Callable[[Result], None] | None = None, recipes: bool = False, jobs: int = 1) -> Run:
    """Draw mutants until ``n`` have an effect (at most ``4 n`` draws), each scored against the doctor;
    ``recipes``: also run the healthy recipe zoo (every finding there is a false alarm); ``jobs``: worker
    processes (draws are independent, and taken in order, so the result does not depend on it)."""
    out = Run(seed)
    t0 = time.perf_counter()
    todo = iter(range(4 * n))
    pool = multiprocessing.get_context("spawn").Pool(jobs, _one_thread) if jobs > 1 else None
    try:
        while len(out.results) < n:
            batch = [(seed, i, family, host) for i in itertools.islice(todo, max(1, 2 * jobs))]
            if not batch:
                break
            drawn = pool.map(_draw_args, batch) if pool is not None else [_draw_args(b) for b in batch]
            for (_, i, _, _), d in zip(batch, drawn, strict=True):
                if len(out.results) >= n:
                    break
                _take(out, i, d, progress)
    finally:
        if pool is not None:
            pool.close()
    if recipes:
        from gradviz_nb.bugzoo.recipes.run import run_recipes

        done = run_recipes()
        out.recipes = {"recipes": len(done), "clean": sum(r.clean for r in done),
                       "alarms": sorted(r.name for r in done if not r.clean)}
    out.seconds = time.perf_counter() - t0
    return out


def _take(out: Run, i: int, d: Draw | None, progress: Callable[[Result], None] | None) -> None:
    if d is None:
        return
    fam, host_name, mseed, label, truth, score, whys = d
    if truth is None:
        out.no_site += 1
    elif truth.error:
        out.loud.append(f"{label}: {truth.site}: {truth.error}")
    elif score is None:
        out.no_effect.append(f"{label}: {truth.site}")
    else:
        result = Result(i, fam, host_name, mseed, truth, score, whys or WhyScore())
        out.results.append(result)
        if progress is not None:
            progress(result)

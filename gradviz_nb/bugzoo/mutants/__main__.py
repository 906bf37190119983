"""``python -m gradviz_nb.bugzoo.mutants --seed 0 --n 240 [--family F] [--host H] [--status PATH] [--save] [--jobs J]``

Prints the score per family and per host, then every miss: the doctor's findings next to the truth.
``--status PATH`` writes the same as Markdown; ``--save`` (a full run only) writes ``results.json``,
which the README's bug-zoo block reads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gradviz_nb.bugzoo.mutants import FAMILIES, HOSTS
from gradviz_nb.bugzoo.mutants.runner import Result, Run, run
from gradviz_nb.bugzoo.mutants.split import half

__all__ = ["main", "report"]


def _names(names: set[str] | list[str], most: int = 6) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:most]) + (f" (+{len(ordered) - most} more)" if len(ordered) > most else "")


def truth_text(r: Result) -> str:
    by: dict[str, set[str]] = {}
    for name in r.truth.affected:
        by.setdefault(r.truth.statuses[name], set()).add(name)
    return "; ".join(f"{s}: {_names(ns)}" for s, ns in sorted(by.items()))


def _table(title: str, rows: dict[str, tuple[int, int]]) -> list[str]:
    out = [f"| {title} | named | mutants | |", "|---|---|---|---|"]
    for key, (named, total) in rows.items():
        out.append(f"| {key} | {named} | {total} | {100 * named / total:.0f}% |")
    return out


def _why_table(title: str, rows: dict[str, list[int]]) -> list[str]:
    out = [f"| {title} | gv.why right | parameters | | prove() right | mechanical fixes | |",
           "|---|---|---|---|---|---|---|"]
    for key, (right, params, proven, proofs) in rows.items():
        out.append(f"| {key} | {right} | {params} | {100 * right / max(params, 1):.0f}% | {proven} | {proofs} | "
                   f"{f'{100 * proven / proofs:.0f}%' if proofs else '-'} |")
    return out


def report(result: Run, args: str) -> str:
    """The whole run as Markdown: score, per-family and per-host tables, discards, every miss."""
    n = len(result.results)
    lines = [f"# Mutants: `python -m gradviz_nb.bugzoo.mutants {args}`", "",
             f"**Named {result.named}/{n} ({100 * result.named / max(n, 1):.1f}%)**; discarded: "
             f"{len(result.no_effect)} with no effect in PyTorch, {len(result.loud)} whose step raises; "
             f"{result.no_site} draws had no site; {result.seconds:.0f} s.", ""]
    if result.recipes:
        alarms = ", ".join(map(str, result.recipes["alarms"])) if isinstance(result.recipes["alarms"], list) else ""
        lines += [f"Healthy recipes without a finding: {result.recipes['clean']}/{result.recipes['recipes']}; "
                  f"with a false alarm: {alarms or 'none'}.", ""]
    lines += [*_table("half", result.tally(lambda r: half(r.family))), ""]
    lines += [*_table("family", result.tally(lambda r: f"{r.family} ({half(r.family)})")), ""]
    lines += [*_table("host", result.tally(lambda r: r.host)), ""]
    lines += ["## gv.why and prove() on every affected parameter (status, cause, line; a mechanical fix proven "
              "and giving the host's gradient)", ""]
    lines += [*_why_table("half", result.why_tally(lambda r: half(r.family))), ""]
    lines += [*_why_table("family", result.why_tally(lambda r: f"{r.family} ({half(r.family)})")), "", "## Misses", ""]
    for r in result.results:
        if r.score.named:
            continue
        lines += [f"- **#{r.index} {r.family}** on **{r.host}** (seed {r.seed}): `{r.truth.site}`",
                  f"  - truth: {truth_text(r)}",
                  f"  - doctor: {r.score.summary[:600]}"]
        if r.score.missing:
            lines.append(f"  - not covered by a {'/'.join(sorted(FAMILIES[r.family].kinds))} finding: "
                         f"{_names(r.score.missing)}")
        lines += [f"  - false: {x}" for x in r.score.false]
    lines += ["", "## gv.why and prove() wrong", ""]
    for r in result.results:
        if r.why.wrong:
            lines.append(f"- **#{r.index} {r.family}** on **{r.host}**: `{r.truth.site}`")
            lines += [f"  - {x}" for x in r.why.wrong[:6]]
            if len(r.why.wrong) > 6:
                lines.append(f"  - (+{len(r.why.wrong) - 6} more)")
    lines += ["", "## Discarded", ""] + [f"- no effect: {x}" for x in result.no_effect]
    lines += [f"- loud: {x}" for x in result.loud]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m gradviz_nb.bugzoo.mutants")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=240)
    p.add_argument("--family", choices=sorted(FAMILIES))
    p.add_argument("--host", choices=sorted(HOSTS))
    p.add_argument("--status", type=Path, help="write the Markdown report here too")
    p.add_argument("--save", action="store_true", help="write results.json (full runs only)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (the result does not depend on it)")
    a = p.parse_args(argv)

    def progress(r: Result) -> None:
        print(f"{'ok  ' if r.score.named else 'MISS'} #{r.index} {r.family} on {r.host}: {r.truth.site}",
              flush=True)

    full = a.family is None and a.host is None
    result = run(a.seed, a.n, a.family, a.host, progress, recipes=full and a.save, jobs=a.jobs)
    text = report(result, " ".join(argv))
    print(text)
    if a.status is not None:
        a.status.write_text(text, encoding="utf-8")
    if a.save and full:
        result.save()
    return 0 if result.named == len(result.results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``python -m gradviz_nb.bugzoo [--markdown] [name ...]``: run the zoo and print case, expected, got.

``--markdown`` prints the same table as Markdown; ``--readme`` runs the whole zoo and rewrites the README's
copy (between its markers). The zoo's test compares that copy with the outcomes it saw.
"""

from __future__ import annotations

import json
import re
import sys
import time
import traceback
from pathlib import Path

import torch

from gradviz_nb.bugzoo import Case, Outcome, all_cases


def _run(case: Case) -> tuple[str, Outcome | None, float]:
    missing = case.missing()
    if missing:
        return f"skipped (needs {', '.join(missing)})", None, 0.0
    t0 = time.perf_counter()
    try:
        out = case.run()
    except Exception as err:  # a crash is a failed case, shown as such
        traceback.print_exc()
        return f"CRASH {type(err).__name__}: {err}", None, time.perf_counter() - t0
    return ("ok" if out.passed else "FAIL"), out, time.perf_counter() - t0


_PATH = re.compile(r"(?:[A-Za-z]:)?[/\\][^\s:'\"]*?[/\\](?=(?:gradviz_nb|torch|site-packages)[/\\])")


def _cell(text: str, width: int = 110) -> str:
    """One table cell: no machine paths (a file is named from its package down), no pipes, one line."""
    text = _PATH.sub("", text).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def markdown_table(results: list[tuple[Case, Outcome | None, str]]) -> str:
    """The README's zoo block from each case's outcome (``None`` and a status when it did not run)."""
    lines = ["| case | bug class | expected (from PyTorch) | got | |", "|---|---|---|---|---|"]
    for case, out, status in results:
        if out is None:
            lines.append(f"| {case.name} | {case.group} | | {_cell(status)} | |")
            continue
        got = out.got + ("; false alarms: " + ", ".join(out.false_alarms) if out.false_alarms else "")
        lines.append(f"| {case.name} | {case.group} | {_cell(out.expected)} | {_cell(got)} | "
                     f"{'ok' if out.passed else 'FAIL'} |")
    bugs = [out for case, out, _ in results if not case.healthy and out is not None]
    healthy = [out for case, out, _ in results if case.healthy and out is not None]
    score = (f"**Bugs named: {sum(o.passed for o in bugs)}/{len(bugs)}. Healthy models without a false alarm: "
             f"{sum(o.passed for o in healthy)}/{len(healthy)}.** (torch {torch.__version__.split('+')[0]} CPU; "
             "`python -m gradviz_nb.bugzoo --readme` rewrites this block, and the zoo's test fails when it is "
             "stale)")
    summary = ("<details><summary>The whole table: case, bug class, what PyTorch's truth says must be reported, "
               "what was reported</summary>")
    return "\n".join([score, "", mutants_line(), "", summary, "", *lines, "", "</details>"])


def mutants_line(path: Path | None = None) -> str:
    """The generator's score beside the hand zoo's, from the counts ``python -m gradviz_nb.bugzoo.mutants
    --save`` wrote (too slow to run here; ``tests/unit/bugzoo/test_mutants.py`` reruns and compares them)."""
    from gradviz_nb.bugzoo.mutants.runner import RESULTS

    path = path or RESULTS
    if not path.exists():
        return "**Mutants: not run** (`python -m gradviz_nb.bugzoo.mutants --seed 0 --n 240 --save`)"
    r = json.loads(path.read_text(encoding="utf-8"))
    n, named = r["mutants"], r["named"]
    halves = r.get("halves", {})
    classes = {h: sum(1 for v in r.get("half_of", {}).values() if v == h) for h in halves}

    def part(h: str, words: str) -> str:
        ok, total = halves.get(h, (0, 0))
        return f"{words} ({classes.get(h, 0)} classes) {ok}/{total} ({100 * ok / max(total, 1):.0f}%)"

    split = ("; by half (classes split by a hash of their name before any rule was written for them, rules "
             f"tuned on one half only): {part('original', 'the original families')}, "
             f"{part('tuned', 'tuned half')}, **{part('held-out', 'held-out half')}**") if halves else ""
    return (f"**Mutants named: {named}/{n} ({100 * named / max(n, 1):.0f}%)**: bugs planted by "
            f"{len(r['families'])} mechanism classes at seeded random sites of {len(r['hosts'])} host models "
            f"(seed {r['seed']}), each mutant's truth measured in PyTorch against its unmutated host{split}; "
            f"discarded: {r['discarded_no_effect']} drawn mutants with no effect, {r['discarded_loud']} whose step "
            "raises (a loud bug). " + _why_line(r.get("why")) + _recipes_line(r.get("recipes")) +
            f"`python -m gradviz_nb.bugzoo.mutants --seed {r['seed']} --n {n} --save` rewrites these counts.")


def _why_line(why: dict[str, dict[str, list[int]]] | None) -> str:
    """``gv.why`` (status, cause and line right) and ``prove()`` (a mechanical fix proven, giving the unmutated
    host's gradient) on every affected parameter of the same mutants, per half."""
    halves = (why or {}).get("halves") or {}
    if not halves:
        return ""

    def part(h: str) -> str:
        ok, n, proved, fixes = halves.get(h, [0, 0, 0, 0])
        return (f"{h} {ok}/{n} ({100 * ok / max(n, 1):.0f}%; prove() {proved}/{fixes})"
                if h in halves else "")

    return ("On the same mutants, `gv.why` right (status, cause and line) on every affected parameter: "
            + ", ".join(p for p in (part("original"), part("tuned"), part("held-out")) if p) + ". ")


def _recipes_line(rec: dict[str, object] | None) -> str:
    if not rec:
        return ""
    alarms = rec.get("alarms") or []
    assert isinstance(alarms, list)
    return (f"**Healthy training recipes without a finding: {rec['clean']}/{rec['recipes']}** (SSL, contrastive, "
            "adversarial, distillation, RL, VQ, diffusion, MoE, adapters, schedules, frozen backbones, AMP, "
            "accumulation, EMA teachers: `python -m gradviz_nb.bugzoo.recipes`)"
            + (f"; false alarms on: {', '.join(map(str, alarms))}. " if alarms else ". "))


START = "<!-- bug-zoo table: generated by python -m gradviz_nb.bugzoo --readme -->"
END = "<!-- end of the bug-zoo table -->"


def readme_block(text: str) -> str:
    """The generated block of a README's text (between the markers)."""
    if START not in text or END not in text:
        return ""
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def with_block(text: str, block: str) -> str:
    head, rest = text.split(START, 1)
    return f"{head}{START}\n{block}\n{END}{rest.split(END, 1)[1]}"


def _results(cases: list[Case]) -> list[tuple[Case, Outcome | None, str]]:
    out = []
    for c in cases:
        status, outcome, _ = _run(c)
        out.append((c, outcome, status))
    return out


def markdown(cases: list[Case]) -> int:
    results = _results(cases)
    print(markdown_table(results))
    return 0 if all(o is not None and o.passed for _, o, _ in results) else 1


def write_readme(path: Path) -> int:
    """Run the whole zoo and rewrite the README's block."""
    results = _results(all_cases())
    path.write_text(with_block(path.read_text(encoding="utf-8"), markdown_table(results)), encoding="utf-8")
    print(f"rewrote the bug-zoo table in {path}")
    return 0 if all(o is not None and o.passed for _, o, _ in results) else 1


def main(argv: list[str]) -> int:
    names = [a for a in argv if not a.startswith("--")]
    cases = [c for c in all_cases() if not names or c.name in names]
    if "--markdown" in argv:
        return markdown(cases)
    if "--readme" in argv:
        return write_readme(Path(__file__).resolve().parents[2] / "README.md")
    bugs_named = bugs = healthy_clean = healthy = 0
    failed = False
    print(f"{'case':34} {'group':14} {'status':7} expected | got")
    for case in cases:
        status, out, secs = _run(case)
        if out is None:
            print(f"{case.name:34} {case.group:14} {status}")
            failed |= status.startswith("CRASH")
            continue
        print(f"{case.name:34} {case.group:14} {status:7} {out.expected} | {out.got}  ({secs:.1f} s)")
        for alarm in out.false_alarms:
            print(f"{'':57}false alarm: {alarm}")
        if case.healthy:
            healthy += 1
            healthy_clean += out.passed
        else:
            bugs += 1
            bugs_named += out.passed
        failed |= not out.passed
    print(f"\nbugs named: {bugs_named}/{bugs}; healthy models without a false alarm: {healthy_clean}/{healthy}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``python -m gradviz_nb.bugzoo [--markdown] [name ...]``: run the zoo and print case, expected, got.

``--markdown`` prints the same table as Markdown (the README's copy is made this way).
"""

from __future__ import annotations

import sys
import time
import traceback

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


def _cell(text: str, width: int = 110) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def markdown(cases: list[Case]) -> int:
    rows = [(c, *_run(c)) for c in cases]
    print("| case | bug class | expected (from PyTorch) | got | |\n|---|---|---|---|---|")
    for case, status, out, _ in rows:
        if out is None:
            print(f"| {case.name} | {case.group} | | {_cell(status)} | |")
            continue
        got = out.got + ("; false alarms: " + ", ".join(out.false_alarms) if out.false_alarms else "")
        print(f"| {case.name} | {case.group} | {_cell(out.expected)} | {_cell(got)} | {status} |")
    bugs = [r for r in rows if not r[0].healthy and r[2] is not None]
    healthy = [r for r in rows if r[0].healthy and r[2] is not None]
    print(f"\nBugs named: {sum(r[2].passed for r in bugs)}/{len(bugs)}. "  # type: ignore[union-attr]
          f"Healthy models without a false alarm: {sum(r[2].passed for r in healthy)}/{len(healthy)}.")  # type: ignore[union-attr]
    return 0 if all(r[2] is not None and r[2].passed for r in rows) else 1


def main(argv: list[str]) -> int:
    names = [a for a in argv if not a.startswith("--")]
    cases = [c for c in all_cases() if not names or c.name in names]
    if "--markdown" in argv:
        return markdown(cases)
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

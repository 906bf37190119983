"""``python -m gradviz_nb.bugzoo.recipes [NAME ...]``: run the healthy recipes, print each one's findings."""

from __future__ import annotations

import sys

from gradviz_nb.bugzoo.recipes.run import run_recipes


def main(argv: list[str]) -> int:
    results = run_recipes(argv or None)
    for r in results:
        print(f"{'ok   ' if r.clean else 'ALARM'} {r.name} ({r.source})")
        for line in ([r.error] if r.error else []) + r.findings:
            print(f"      {line[:300]}")
    clean = sum(r.clean for r in results)
    print(f"\n{clean}/{len(results)} recipes without a finding")
    return 0 if clean == len(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

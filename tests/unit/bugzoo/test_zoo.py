"""The bug zoo under pytest: every bug named with the right kind and target, no flag on a healthy model.

Each case computes its own PyTorch truth when it runs (see ``gradviz_nb/bugzoo/case.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gradviz_nb.bugzoo import Case, Outcome, all_cases
from gradviz_nb.bugzoo.__main__ import markdown_table, readme_block

CASES = all_cases()
README = Path(__file__).resolve().parents[3] / "README.md"
SEEN: dict[str, Outcome] = {}  # each case's outcome in this run, for the README check at the end


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case) -> None:
    missing = case.missing()
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    out = case.run()
    SEEN[case.name] = out
    assert out.ok, f"{case.name}: expected {out.expected}, got {out.got}"
    assert not out.false_alarms, f"{case.name}: false alarms {list(out.false_alarms)}"


def test_zoo_has_every_group() -> None:
    assert sum(c.healthy for c in CASES) >= 12
    assert len({c.name for c in CASES}) == len(CASES)


def _masked(text: str) -> str:
    return re.sub(r"\d+\.\d+(?:e[+-]?\d+)?", "#.#", text)


def test_readme_table_is_the_zoos_own() -> None:
    """Runs after every case (pytest keeps a module's order): the README's table is what this run saw."""
    if len(SEEN) != len(CASES):
        pytest.skip(f"only {len(SEEN)} of {len(CASES)} cases ran here (a -k selection or a missing package)")
    table = markdown_table([(c, SEEN[c.name], "ok") for c in CASES])
    assert "/work/" not in table and "/root/" not in table and "/home/" not in table
    # decimals (relative errors near 1e-8, losses) may differ in the last digit on another CPU; counts may not
    assert _masked(readme_block(README.read_text(encoding="utf-8"))) == _masked(table), (
        "README's bug-zoo table is stale: run python -m gradviz_nb.bugzoo --readme and commit README.md")

"""The bug zoo under pytest: every bug named with the right kind and target, no flag on a healthy model.

Each case computes its own PyTorch truth when it runs (see ``gradviz_nb/bugzoo/case.py``).
"""

from __future__ import annotations

import pytest

from gradviz_nb.bugzoo import Case, all_cases

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case) -> None:
    missing = case.missing()
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    out = case.run()
    assert out.ok, f"{case.name}: expected {out.expected}, got {out.got}"
    assert not out.false_alarms, f"{case.name}: false alarms {list(out.false_alarms)}"


def test_zoo_has_every_group() -> None:
    assert sum(c.healthy for c in CASES) >= 12
    assert len({c.name for c in CASES}) == len(CASES)

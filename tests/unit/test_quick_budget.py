"""The quick tier's CPU budget (tests/budget.py, tests/conftest.py): the verdict on a run, which runs it
judges, and the list of tests moved to the slow tier to stay under it."""

from __future__ import annotations

import re
from pathlib import Path

import budget

TESTS = Path(__file__).resolve().parents[1]


def test_over_budget_names_the_costliest_tests_in_order() -> None:
    costs = {"test_a.py::cheap": 0.1, "test_b.py::dear[x]": 9.0, "test_c.py::middling": 3.0}
    assert budget.over_budget(119.0, costs, budget_s=120) is None
    message = budget.over_budget(150.0, costs, budget_s=120, shown=2)
    assert message is not None and "150.0 s" in message and "by 30.0 s" in message
    named = re.findall(r"s  (\S+)$", message, re.M)
    assert named == ["test_b.py::dear[x]", "test_c.py::middling"], message


def test_only_a_run_of_the_whole_quick_tier_is_judged() -> None:
    assert budget.whole_quick_tier("not slow", "", [], TESTS)
    assert budget.whole_quick_tier(" not slow ", "", [str(TESTS)], TESTS)
    assert budget.whole_quick_tier("not slow", "", [str(TESTS.parent)], TESTS)
    assert not budget.whole_quick_tier("", "", [], TESTS)
    assert not budget.whole_quick_tier("not slow", "doctor", [], TESTS)
    assert not budget.whole_quick_tier("not slow", "", [str(TESTS / "unit" / "test_kinds.py")], TESTS)
    assert not budget.whole_quick_tier("not slow", "", [f"{TESTS}::x"], TESTS)


def test_cpu_seconds_counts_this_process() -> None:
    start = budget.cpu_seconds()
    sum(i * i for i in range(200_000))
    assert budget.cpu_seconds() > start


def test_every_test_moved_for_the_budget_exists(tmp_path: Path) -> None:
    listed = budget.moved(TESTS / "slow_tests.txt")
    assert listed, "tests/slow_tests.txt lists the tests moved to the slow tier"
    files = {p.name: p for p in TESTS.rglob("test_*.py")}
    for entry in listed:
        file, _, name = entry.partition("::")
        assert file in files, f"{entry}: no test file {file}"
        assert f"def {name.split('[')[0]}(" in files[file].read_text(encoding="utf-8"), f"{entry}: no such test"
    sample = tmp_path / "moved.txt"
    sample.write_text("# a comment\n\ntest_x.py::test_y[1]   2.5\n  test_x.py::test_z 1.0\n", encoding="utf-8")
    assert budget.moved(sample) == {"test_x.py::test_y[1]", "test_x.py::test_z"}
    assert budget.moved(tmp_path / "absent.txt") == frozenset()

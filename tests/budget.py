"""The quick tier's CPU budget: what each test cost, and the verdict on the whole run.

``tests/conftest.py`` records every test's process CPU (user + system, this process and the child
processes it waited for: notebook kernels, subprocesses) around its setup, call and teardown, and at the
end of a run of the whole quick tier (``pytest -m "not slow"``) compares the process's total CPU with
``BUDGET_S``. Over budget, the run fails and names the costliest tests: move them to the slow tier (a line in
``tests/slow_tests.txt``, read by :func:`moved`) or make them cheaper; never delete the coverage. The costs of
the last run are kept in pytest's cache (``.pytest_cache``, key ``gradviz/cpu``): ``pytest --cache-show gradviz/cpu``.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping, Sequence
from pathlib import Path

BUDGET_S = 120.0  # process CPU of `pytest -m "not slow"`, interpreter start to the last test
QUICK_MARKEXPR = "not slow"
SHOWN = 12  # the costliest tests named when the budget is exceeded


def cpu_seconds() -> float:
    """User + system CPU of this process and of the children it waited for, in seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def moved(path: Path) -> frozenset[str]:
    """The tests listed in ``path`` (``FILE::NAME`` or ``FILE::NAME[PARAMS]``, first word of each line;
    ``#`` comments and blank lines skipped)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return frozenset(line.split()[0] for line in lines if line.strip() and not line.lstrip().startswith("#"))


def whole_quick_tier(markexpr: str, keyword: str, args: Sequence[str], tests_dir: Path) -> bool:
    """Whether a run is the whole quick tier: ``-m "not slow"``, no ``-k``, and no narrower path than
    the tests folder (a run of a few files is not held to the budget)."""
    if markexpr.strip() != QUICK_MARKEXPR or keyword:
        return False
    for arg in args:
        path = Path(arg.split("::")[0]).resolve()
        if "::" in arg or not (path == tests_dir or tests_dir.is_relative_to(path)):
            return False
    return True


def over_budget(total_s: float, costs: Mapping[str, float], budget_s: float = BUDGET_S,
                shown: int = SHOWN) -> str | None:
    """The failure message when ``total_s`` exceeds ``budget_s``, naming the ``shown`` costliest tests
    and how much of the excess each would remove; None within budget."""
    if total_s <= budget_s:
        return None
    worst = sorted(costs.items(), key=lambda kv: (-kv[1], kv[0]))[:shown]
    lines = [
        f"the quick tier used {total_s:.1f} s of process CPU, over its budget of {budget_s:.0f} s "
        f"(by {total_s - budget_s:.1f} s); move the costliest tests to the slow tier (a line each in "
        "tests/slow_tests.txt) or make them cheaper:"
    ]
    lines += [f"  {cost:7.2f} s  {test}" for test, cost in worst]
    return "\n".join(lines)

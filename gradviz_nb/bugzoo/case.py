"""One bug-zoo case: a small runnable scenario, its PyTorch truth, and what the library said about it.

A case's ``run`` builds its model, measures the truth in PyTorch (the gradient that is really ``None``,
the bytes really kept alive, the loss that really turns NaN after one step) and runs the library's
verdicts on the same scenario. It returns an :class:`Outcome`: what the truth says the library must
report (``expected``), what it did report (``got``), whether they agree, and any verdict it printed
that the truth does not back (``false_alarms``). Healthy cases expect no flag at all.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["Case", "Outcome", "flag_outcome"]


@dataclass(frozen=True)
class Outcome:
    """What a case found: ``ok`` when the library named the truth and raised no false alarm."""

    expected: str
    got: str
    ok: bool
    false_alarms: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.ok and not self.false_alarms


@dataclass(frozen=True)
class Case:
    """``name``: short id; ``group``: the bug class (issue wording) or ``"healthy"``; ``needs``: optional
    packages (the case is skipped, and says so, when one is missing)."""

    name: str
    group: str
    run: Callable[[], Outcome]
    needs: tuple[str, ...] = ()
    description: str = field(default="", compare=False)

    @property
    def healthy(self) -> bool:
        return self.group == "healthy"

    def missing(self) -> list[str]:
        return [m for m in self.needs if importlib.util.find_spec(m) is None]


def _fmt(pairs: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{k} {t or '(model)'}" for k, t in sorted(set(pairs))) or "no flag"


def flag_outcome(expected: Iterable[tuple[str, str]], reported: Iterable[tuple[str, str]],
                 allowed: Iterable[tuple[str, str]] = ()) -> Outcome:
    """Compare ``(kind, target)`` flags: every expected one must be reported; any other reported flag
    is a false alarm unless listed in ``allowed`` (also true, but not the point of the case)."""
    exp, rep, ok_extra = set(expected), set(reported), set(allowed)
    alarms = tuple(_fmt([p]) for p in sorted(rep - exp - ok_extra))
    return Outcome(expected=_fmt(exp), got=_fmt(rep), ok=exp <= rep, false_alarms=alarms)

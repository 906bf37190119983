"""What a mutation operator family is: how it edits a plan, and which truth and which doctor kinds it means.

``apply(plan, rng, sites)`` edits the plan at a site drawn from ``rng`` and returns a short description
of what it did (``"layers.1: out.detach()"``), or ``None`` when the host has no site for it.
``prepare`` (optional) edits the host and the mutant alike before ``apply`` (the accumulation count, a
weight-decay term), so the truth compares like with like. ``effects``: the truth statuses
(:mod:`.truth`) that make a parameter *affected*; ``kinds``: the doctor kinds that name the family;
``late``: the effect shows only at the second step (a missing ``zero_grad``); ``hosts``: the only
hosts it applies to (LoRA adapters exist on one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from random import Random

from gradviz_nb.bugzoo.mutants.plan import Plan, Site

__all__ = ["Apply", "Family"]

Apply = Callable[[Plan, Random, list[Site]], "str | None"]


@dataclass(frozen=True)
class Family:
    name: str
    kinds: frozenset[str]
    effects: frozenset[str]
    apply: Apply
    prepare: Callable[[Plan, Random], None] | None = None
    late: bool = False
    hosts: tuple[str, ...] = ()  # the only hosts it has sites on (all when empty)


CUT = frozenset({"none", "zero", "vanished"})


def family(name: str, kind: str, apply: Apply, effects: frozenset[str] = CUT, *,
           prepare: Callable[[Plan, Random], None] | None = None, late: bool = False,
           hosts: tuple[str, ...] = ()) -> Family:
    return Family(name, frozenset({kind}), effects, apply, prepare, late, hosts)

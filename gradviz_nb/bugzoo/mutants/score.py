"""Scoring the doctor against a mutant's truth.

A finding *covers* the parameters its target names: the parameter itself (or a tied alias), every
parameter under a module path, or all of them for ``"(model)"``. A mutant is NAMED when every affected
parameter is covered by a finding of one of its family's kinds, and no finding covers only unaffected
parameters (something false said about a healthy parameter; one whose fate step 1 cannot show, such as
LoRA's A while B is zero, is neither). A finding whose target names no parameter
(an op, a plain attribute such as a kept auxiliary loss) counts as false unless it is of the family's kind.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from gradviz_nb.bugzoo.mutants.family import Family
from gradviz_nb.bugzoo.mutants.truth import TORCH_SEED, Built, Truth, make
from gradviz_nb.doctor import Diagnosis, doctor

__all__ = ["Score", "covered", "doctor_built", "judge", "run_doctor"]


def covered(target: str, universe: set[str], aliases: dict[str, str]) -> set[str]:
    """The parameters a finding's target speaks of."""
    if target in ("", "(model)"):
        return set(universe)
    if target in aliases:
        return {aliases[target]}
    if target in universe:
        return {target}
    prefix = target + "."
    return {aliases.get(n, n) for n in set(universe) | set(aliases) if n.startswith(prefix)} & universe


@dataclass
class Score:
    named: bool
    missing: list[str] = field(default_factory=list)  # affected parameters no right-kind finding covers
    false: list[str] = field(default_factory=list)  # findings about unaffected parameters only
    summary: str = ""


def run_doctor(fam: Family, host_name: str, seed: int) -> Diagnosis:
    """The doctor's diagnosis of the mutant (its state restored afterwards)."""
    return doctor_built(fam, host_name, seed)[0]


def doctor_built(fam: Family, host_name: str, seed: int) -> tuple[Diagnosis, Built]:
    """The doctor's diagnosis of the mutant, and the built mutant it ran on (restored: ``gv.why`` and ``prove()``
    are asked about it next)."""
    built = make(fam, host_name, seed, True)
    assert built is not None
    torch.manual_seed(TORCH_SEED + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return doctor(built.setup.step, built.setup.model, built.setup.optimizer), built


def judge(fam: Family, truth: Truth, dx: Diagnosis) -> Score:
    hits: set[str] = set()
    false = []
    for f in dx.findings:
        params = covered(f.target, truth.universe, truth.aliases)
        if f.kind in fam.kinds:
            hits |= params
        if (params and not params & truth.affected and not params <= truth.unknown) or (
                not params and f.kind not in fam.kinds):
            false.append(f"[{f.kind}] {f.target}: {f.message}")
    missing = sorted(truth.affected - hits)
    lines = [f"[{f.kind}] {f.target}: {f.message}" for f in dx.findings] or ["nothing found"]
    return Score(not missing and not false, missing, false, "; ".join(lines))

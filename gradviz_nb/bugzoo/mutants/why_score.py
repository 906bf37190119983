"""Scoring ``gv.why`` and ``prove()`` against a mutant's truth, parameter by parameter.

For every affected parameter, ``gv.why(diagnosis, name)`` is asked, and is RIGHT when all of these hold:

- *status*: what PyTorch measured for the gradient the step used (:mod:`.truth`): ``none`` -> ``"none"``,
  ``zero`` -> ``"zero"``, ``vanished`` -> ``"tiny"``, ``scaled`` -> ``"scaled"``; a gradient that is there but
  wrong, or right while the parameter does not train (``changed``, ``stuck``, ``update``) -> ``"ok"``;
- *cause*: its kind is one of the family's kinds (the kinds that name the mechanism, as for the doctor);
- *line*: when the truth has lines (the mutation's source lines the mutant ran and the host did not), one of
  the ``file.py:LINE`` the answer cites is one of them. A mutation made before the step has no line to cite.

Every answer whose kind has a mechanical fix (``MECHANICAL``) is then proven: ``prove()`` re-runs the
mutant's loss with the fix, from the RNG state the truth's first step started from. It is RIGHT when the fix
was applied, is proven, and gives the host's gradient (norm within 1e-3 relative): the fix undoes the cut.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field

import torch

from gradviz_nb.bugzoo.mutants.family import Family
from gradviz_nb.bugzoo.mutants.plan import Setup
from gradviz_nb.bugzoo.mutants.truth import TORCH_SEED, Truth
from gradviz_nb.doctor import Diagnosis
from gradviz_nb.doctor.why import Why
from gradviz_nb.doctor.why_prove import MECHANICAL

__all__ = ["EXPECTED", "WhyScore", "cited_lines", "score_why"]

EXPECTED: dict[str, tuple[str, ...]] = {
    "none": ("none",), "zero": ("zero",), "vanished": ("tiny",), "scaled": ("scaled",), "changed": ("ok", "scaled"),
    "stuck": ("ok",), "update": ("ok",)}
"""The statuses gv.why may say for each truth status (a gradient that is there but wrong is no multiple of the
host's: ``"ok"``, or ``"scaled"`` where why measured part of it lost)."""

_LINE = re.compile(r"([\w.\-]+\.py):(\d+)")
CLOSE = 1e-3  # a proof's gradient within this relative distance of the host's is the uncut gradient


@dataclass
class WhyScore:
    """One mutant's why and prove scores: parameters asked, right in status / cause / line (of those whose
    truth has a line) and in all; proofs tried and right; ``wrong``: what was said where it was wrong."""

    params: int = 0
    status: int = 0
    cause: int = 0
    lines: int = 0
    line: int = 0
    right: int = 0
    proofs: int = 0
    proven: int = 0
    wrong: list[str] = field(default_factory=list)


def cited_lines(text: str) -> set[str]:
    """Every ``file.py:LINE`` a text cites, as ``basename:LINE``."""
    return {f"{os.path.basename(m.group(1))}:{m.group(2)}" for m in _LINE.finditer(text)}


def score_why(fam: Family, truth: Truth, dx: Diagnosis, setup: Setup | None) -> WhyScore:
    """Ask gv.why (and prove() where the fix is mechanical) about every affected parameter (module docstring)."""
    out = WhyScore()
    for name in sorted(truth.affected):
        w = dx.why(name)
        out.params += 1
        status_ok = w.status in EXPECTED.get(truth.statuses[name], ("ok",))
        cause_ok = w.kind in fam.kinds
        line_ok = True
        if truth.lines:
            out.lines += 1
            line_ok = bool(cited_lines(f"{w.cause} {w.evidence}") & truth.lines)
            out.line += line_ok
        out.status += status_ok
        out.cause += cause_ok
        out.right += status_ok and cause_ok and line_ok
        if not (status_ok and cause_ok and line_ok):
            out.wrong.append(f"why {name}: {w.status} [{w.kind}] {w.cause[:160]} (truth: {truth.statuses[name]}"
                             f"{', lines ' + ', '.join(sorted(truth.lines)[:4]) if truth.lines else ''})")
        if w.kind in MECHANICAL and setup is not None and setup.loss is not None:
            out.proofs += 1
            right, text = _prove(w, setup, truth.host_norms.get(name))
            out.proven += right
            if not right:
                out.wrong.append(f"prove {name}: {text[:240]}")
    return out


def _prove(w: Why, setup: Setup, host: float | None) -> tuple[bool, str]:
    torch.manual_seed(TORCH_SEED + 1)  # the RNG state the truth's first step started from
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            proof = w.prove(fn=setup.loss, model=setup.model)
        except Exception as err:  # prove() raising is a wrong proof, shown with its error
            return False, f"prove() raised {type(err).__name__}: {err}"
    if not proof.proven:
        return False, proof.text()
    if host is not None and proof.after is not None and abs(proof.after - host) > CLOSE * max(host, 1e-30):
        return False, f"{proof.text()}; the host's gradient norm is {host:.4g}"
    return True, proof.text()

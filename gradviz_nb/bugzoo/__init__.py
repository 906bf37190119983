"""The bug zoo: classic training bugs and healthy models, each checked against PyTorch's own behaviour.

``python -m gradviz_nb.bugzoo`` prints the table (case, expected, got) and exits non-zero unless every
bug is named and no healthy model gets a flag. ``tests/unit/bugzoo/`` runs the same cases under pytest.
Cases live in one module per area; each module has a ``CASES`` list.
"""

from __future__ import annotations

import importlib

from gradviz_nb.bugzoo.case import Case, Outcome, flag_outcome

__all__ = ["Case", "Outcome", "all_cases", "flag_outcome"]

AREAS = ("flow", "monitor", "memory", "diff", "errors", "doctor", "steps", "gradcheck", "nonfinite", "healthy",
         "amp_compile", "causes", "measured", "used")


def all_cases() -> list[Case]:
    """Every case, area by area (``gradviz_nb.bugzoo.cases_<area>``)."""
    out: list[Case] = []
    for area in AREAS:
        out += importlib.import_module(f"gradviz_nb.bugzoo.cases_{area}").CASES
    return out

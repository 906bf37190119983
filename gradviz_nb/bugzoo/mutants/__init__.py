"""Mutants: bugs planted by operators at seeded random sites of ordinary host models.

The hand zoo can be fitted; this cannot. ``python -m gradviz_nb.bugzoo.mutants --seed 0 --n 240`` draws
mutants (a family, a host, a site, all from the seed), measures each one's truth in PyTorch alone
(:mod:`.truth`: which parameters lose their gradient, get a scaled one, or never move, against the
unmutated host), discards those with no effect, runs ``gv.doctor`` on the rest and scores it
(:mod:`.score`). Families: :data:`FAMILIES`; hosts: :data:`~.hosts.HOSTS`.
"""

from __future__ import annotations

from gradviz_nb.bugzoo.mutants.family import Family
from gradviz_nb.bugzoo.mutants.hosts import HOSTS
from gradviz_nb.bugzoo.mutants.ops_arith import ARITH_FAMILIES
from gradviz_nb.bugzoo.mutants.ops_cuts import CUT_FAMILIES
from gradviz_nb.bugzoo.mutants.ops_forward import FORWARD_FAMILIES
from gradviz_nb.bugzoo.mutants.ops_model import MODEL_FAMILIES
from gradviz_nb.bugzoo.mutants.ops_step import STEP_FAMILIES
from gradviz_nb.bugzoo.mutants.ops_values import VALUE_FAMILIES

__all__ = ["FAMILIES", "HOSTS", "Family"]

FAMILIES: dict[str, Family] = {f.name: f for f in [*FORWARD_FAMILIES, *MODEL_FAMILIES, *STEP_FAMILIES, *CUT_FAMILIES,
                                                   *ARITH_FAMILIES, *VALUE_FAMILIES]}

"""The healthy recipe zoo: real training recipes from well-known papers and libraries, small and fast.

Each :class:`~.kit.Recipe` builds a model, its optimizer and one training step written as the method
writes it; ``gv.doctor`` must find nothing in any of them (every finding is a false alarm).
``python -m gradviz_nb.bugzoo.recipes`` runs them all and prints each one's findings.
"""

from __future__ import annotations

from gradviz_nb.bugzoo.recipes.adversarial import ADVERSARIAL
from gradviz_nb.bugzoo.recipes.generative import GENERATIVE
from gradviz_nb.bugzoo.recipes.kit import Recipe, Run
from gradviz_nb.bugzoo.recipes.ssl import SSL
from gradviz_nb.bugzoo.recipes.training import TRAINING

__all__ = ["RECIPES", "Recipe", "Run"]

RECIPES: dict[str, Recipe] = {r.name: r for r in [*SSL, *ADVERSARIAL, *GENERATIVE, *TRAINING]}

"""Running the healthy recipes under ``gv.doctor`` and collecting every finding (all false alarms)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from gradviz_nb.bugzoo.recipes import RECIPES, Recipe
from gradviz_nb.doctor import doctor

__all__ = ["RecipeResult", "run_recipe", "run_recipes"]


@dataclass
class RecipeResult:
    """One recipe's run: every finding (each a false alarm), or the error that kept it from running."""

    name: str
    source: str
    findings: list[str] = field(default_factory=list)  # "[kind] target: message", each a false alarm
    error: str = ""

    @property
    def clean(self) -> bool:
        """No finding and no error."""
        return not self.findings and not self.error


def run_recipe(recipe: Recipe) -> RecipeResult:
    """Build the recipe from a fixed seed, check PyTorch runs its step, then ask the doctor."""
    out = RecipeResult(recipe.name, recipe.source)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            run = recipe.build()
            dx = doctor(run.step, run.model, run.optimizer)
        except Exception as err:  # a recipe that cannot run is reported, never hidden
            out.error = f"{type(err).__name__}: {err}"
            return out
    out.findings = [f"[{f.kind}] {f.target}: {f.message}" for f in dx.findings]
    return out


def run_recipes(names: list[str] | None = None) -> list[RecipeResult]:
    """Every recipe (or those named), each under ``gv.doctor``."""
    return [run_recipe(RECIPES[n]) for n in (names or list(RECIPES))]

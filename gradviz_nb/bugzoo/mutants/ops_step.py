"""Operators on the step's arithmetic: how often backward runs, where zero_grad sits, what steps what."""

from __future__ import annotations

from random import Random

from gradviz_nb.bugzoo.mutants.family import Family, family
from gradviz_nb.bugzoo.mutants.plan import Plan, Site

__all__ = ["STEP_FAMILIES"]


def _detach_pred(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    plan.recipe.detach_pred = True
    return "loss(pred.detach()) + weight decay: the loss stays differentiable"


def _with_decay(plan: Plan, rng: Random) -> None:
    plan.recipe.weight_decay = 1e-3


def _twice(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    plan.recipe.backward_twice = True
    return "loss.backward(retain_graph=True); loss.backward()"


def _accumulate(plan: Plan, rng: Random) -> None:
    plan.recipe.micro = rng.choice([2, 4])


def _undivided(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    plan.recipe.divide = False
    return f"{plan.recipe.micro} micro-batches accumulated, each loss not divided by {plan.recipe.micro}"


def _second_optimizer(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    holders = [(path, m) for path, m in plan.model.named_modules()
               if path and any(p.requires_grad for p in m.parameters())]
    path, module = rng.choice(holders)
    plan.second = [p for p in module.parameters() if p.requires_grad]
    return f"a second SGD over {path}'s parameters also steps"


def _zero_between(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    plan.recipe.zero_grad = "between"
    return "optimizer.zero_grad() between backward() and step()"


def _no_zero(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    plan.recipe.zero_grad = "never"
    return "no optimizer.zero_grad() in the step"


STEP_FAMILIES: list[Family] = [
    family("detached-pred", "detached", _detach_pred, frozenset({"none", "zero", "changed"}), prepare=_with_decay),
    family("double-backward", "double-backward", _twice, frozenset({"scaled"})),
    family("unscaled-accumulation", "unscaled-accumulation", _undivided, frozenset({"scaled"}), prepare=_accumulate),
    family("two-optimizers", "two-optimizers", _second_optimizer, frozenset({"update"})),
    family("zero-grad-before-step", "zero-grad-before-step", _zero_between, frozenset({"none", "stuck"})),
    family("stale-grad", "stale-grad", _no_zero, frozenset({"changed", "scaled"}), late=True),
]

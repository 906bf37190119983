"""Step arithmetic beyond the original six: clipping that leaves nothing, clipping before a GradScaler's
scale is undone, a loss weight of zero, ``zero_grad()`` inside the accumulation loop, a learning rate
that is zero only inside ``optimizer.step()``, a gradient edited by hand between backward and step, and
a GradScaler whose scale the step never undoes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from random import Random

import torch
from torch import nn

from gradviz_nb.bugzoo.mutants.family import Family
from gradviz_nb.bugzoo.mutants.plan import Plan, Site

__all__ = ["ARITH_FAMILIES"]

VANISH = frozenset({"zero", "vanished", "scaled", "changed"})


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _clip_norm(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    max_norm = rng.choice([0.0, 1e-9])
    plan.recipe.between.append(lambda m: torch.nn.utils.clip_grad_norm_(_trainable(m), max_norm))
    return f"clip_grad_norm_(model.parameters(), max_norm={max_norm})"


def _clip_value(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    value = rng.choice([0.0, 1e-12])
    plan.recipe.between.append(lambda m: torch.nn.utils.clip_grad_value_(_trainable(m), value))
    return f"clip_grad_value_(model.parameters(), clip_value={value})"


def _with_scaler(plan: Plan, rng: Random) -> None:
    plan.recipe.scaler = True


def _clip_scaled(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    plan.recipe.unscale = False
    plan.recipe.between.append(lambda m: torch.nn.utils.clip_grad_norm_(_trainable(m), 1.0))
    return "scaler.scale(loss).backward(); clip_grad_norm_(..., 1.0); scaler.step(opt) (no unscale_ first)"


def _zero_weight(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    w = rng.choice([0.0, 1e-12])
    plan.recipe.loss_weight = w
    return f"loss = loss * {w} (a loss weight)"


def _accumulate(plan: Plan, rng: Random) -> None:
    plan.recipe.micro = rng.choice([2, 4])


def _zero_each(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    plan.recipe.zero_grad = "each"
    return f"optimizer.zero_grad() inside the loop over {plan.recipe.micro} accumulated micro-batches"


def _lr_zero(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    total = rng.choice([100, 1000])

    @contextlib.contextmanager
    def around(opt: torch.optim.Optimizer) -> Iterator[None]:
        base = [g["lr"] for g in opt.param_groups]
        for g, lr in zip(opt.param_groups, base, strict=True):
            g["lr"] = lr * (1 // total)  # integer division: the warmup factor is 0
        try:
            yield
        finally:
            for g, lr in zip(opt.param_groups, base, strict=True):
                g["lr"] = lr
    plan.recipe.around_step = around
    return f"lr set to base * (step // {total}) for optimizer.step() and restored after"


def _grad_edit(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    holders = [(path, m) for path, m in plan.model.named_modules()
               if path and any(p.requires_grad for p in m.parameters(recurse=False))]
    path, module = rng.choice(holders)
    factor = rng.choice([1e-9, 0.0])

    def edit(m: nn.Module) -> None:
        for p in module.parameters(recurse=False):
            if p.grad is not None:
                p.grad.mul_(factor)
    plan.recipe.between.append(edit)
    return f"{path}: p.grad.mul_({factor}) between backward() and step()"


def _scaler_bypassed(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    plan.recipe.unscale = False
    plan.recipe.bypass_scaler = True
    return "scaler.scale(loss).backward(); optimizer.step() (the scaler never unscales)"


def _fam(name: str, kind: str, apply: Callable[[Plan, Random, list[Site]], str | None], effects: frozenset[str],
         prepare: Callable[[Plan, Random], None] | None = None) -> Family:
    return Family(name, frozenset({kind}), effects, apply, prepare)


ARITH_FAMILIES: list[Family] = [
    _fam("clip-norm-to-nothing", "clipped-away", _clip_norm, VANISH),
    _fam("clip-value-to-nothing", "clipped-away", _clip_value, VANISH),
    _fam("clip-before-unscale", "clip-before-unscale", _clip_scaled, frozenset({"scaled", "changed", "vanished"}),
         _with_scaler),
    _fam("loss-weight-zero", "loss-weight", _zero_weight, VANISH),
    _fam("zero-grad-in-accumulation", "zero-grad-in-accumulation", _zero_each, frozenset({"changed", "scaled"}),
         _accumulate),
    _fam("lr-zero-in-step", "lr-zero", _lr_zero, frozenset({"stuck"})),
    _fam("scaler-bypassed", "unscaled-step", _scaler_bypassed, frozenset({"scaled", "changed"}), _with_scaler),
    _fam("grad-edited", "grad-edited", _grad_edit, frozenset({"zero", "vanished", "stuck", "update"})),
]

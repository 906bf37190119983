"""Operators on registration, the optimizer's parameter list, adapters and modes, at seeded random sites."""

from __future__ import annotations

from random import Random
from typing import Any

import torch
from torch import nn

from gradviz_nb.bugzoo.mutants.family import Family, family
from gradviz_nb.bugzoo.mutants.plan import Plan, Site, patch_forward

__all__ = ["MODEL_FAMILIES"]

STUCK = frozenset({"none", "stuck"})


def _holders(plan: Plan, own: bool = True) -> list[tuple[str, nn.Module]]:
    """Modules (not the root) holding trainable parameters, directly when ``own``."""
    return [(path, m) for path, m in plan.model.named_modules()
            if path and any(p.requires_grad for p in m.parameters(recurse=not own))]


def _trainable(plan: Plan) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in plan.model.named_parameters() if p.requires_grad]


def _frozen(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    if plan.host.lora:  # its optimizer keeps only what requires grad: freezing there is a choice
        return None
    if rng.random() < 0.5:
        name, p = rng.choice(_trainable(plan))
        p.requires_grad_(False)
        return f"{name}.requires_grad_(False), still in the optimizer"
    path, module = rng.choice(_holders(plan, own=False))
    module.requires_grad_(False)
    return f"{path}.requires_grad_(False) (a frozen parent), still in the optimizer"


def _left_out(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    if rng.random() < 0.5:
        name, p = rng.choice(_trainable(plan))
        drop = {id(p)}
        what = name
    else:
        path, module = rng.choice(_holders(plan, own=False))
        drop = {id(p) for p in module.parameters()}
        what = f"every parameter of {path}"
    plan.params = [p for p in plan.params if id(p) not in drop]
    return f"optimizer built without {what}"


def _unregister(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    """A ModuleList/ModuleDict turned into a plain list/dict, or a parameter turned into a plain tensor
    attribute or a buffer that requires grad; the optimizer is then built from model.parameters()."""
    containers = [(path, m) for path, m in plan.model.named_modules()
                  if path and isinstance(m, (nn.ModuleList, nn.ModuleDict))
                  and any(p.requires_grad for p in m.parameters())]
    variant = rng.choice(["plain-container", "plain-attribute", "buffer"])
    if variant == "plain-container" and containers:
        path, container = rng.choice(containers)
        parent_path, _, attr = path.rpartition(".")
        parent = plan.model.get_submodule(parent_path)
        plain: Any = dict(container.items()) if isinstance(container, nn.ModuleDict) else list(container)
        del parent._modules[attr]
        object.__setattr__(parent, attr, plain)
        what = f"{path} kept in a plain {type(plain).__name__}"
    else:
        variant = "buffer" if variant == "buffer" else "plain-attribute"
        name, _ = rng.choice(_trainable(plan))
        owner_path, _, attr = name.rpartition(".")
        owner = plan.model.get_submodule(owner_path)
        value = owner._parameters.pop(attr)
        assert value is not None
        with torch.no_grad():
            tensor = value.clone().requires_grad_(True)
        if variant == "buffer":
            owner.register_buffer(attr, tensor)
        else:
            object.__setattr__(owner, attr, tensor)
        what = f"{name} made a {'buffer' if variant == 'buffer' else 'plain tensor attribute'} with requires_grad=True"
    kept = {id(p) for p in plan.model.parameters()}
    plan.params = [p for p in plan.params if id(p) in kept]
    return what


def _dead_adapter(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    if not plan.host.lora:
        return None
    layers = [(path, m) for path, m in plan.model.named_modules() if hasattr(m, "merge") and hasattr(m, "lora_A")]
    if rng.random() < 0.5:
        path, layer = rng.choice(layers)
        layer.merge()
        return f"{path}.merge(): the adapter is folded into the base weight and bypassed"
    model: Any = plan.model
    plan.recipe.forward_context = model.disable_adapter
    return "forward under model.disable_adapter()"


def _recreate(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    owners = [(path, m) for path, m in plan.model.named_modules()
              if path and isinstance(getattr(m, "weight", None), nn.Parameter) and m.weight.requires_grad
              and not isinstance(m, nn.Embedding) and "weight" in m._parameters]
    path, module = rng.choice(owners)
    attr = "weight" if rng.random() < 0.5 or getattr(module, "bias", None) is None else "bias"

    def fresh(inner: Any) -> Any:
        def call(*args: object, **kwargs: object) -> Any:
            with torch.no_grad():
                value = getattr(module, attr).clone()
            setattr(module, attr, nn.Parameter(value))
            return inner(*args, **kwargs)
        return call

    patch_forward(module, around=fresh)
    return f"{path}.{attr} = nn.Parameter(...) inside forward"


_STOCHASTIC = (nn.Dropout, nn.BatchNorm1d, nn.BatchNorm2d)


def _mode(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    if rng.random() < 0.5:
        plan.model.eval()
        return "model.eval() before training"
    holders = [(path, m) for path, m in plan.model.named_modules()
               if path and any(isinstance(x, _STOCHASTIC) for x in m.modules())]
    if not holders:
        return None
    path, module = rng.choice(holders)
    module.eval()
    return f"{path}.eval() before training"


MODEL_FAMILIES: list[Family] = [
    family("frozen", "frozen", _frozen, STUCK),
    family("not-in-optimizer", "not-in-optimizer", _left_out, frozenset({"stuck"})),
    family("not-a-parameter", "not-a-parameter", _unregister, STUCK),
    family("dead-adapter", "dead-adapter", _dead_adapter, hosts=("hf-lora",)),
    family("recreated-parameter", "recreated-parameter", _recreate, STUCK),
    family("mode", "mode", _mode, frozenset({"changed"})),
]

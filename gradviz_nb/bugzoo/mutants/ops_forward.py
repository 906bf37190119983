"""Operators that edit one module's forward at a seeded random site: the cut and zero families.

Each edits the output (or the call) of a module drawn from the host's probed sites, the way a user
would have written it at the end of that module's ``forward``.
"""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from gradviz_nb.bugzoo.mutants.family import Family, family
from gradviz_nb.bugzoo.mutants.plan import Plan, Site, patch_forward
from gradviz_nb.tracing import typed_torch

__all__ = ["FORWARD_FAMILIES"]

Edit = Callable[[Tensor], Tensor]


def _site(rng: Random, sites: list[Site], ok: Callable[[Site], bool] = lambda s: True) -> Site | None:
    pool = [s for s in sites if ok(s)]
    return rng.choice(pool) if pool else None


def _edit_output(variants: dict[str, Edit]) -> Callable[[Plan, Random, list[Site]], str | None]:
    def apply(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
        site = _site(rng, sites)
        if site is None:
            return None
        name = rng.choice(sorted(variants))
        patch_forward(plan.model.get_submodule(site.path), after=variants[name])
        return f"{site.path}: output -> {name}"
    return apply


def _tensor_hook(t: Tensor) -> Tensor:
    if t.requires_grad:
        typed_torch.register_hook(t, torch.zeros_like)
    return t


class _DropGrad(torch.autograd.Function):
    """An identity whose backward forgets its input's gradient."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> None:
        return None


def _drop_grad(t: Tensor) -> Tensor:
    out: Tensor = _DropGrad.apply(t)  # type: ignore[no-untyped-call]
    return out


def _zero_hooks(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    variant = rng.choice(["tensor-hook", "module-hook", "param-hook"])
    if variant == "param-hook":
        trainable = [(n, p) for n, p in plan.model.named_parameters() if p.requires_grad]
        name, p = rng.choice(trainable)
        typed_torch.register_hook(p, lambda g: g * 0)
        return f"{name}: register_hook(lambda g: g * 0)"
    site = _site(rng, sites, lambda s: variant == "tensor-hook" or s.input_grad)
    if site is None:
        return None
    module = plan.model.get_submodule(site.path)
    if variant == "tensor-hook":
        patch_forward(module, after=_tensor_hook)
        return f"{site.path}: output.register_hook(torch.zeros_like)"

    def zero_inputs(m: nn.Module, grad_in: tuple[Tensor | None, ...],
                    grad_out: tuple[Tensor | None, ...]) -> tuple[Tensor | None, ...]:
        return tuple(None if g is None else torch.zeros_like(g) for g in grad_in)

    module.register_full_backward_hook(zero_inputs)
    return f"{site.path}: full backward hook returning zero grad_input"


def _no_grad(inner: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def call(*args: object, **kwargs: object) -> Tensor:
        with torch.no_grad():
            return inner(*args, **kwargs)
    return call


def _reentrant(inner: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def call(*args: Any, **kwargs: Any) -> Tensor:
        out: Tensor = checkpoint(inner, *args, use_reentrant=True, **kwargs)
        return out
    return call


def _wrap_call(how: str, wrap: Callable[[Callable[..., Tensor]], Callable[..., Tensor]],
               ok: Callable[[Site], bool]) -> Callable[[Plan, Random, list[Site]], str | None]:
    def apply(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
        site = _site(rng, sites, ok)
        if site is None:
            return None
        patch_forward(plan.model.get_submodule(site.path), around=wrap)
        return f"{site.path}: {how}"
    return apply


def _dead_relu(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    fed = [p for p in plan.host.relu_fed if getattr(plan.model.get_submodule(p), "bias", None) is not None]
    if not fed or rng.random() < 0.5:
        return _edit_output(_SATURATE)(plan, rng, sites)
    path = rng.choice(fed)
    bias = plan.model.get_submodule(path).bias
    assert isinstance(bias, torch.Tensor)
    with torch.no_grad():
        bias.fill_(-1e4)
    return f"{path}.bias filled with -1e4 before a ReLU"


def _skip(inner: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def call(x: Tensor, *args: object, **kwargs: object) -> Tensor:
        return x
    return call


def _left_graph(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    """One of the round trips in ``_LEFT`` on a module's output, or a learnable scale read with ``.item()``."""
    if rng.random() >= 1 / (len(_LEFT) + 1):
        return _edit_output(_LEFT)(plan, rng, sites)
    site = _site(rng, sites)
    if site is None:
        return None
    module = plan.model.get_submodule(site.path)
    scale = nn.Parameter(torch.ones(()))
    module.register_parameter("scale", scale)
    plan.params.append(scale)
    patch_forward(module, after=lambda t: t * scale.item())
    return f"{site.path}: output * self.scale.item() (a new learnable scale)"


def _unused(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    """A module whose call is skipped (its forward returns its input), or one built and never called."""
    if rng.random() < 0.5:
        skipped = _wrap_call("forward returns its input (the module is skipped)", _skip,
                             lambda s: s.owns_params and s.same_shape)(plan, rng, sites)
        if skipped is not None:
            return skipped
    holders = [(path, m) for path, m in plan.model.named_modules()
               if any(p.requires_grad for p in m.parameters(recurse=False))]
    path, holder = rng.choice(holders)
    spare = nn.Linear(4, 4)
    holder.add_module("spare", spare)
    plan.params += list(spare.parameters())
    return f"{path + '.' if path else ''}spare = nn.Linear(4, 4), never called"


_LEFT: dict[str, Edit] = {
    "torch.tensor(out.tolist())": lambda t: torch.tensor(t.tolist(), dtype=t.dtype),
    "torch.from_numpy(out.numpy(force=True))": lambda t: torch.from_numpy(t.numpy(force=True)),
    "torch.tensor(out)": lambda t: torch.tensor(t),
    "(out * 64).long() / 64": lambda t: (t * 64).long().to(t.dtype) / 64,
    "out.bool().float()": lambda t: t.bool().to(t.dtype),
}
_ZERO_DERIVATIVE: dict[str, Edit] = {
    "torch.round(out)": torch.round, "torch.sign(out)": torch.sign, "torch.floor(out)": torch.floor,
    "(out > 0).float()": lambda t: (t > 0).to(t.dtype),
}
_SATURATE: dict[str, Edit] = {
    "torch.tanh(out + 50)": lambda t: torch.tanh(t + 50), "torch.sigmoid(out + 100)": lambda t: torch.sigmoid(t + 100),
    "out.clamp(min=1e3)": lambda t: t.clamp(min=1e3),
}

FORWARD_FAMILIES: list[Family] = [
    family("detach", "detached", _edit_output({"out.detach()": lambda t: t.detach()})),
    family("data", "data-access", _edit_output({"out.data": lambda t: t.data})),
    family("left-graph", "left-graph", _left_graph),
    family("zero-derivative", "zero-derivative", _edit_output(_ZERO_DERIVATIVE)),
    family("saturated", "saturated", _dead_relu),
    family("hook-zeroed", "hook-zeroed", _zero_hooks),
    family("custom-backward", "custom-backward", _edit_output({"DropGrad.apply(out)": _drop_grad})),
    family("no-grad", "no-grad", _wrap_call("forward under torch.no_grad()", _no_grad, lambda s: s.owns_params)),
    family("reentrant-checkpoint", "reentrant-checkpoint",
           _wrap_call("checkpoint(forward, use_reentrant=True)", _reentrant,
                      lambda s: s.owns_params and not s.input_grad)),
    family("unused-parameter", "unused-parameter", lambda plan, rng, sites: _unused(plan, rng, sites)),
]

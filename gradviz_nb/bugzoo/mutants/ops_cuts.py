"""Cuts and zeros by mechanisms no table names: index and integer ops, copy constructors, re-made leaves,
constant multipliers, drop-everything dropout, zeroing pre-hooks, normalising over one element, a value
minus itself, other ways to switch grad mode off, and a module that freezes itself in forward.

The doctor must find each by what the op did (its output stopped requiring grad, or backward sent zero),
not by recognising the op.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from random import Random
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from gradviz_nb.bugzoo.mutants.family import CUT, Family
from gradviz_nb.bugzoo.mutants.ops_forward import _edit_output, _site, _wrap_call
from gradviz_nb.bugzoo.mutants.plan import Plan, Site

__all__ = ["CUT_FAMILIES"]

Edit = Callable[[Tensor], Tensor]


def _quiet(f: Edit) -> Edit:
    def edit(t: Tensor) -> Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return f(t)
    return edit


_INDEX: dict[str, Edit] = {
    "out.argsort(-1).to(out.dtype) / out.shape[-1]": lambda t: t.argsort(-1).to(t.dtype) / t.shape[-1],
    "torch.bucketize(out, edges).to(out.dtype) / 8": lambda t: torch.bucketize(
        t, torch.linspace(-2, 2, 9)).to(t.dtype) / 8,
    "torch.searchsorted(edges, out).to(out.dtype) / 8": lambda t: torch.searchsorted(
        torch.linspace(-2, 2, 9), t.contiguous()).to(t.dtype) / 8,
    "out.argmax(-1, keepdim=True).to(out.dtype).expand_as(out)": lambda t: t.argmax(-1, keepdim=True).to(
        t.dtype).expand_as(t).contiguous(),
}
_COPY: dict[str, Edit] = {
    "out.new_tensor(out)": _quiet(lambda t: t.new_tensor(t)),
    "torch.Tensor(out.tolist())": lambda t: torch.Tensor(t.tolist()).to(t.dtype),
    "out.new_tensor(out.tolist())": lambda t: t.new_tensor(t.tolist()),
}
_RELEAF: dict[str, Edit] = {
    "out.detach().requires_grad_()": lambda t: t.detach().requires_grad_(),
    "nn.Parameter(out)": lambda t: nn.Parameter(t),
    "out.clone().detach_()": lambda t: t.clone().detach_(),
}
_TIMES_ZERO: dict[str, Edit] = {
    "out * 0.0": lambda t: t * 0.0,
    "out * torch.zeros(()) (a gate left at zero)": lambda t: t * torch.zeros(()),
    "out.mul(0).add(1)": lambda t: t.mul(0).add(1),
}
_CONSTANT: dict[str, Edit] = {
    "out.unsqueeze(-1).softmax(-1).squeeze(-1) (softmax over one element)":
        lambda t: t.unsqueeze(-1).softmax(-1).squeeze(-1),
    "F.layer_norm(out.unsqueeze(-1), (1,)).squeeze(-1) (normalised over one element)":
        lambda t: F.layer_norm(t.unsqueeze(-1), (1,)).squeeze(-1) + 1,
    "out - out": lambda t: t - t + 1,
}
_MASK_ALL: dict[str, Edit] = {
    "out.masked_fill(mask, 0.0) (a mask that is all True)": lambda t: t.masked_fill(
        torch.ones_like(t, dtype=torch.bool), 0.0),
    "torch.where(mask, out, 0.0) (a mask that is all False)": lambda t: torch.where(
        torch.zeros_like(t, dtype=torch.bool), t, 0.0),
    "out * (out.abs() > 1e9) (a threshold nothing passes)": lambda t: t * (t.abs() > 1e9),
}
_DROPOUT: dict[str, Edit] = {
    "F.dropout(out, p=1.0)": lambda t: F.dropout(t, p=1.0, training=True),
    "nn.Dropout(1.0)(out)": lambda t: nn.Dropout(1.0)(t),
}


def _zeroing_prehook(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    """A forward pre-hook that multiplies the input by zero, or a backward pre-hook returning zeros."""
    site = _site(rng, sites, lambda s: s.input_grad)
    if site is None:
        return None
    module = plan.model.get_submodule(site.path)
    if rng.random() < 0.5:
        def pre(m: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
            return (args[0] * 0, *args[1:])
        module.register_forward_pre_hook(pre)
        return f"{site.path}: forward pre-hook returning (input * 0,)"

    def bpre(m: nn.Module, grad_out: tuple[Tensor | None, ...]) -> tuple[Tensor | None, ...]:
        return tuple(None if g is None else g * 0 for g in grad_out)
    module.register_full_backward_pre_hook(bpre)
    return f"{site.path}: full backward pre-hook returning grad_output * 0"


def _set_grad_enabled(inner: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def call(*args: object, **kwargs: object) -> Tensor:
        with torch.set_grad_enabled(False):
            return inner(*args, **kwargs)
    return call


def _inference_mode(inner: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def call(*args: object, **kwargs: object) -> Tensor:
        with torch.inference_mode():
            out = inner(*args, **kwargs)
        return out.clone()  # an inference tensor cannot be saved for backward: cloned outside
    return call


def _grad_off(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    how, wrap = rng.choice([("forward under torch.set_grad_enabled(False)", _set_grad_enabled),
                            ("forward under torch.inference_mode(), output cloned", _inference_mode)])
    return _wrap_call(how, wrap, lambda s: s.owns_params)(plan, rng, sites)


def _self_freeze(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    """The module switches its own parameters' requires_grad off at the start of forward."""
    site = _site(rng, sites, lambda s: s.owns_params)
    if site is None:
        return None
    module = plan.model.get_submodule(site.path)

    def pre(m: nn.Module, args: tuple[Any, ...]) -> None:
        for p in m.parameters():
            p.requires_grad_(False)
    module.register_forward_pre_hook(pre)
    return f"{site.path}: forward pre-hook sets requires_grad_(False) on its own parameters"


def _optimizer_on_copy(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    """The optimizer is built from a deep copy of one module (a copy made for an EMA or a reference)."""
    holders = [(path, m) for path, m in plan.model.named_modules()
               if path and any(p.requires_grad for p in m.parameters(recurse=False))]
    path, module = rng.choice(holders)
    own = {id(p) for p in module.parameters()}
    copied = list(copy.deepcopy(module).parameters())
    plan.params = [p for p in plan.params if id(p) not in own] + copied
    return f"optimizer built with copy.deepcopy({path}).parameters() in place of {path}'s own"


def _fam(name: str, kinds: set[str], apply: Callable[[Plan, Random, list[Site]], str | None],
         effects: frozenset[str] = CUT) -> Family:
    return Family(name, frozenset(kinds), effects, apply)


CUT_FAMILIES: list[Family] = [
    _fam("cut-index-op", {"left-graph"}, _edit_output(_INDEX)),
    _fam("cut-copy-constructor", {"left-graph"}, _edit_output(_COPY)),
    _fam("cut-re-leaf", {"detached", "left-graph"}, _edit_output(_RELEAF)),
    _fam("zero-times-constant", {"zero-derivative"}, _edit_output(_TIMES_ZERO)),
    _fam("zero-constant-output", {"zero-derivative"}, _edit_output(_CONSTANT)),
    _fam("zero-mask-all", {"zero-derivative"}, _edit_output(_MASK_ALL)),
    _fam("zero-dropout-all", {"zero-derivative", "mode"}, _edit_output(_DROPOUT)),
    _fam("zeroing-pre-hook", {"hook-zeroed"}, _zeroing_prehook),
    _fam("grad-mode-off", {"no-grad"}, _grad_off),
    _fam("optimizer-on-copy", {"not-in-optimizer"}, _optimizer_on_copy, frozenset({"stuck"})),
    _fam("self-freeze", {"frozen"}, _self_freeze, frozenset({"none", "stuck"})),
]

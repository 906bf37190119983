"""Wrong-but-nonzero gradients: a custom ``autograd.Function`` whose forward is right and whose backward is
not (a flipped sign, a wrong factor, a reversed axis, a gradient that forgets the chain rule), and a
parameter written through ``.data`` during forward, after the module used it (its saved value is then
not the one backward reads, and the step starts from a value nobody computed with).

The forward of every mutant here equals the host's, so the truth sees only what backward and the step do.
"""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import Any, cast

import torch
from torch import Tensor, nn

from gradviz_nb.bugzoo.mutants.family import Family
from gradviz_nb.bugzoo.mutants.ops_forward import _edit_output, _site
from gradviz_nb.bugzoo.mutants.plan import Plan, Site

__all__ = ["VALUE_FAMILIES"]


def _function(name: str, backward: Callable[[Tensor, Tensor], Tensor]) -> type[torch.autograd.Function]:
    """An elementwise ``tanh``-free identity-like op ``y = x * 1`` written by hand, with a wrong backward."""

    def fwd(ctx: Any, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return x.clone()

    def bwd(ctx: Any, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return backward(x, grad)

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})


_WRONG: dict[str, type[torch.autograd.Function]] = {  # not a uniform factor: that is a reversal layer's design
    "Identity.apply(out), backward returns grad.flip(-1)": _function("FlippedIdentity", lambda x, g: g.flip(-1)),
    "Identity.apply(out), backward returns x * grad": _function("ChainIdentity", lambda x, g: x * g),
    "Identity.apply(out), backward returns grad + x": _function("ShiftedIdentity", lambda x, g: g + x),
    "Identity.apply(out), backward returns grad.roll(1, 0)": _function("RolledIdentity", lambda x, g: g.roll(1, 0)),
}


def _wrong_backward() -> dict[str, Callable[[Tensor], Tensor]]:
    def apply(fn: type[torch.autograd.Function]) -> Callable[[Tensor], Tensor]:
        def edit(t: Tensor) -> Tensor:
            return cast(Tensor, getattr(fn, "apply")(t))  # noqa: B009
        return edit
    return {k: apply(v) for k, v in _WRONG.items()}


def _data_write(plan: Plan, rng: Random, sites: list[Site]) -> str | None:
    """After a module with a weight ran, its weight is rewritten through ``.data`` (no version bump)."""
    site = _site(rng, sites, lambda s: s.owns_params and isinstance(
        getattr(plan.model.get_submodule(s.path), "weight", None), nn.Parameter))
    if site is None:
        return None
    module = plan.model.get_submodule(site.path)
    writes: list[tuple[str, Callable[[Tensor], object]]] = [("weight.data.mul_(0.5)", lambda w: w.data.mul_(0.5)),
                             ("weight.data.clamp_(-0.01, 0.01)", lambda w: w.data.clamp_(-0.01, 0.01)),
                             ("weight.data.add_(0.05)", lambda w: w.data.add_(0.05))]
    how, write = rng.choice(writes)

    def post(m: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        write(cast(Tensor, m.weight))
    module.register_forward_hook(post)
    return f"{site.path}: forward hook runs {how} after the module's output is computed"


VALUE_FAMILIES: list[Family] = [
    Family("wrong-custom-backward", frozenset({"wrong-gradient"}), frozenset({"changed", "scaled"}),
           _edit_output(_wrong_backward())),
    Family("data-write-in-forward", frozenset({"data-write"}), frozenset({"update", "stuck"}), _data_write),
]

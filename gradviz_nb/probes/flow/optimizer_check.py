"""What the optimizer will do with each parameter: facts read from its param groups, not guesses.

* ``frozen``: the optimizer holds a parameter whose ``requires_grad`` is False. The user built the
  optimizer expecting it to train; it never gets a gradient, so it never moves.
* ``not-in-optimizer``: a parameter gets a gradient but no param group holds it (``opt.step()`` never
  moves it, and ``opt.zero_grad()`` never clears it), or every group holding it has lr 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from gradviz_nb.kinds import Kind

__all__ = ["Finding", "optimizer_flags", "optimizer_roles"]

Finding = tuple[Kind, str, str, tuple[str, ...]]  # kind, target, reason, params


class _Param(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def names(self) -> tuple[str, ...]: ...
    @property
    def requires_grad(self) -> bool: ...
    @property
    def has_grad(self) -> bool: ...


def optimizer_roles(optimizer: torch.optim.Optimizer) -> dict[int, list[tuple[int, float]]]:
    """``id(parameter)`` -> ``[(group index, lr), ...]`` for every group that holds it."""
    roles: dict[int, list[tuple[int, float]]] = {}
    for i, group in enumerate(optimizer.param_groups):
        lr = group.get("lr", 0.0)
        for p in group["params"]:
            roles.setdefault(id(p), []).append((i, float(lr.item() if isinstance(lr, torch.Tensor) else lr)))
    return roles


def optimizer_flags(params: Sequence[_Param], tensors: Mapping[str, torch.Tensor],
                    optimizer: torch.optim.Optimizer) -> list[Finding]:
    """``frozen`` / ``not-in-optimizer`` findings for ``params`` (stats), whose tensors are ``tensors`` by name."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        from gradviz_nb.errors import GradvizError

        raise GradvizError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}.")
    roles = optimizer_roles(optimizer)
    kind_name = type(optimizer).__name__
    out: list[Finding] = []
    for p in params:
        held = roles.get(id(tensors[p.name]), [])
        if held and not p.requires_grad:
            out.append(("frozen", p.name, f"{kind_name} holds it (param group {held[0][0]}) but requires_grad is "
                        "False, so it never gets a gradient and never moves; set requires_grad_(True), or "
                        "leave it out of the optimizer if freezing was meant", p.names))
        elif p.has_grad and not held:
            out.append(("not-in-optimizer", p.name, f"it has a gradient but no param group of {kind_name} holds "
                        "it: opt.step() never moves it and opt.zero_grad() never clears it; add it to the "
                        "optimizer (build it from model.parameters())", p.names))
        elif p.has_grad and all(lr == 0 for _, lr in held):
            groups = ", ".join(str(i) for i, _ in held)
            out.append(("not-in-optimizer", p.name, f"it has a gradient but its param group ({groups}) of "
                        f"{kind_name} has lr 0, so opt.step() does not move it", p.names))
    return out

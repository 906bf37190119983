"""What a healthy training recipe is, and the small pieces recipes are built from.

A :class:`Recipe` names a well-known method and where it comes from, and ``build()`` returns a
:class:`Run`: the model (every module the step trains or reads, in one ``nn.Module``), the main
optimizer, and ``step``, one training step written as the method's reference code writes it (several
optimizers, EMA teachers, schedulers, scalers and stop-gradients included). Every recipe is healthy by
construction, so each finding ``gv.doctor`` gives on it is a false alarm.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["IN", "OUT", "Recipe", "Run", "batch", "cosine_loss", "ema_update", "frozen_copy", "mlp"]

IN, OUT = 16, 4


@dataclass
class Run:
    """One built recipe: everything the step touches in ``model``, the main ``optimizer``, and ``step``."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    step: Callable[[], object]


@dataclass(frozen=True)
class Recipe:
    """``name``: the method; ``source``: the paper or library whose training step it follows; ``build``:
    a fresh :class:`Run` (draws from torch's global RNG: seed it first)."""

    name: str
    source: str
    build: Callable[[], Run]


def mlp(i: int = IN, h: int = 32, o: int = OUT, depth: int = 2) -> nn.Sequential:
    """``depth`` Linear layers with ReLU between them: ``i`` -> ``h`` ... -> ``o``."""
    layers: list[nn.Module] = []
    for k in range(depth - 1):
        layers += [nn.Linear(i if k == 0 else h, h), nn.ReLU()]
    layers.append(nn.Linear(h if depth > 1 else i, o))
    return nn.Sequential(*layers)


def batch(n: int = 16, classes: int = OUT) -> tuple[Tensor, Tensor]:
    """``n`` random inputs and class labels, from torch's global RNG."""
    return torch.randn(n, IN), torch.randint(0, classes, (n,))


def frozen_copy(m: nn.Module) -> nn.Module:
    """A teacher or target network: a copy that takes no gradient and no optimizer."""
    t = copy.deepcopy(m)
    t.requires_grad_(False)
    return t


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, decay: float = 0.99) -> None:
    """``target = decay * target + (1 - decay) * online``, parameter by parameter, outside autograd."""
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        t.mul_(decay).add_(o.detach(), alpha=1 - decay)


def cosine_loss(p: Tensor, z: Tensor) -> Tensor:
    """Minus the mean cosine similarity of ``p`` and ``z`` along the last axis."""
    return -F.cosine_similarity(p, z, dim=-1).mean()

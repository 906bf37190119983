"""A healthy model as the zoo runs it: the model, one batch's loss, how backward runs, its optimizer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from gradviz_nb.tracing import typed_torch

__all__ = ["Healthy"]


def _backward(loss: torch.Tensor) -> None:
    typed_torch.backward(loss)


@dataclass
class Healthy:
    """A model and a loss of one batch; ``backward`` may scale (AMP) or accumulate."""

    model: nn.Module
    loss: Callable[[], torch.Tensor]
    backward: Callable[[torch.Tensor], None] = _backward
    optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None  # AdamW when None

    def make_optimizer(self) -> torch.optim.Optimizer:
        params = [p for p in self.model.parameters() if p.requires_grad]
        return self.optimizer(params) if self.optimizer is not None else torch.optim.AdamW(params, lr=1e-3)

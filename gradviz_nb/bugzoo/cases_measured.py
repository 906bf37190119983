"""Deliberate designs that cut, freeze or zero on purpose: healthy, so any finding is a false alarm.

Each recipe is written as its paper or library writes it, without the names a rule could key on: a
stop-gradient that is the method (SimSiam, BYOL with an EMA target), an online linear probe on detached
features, a frozen backbone kept in ``eval()`` under ``no_grad``, and a hand-written adapter whose
up-projection starts at zero (so its down-projection's first gradient is exactly zero, measured, whatever
its name). The cuts and zeros are there; their consequence is not harmful, so the doctor reports none.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from gradviz_nb.bugzoo.case import Case
from gradviz_nb.bugzoo.cases_healthy import healthy_outcome
from gradviz_nb.bugzoo.healthy import Healthy

__all__ = ["CASES"]


def _views(n: int = 16, d: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, d, generator=g)
    return x + 0.1 * torch.randn(n, d, generator=g), x + 0.1 * torch.randn(n, d, generator=g)


def _encoder(d: int = 12, h: int = 32, out: int = 16) -> nn.Module:
    return nn.Sequential(nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Linear(h, out))


class SimSiam(nn.Module):
    """Chen & He 2021: a predictor on one branch, stop-gradient on the other, symmetric loss."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = _encoder()
        self.predictor = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 16))

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        z1, z2 = self.encoder(x1), self.encoder(x2)
        p1, p2 = self.predictor(z1), self.predictor(z2)
        return -(F.cosine_similarity(p1, z2.detach()).mean() + F.cosine_similarity(p2, z1.detach()).mean()) / 2


def simsiam() -> Healthy:
    model, (x1, x2) = SimSiam(), _views()
    return Healthy(model, lambda: model(x1, x2))


class Byol(nn.Module):
    """Grill et al. 2020: the online network predicts an EMA target's projection; the target gets no gradient
    (its parameters are a moving average, updated outside the optimizer)."""

    def __init__(self) -> None:
        super().__init__()
        self.online = _encoder()
        self.predictor = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 16))
        self.target = copy.deepcopy(self.online).requires_grad_(False)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        p1, p2 = self.predictor(self.online(x1)), self.predictor(self.online(x2))
        with torch.no_grad():
            t1, t2 = self.target(x1), self.target(x2)
        loss = (2 - 2 * F.cosine_similarity(p1, t2.detach()).mean()) + (2 - 2 * F.cosine_similarity(p2, t1).mean())
        return loss


def byol() -> Healthy:
    model, (x1, x2) = Byol(), _views()

    def backward(loss: torch.Tensor) -> None:
        loss.backward()  # type: ignore[no-untyped-call]
        with torch.no_grad():  # the EMA update, as the recipe does after each step
            for t, o in zip(model.target.parameters(), model.online.parameters(), strict=True):
                t.mul_(0.99).add_(o.detach(), alpha=0.01)

    return Healthy(model, lambda: model(x1, x2), backward)


class OnlineProbe(nn.Module):
    """A self-supervised backbone with a linear classifier trained beside it on detached features (the online
    evaluation of SimCLR / DINO): the probe's loss must not shape the backbone."""

    def __init__(self) -> None:
        super().__init__()
        self.ssl = SimSiam()
        self.classifier = nn.Linear(16, 4)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        features = self.ssl.encoder(x1)
        loss: torch.Tensor = self.ssl(x1, x2) + F.cross_entropy(self.classifier(features.detach()), y)
        return loss


def online_probe() -> Healthy:
    model, (x1, x2) = OnlineProbe(), _views()
    y = torch.randint(0, 4, (16,), generator=torch.Generator().manual_seed(3))
    return Healthy(model, lambda: model(x1, x2, y))


class FrozenBackbone(nn.Module):
    """Linear probing: the pretrained backbone frozen, in eval() (dropout off, batch-norm statistics fixed), run
    under no_grad; only the head trains."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(12, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2),
                                      nn.Linear(32, 16))
        self.backbone.requires_grad_(False)
        self.head = nn.Linear(16, 4)

    def train(self, mode: bool = True) -> FrozenBackbone:
        super().train(mode)
        self.backbone.eval()  # stays in eval whatever the loop does
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            features = self.backbone(x)
        out: torch.Tensor = self.head(features)
        return out


def frozen_backbone() -> Healthy:
    model = FrozenBackbone().train()
    x, _ = _views()
    y = torch.randint(0, 4, (16,), generator=torch.Generator().manual_seed(4))
    return Healthy(model, lambda: F.cross_entropy(model(x), y))


class Adapted(nn.Module):
    """A frozen base layer with a hand-written bottleneck adapter (Houlsby et al. 2019) whose up-projection
    starts at zero, so the adapted model starts as the base: the down-projection's first gradient is exactly
    zero, because the other factor of its product, the up-projection, is."""

    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(12, 12).requires_grad_(False)
        self.squeeze, self.expand = nn.Linear(12, 3), nn.Linear(3, 12)
        nn.init.zeros_(self.expand.weight)
        nn.init.zeros_(self.expand.bias)
        self.out = nn.Linear(12, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.base(x)
        out: torch.Tensor = self.out(h + self.expand(F.gelu(self.squeeze(h))))
        return out


def zero_init_adapter() -> Healthy:
    model, (x, _) = Adapted(), _views()
    y = torch.randint(0, 4, (16,), generator=torch.Generator().manual_seed(5))
    return Healthy(model, lambda: F.cross_entropy(model(x), y))


_RECIPES: list[tuple[str, Callable[[], Healthy]]] = [
    ("healthy-simsiam-stop-gradient", simsiam),
    ("healthy-byol-ema-target", byol),
    ("healthy-online-linear-probe", online_probe),
    ("healthy-frozen-eval-backbone", frozen_backbone),
    ("healthy-zero-init-adapter", zero_init_adapter),
]

CASES: list[Case] = [Case(name, "healthy", lambda make=make: healthy_outcome(make),  # type: ignore[misc]
                          description=(make.__doc__ or "").strip()) for name, make in _RECIPES]

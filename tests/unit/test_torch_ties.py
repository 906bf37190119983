"""Gradients at ties, on every supported torch: torch 2.14 changed clamp's derivative where the input equals a
bound (``clamp_min(x, 0)`` at ``x = 0``: 1 up to 2.13, 0 from 2.14 on; with a tensor bound 1, then 0.5, split
as ``maximum`` splits a tie), while relu, relu6 and hardtanh give 0 there in every version. gv.why must name a
zero gradient that comes from a tie, and call a passed one healthy, each against the gradient the installed
torch really computes (scripts/test.sh runs this on both ends of the supported range)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.tracing.evidence import clamp_tie_derivative

X = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
Y = torch.randn(6, 1, generator=torch.Generator().manual_seed(2))
TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


class OnTheBound(nn.Module):
    """``enc`` outputs exactly 0 everywhere (zero weight and bias), then a clipping op whose bound is 0."""

    def __init__(self, clip: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)
        nn.init.zeros_(self.enc.weight)
        nn.init.zeros_(self.enc.bias)
        torch.manual_seed(0)
        nn.init.normal_(self.head.weight)
        self.clip = clip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.clip(self.enc(x)))


CLIPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "clamp_min": lambda h: torch.clamp_min(h, 0.0),
    "clamp(min=)": lambda h: h.clamp(min=0.0),
    "clamp_max": lambda h: torch.clamp_max(h, 0.0),
    "clip tensor bound": lambda h: torch.clip(h, min=torch.zeros(8)),
    "relu": torch.relu,
    "relu inplace": lambda h: nn.functional.relu(h, inplace=True),
    "relu6": nn.functional.relu6,
    "hardtanh at -1": lambda h: nn.functional.hardtanh(h - 1.0),
}


def _why(clip: Callable[[torch.Tensor], torch.Tensor]) -> tuple[gv.Why, torch.Tensor]:
    model = OnTheBound(clip)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gv.capture(model) as cap:
            loss = nn.functional.mse_loss(model(X), Y)
        graph = gv.trace(loss, model=model, capture=cap)
        loss.backward()
    grad = model.enc.weight.grad
    assert grad is not None
    return gv.why(graph, "enc.weight"), grad


def test_the_clamp_tie_rule_is_the_installed_torchs() -> None:
    for tensor_bound in (False, True):
        x = torch.zeros(3, requires_grad=True)
        top = torch.zeros(3) if tensor_bound else 0.0
        torch.clamp(x, max=top).sum().backward()  # x = 0 sits on the upper bound
        assert x.grad is not None and clamp_tie_derivative(tensor_bound) == float(x.grad[0])
    expected = (1.0, 1.0) if TORCH < (2, 14) else (0.0, 0.5)  # (a number bound, a tensor bound)
    assert (clamp_tie_derivative(False), clamp_tie_derivative(True)) == expected, \
        f"torch {torch.__version__} changed the rule again"


@pytest.mark.parametrize("clip", list(CLIPS))
def test_why_at_a_tie_agrees_with_the_gradient_torch_computes(clip: str) -> None:
    w, grad = _why(CLIPS[clip])
    if grad.any():  # this torch passes (some of) the gradient at the tie: nothing to explain
        assert clip.startswith(("clamp", "clip")) and clamp_tie_derivative("tensor" in clip) > 0
        assert (w.status, w.kind) == ("ok", None), w.text()
        return
    assert (w.status, w.kind) == ("zero", "saturated"), w.text()
    assert "100.0%" in w.cause and "exactly on its bound" in w.evidence, w.text()
    if clip.startswith(("clamp", "clip")):
        assert "torch 2.14" in w.evidence and clamp_tie_derivative("tensor" in clip) == 0.0


def test_a_dead_inplace_relu_is_measured_after_it_wrote() -> None:
    """An in-place relu hands the mode its output as its input: the bound test still finds every zero."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 1))
    nn.init.constant_(model[0].bias, -1e4)
    w = gv.why(model, "0.weight", fn=lambda: nn.functional.mse_loss(model(X), Y))
    assert (w.status, w.kind) == ("zero", "saturated") and "100.0%" in w.evidence, w.text()

"""Expected zeros are measured factors: a zero parameter silences an upstream layer's zero gradient only when the
node it feeds saved that parameter's own memory and nothing non-zero beside it (a zero-initialised up-projection),
never a zero bias a normalisation adds (layer norm saves its bias beside its weight; batch norm does not save it)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.probes.causes import expected_zero


class Normed(nn.Module):
    """fc1 -> a normalisation (default init: weight 1, bias exactly 0) -> fc2 -> head; fc2's full backward hook
    returns a zero grad_input, so fc1 and the normalisation get exactly zero gradient."""

    def __init__(self, norm: nn.Module, hooked: bool) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2, self.head = nn.Linear(4, 6), norm, nn.Linear(6, 6), nn.Linear(6, 1)
        if hooked:
            self.fc2.register_full_backward_hook(lambda m, grad_in, grad_out: (torch.zeros_like(grad_in[0]),))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.fc2(self.norm(self.fc1(x))))).sum()


def _leaves(graph: gv.AutogradGraph, prefix: str) -> list[str]:
    return [node for name, node in graph.leaves().items() if name.startswith(prefix)]


@pytest.mark.parametrize("norm", [lambda: nn.LayerNorm(6), lambda: nn.BatchNorm1d(6)], ids=["layer-norm", "batch-norm"])
def test_a_zero_normalisation_bias_is_no_factor(norm: object) -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    healthy = Normed(norm(), hooked=False)  # type: ignore[operator]
    graph = gv.trace(healthy(x), model=healthy)
    assert not bool(healthy.norm.bias.any())  # the zero bias is there, and PyTorch still sends fc1 a gradient:
    healthy(x).backward()
    assert healthy.fc1.weight.grad is not None and healthy.fc1.weight.grad.abs().sum() > 0
    assert expected_zero(graph, _leaves(graph, "fc1.")) == ""


@pytest.mark.parametrize("norm", [lambda: nn.LayerNorm(6), lambda: nn.BatchNorm1d(6)], ids=["layer-norm", "batch-norm"])
def test_a_hook_zeroing_the_gradient_past_a_normalisation_is_named(norm: object) -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    model = Normed(norm(), hooked=True)  # type: ignore[operator]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        model(x).backward()
        opt.step()

    probe = Normed(norm(), hooked=True)  # type: ignore[operator]
    probe(x).backward()
    assert probe.fc1.weight.grad is not None and not bool(probe.fc1.weight.grad.any())  # PyTorch: exactly zero
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dx = gv.doctor(step, model, opt)
    named = {f.target for f in dx.findings if f.kind == "hook-zeroed"}
    assert {"fc1.weight", "fc1.bias"} <= named, dx.summary()


class UpProjection(nn.Module):
    """A zero-initialised up-projection (an adapter's last layer): ``down``'s gradient is exactly zero by design."""

    def __init__(self) -> None:
        super().__init__()
        self.down, self.up = nn.Linear(4, 3), nn.Linear(3, 4)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.up(torch.relu(self.down(x)))).pow(2).sum()


def test_a_zero_up_projection_is_still_measured_a_factor() -> None:
    torch.manual_seed(0)
    model, x = UpProjection(), torch.randn(8, 4)
    graph = gv.trace(model(x), model=model)
    model(x).backward()
    assert model.down.weight.grad is not None and not bool(model.down.weight.grad.any())  # PyTorch: exactly zero
    assert "up.weight" in expected_zero(graph, _leaves(graph, "down."))


def test_a_parameter_whose_storage_was_freed_is_never_read() -> None:
    # FSDP2 frees an unsharded parameter's storage after its forward and keeps the shape: reading its values
    # crashed the process (SIGSEGV) under torchrun; such a parameter is not measured a zero factor.
    from gradviz_nb.probes.causes.zeros import _readable

    p = nn.Parameter(torch.zeros(4, 4))
    assert _readable(p)
    p.untyped_storage().resize_(0)
    assert not _readable(p) and not _readable(torch.zeros(2, device="meta"))

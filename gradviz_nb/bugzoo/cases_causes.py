# Cases drive models the way user code does (.backward(), Function.apply, register_hook: untyped in torch's stubs).
# mypy: disable-error-code="no-untyped-call,no-any-return"
"""Bug-zoo cases for the causes ``gv.why`` reads from evidence, as ``gv.doctor`` reports them: a value that
leaves the graph, a zero-derivative op, a saturated activation, a hook that zeroes the gradient, a custom
backward that drops it, a reentrant checkpoint over inputs that need no grad.

The truth is PyTorch's: the same loop run without the doctor, and the parameters whose ``.grad`` is really
``None`` or exactly zero. A finding on a module covers the parameters under it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import gradviz_nb as gv
from gradviz_nb.bugzoo.case import Case, Outcome, flag_outcome

_X = torch.randn(16, 8, generator=torch.Generator().manual_seed(3))
_Y = torch.randn(16, 1, generator=torch.Generator().manual_seed(4))


class _Net(nn.Module):
    """An encoder, a planted bug between it and the head, and the head."""

    def __init__(self, bug: Callable[[_Net, torch.Tensor, torch.Tensor], torch.Tensor], gate: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.enc = nn.Linear(8, 16)
        self.head = nn.Linear(16, 1)
        self.gate = nn.Linear(8, 1) if gate else None
        self.bug = bug

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.bug(self, self.enc(x), x))


class _DropInput(torch.autograd.Function):
    """A hand-written op whose backward returns None for its input: everything upstream loses its gradient."""

    @staticmethod
    def forward(ctx: object, h: torch.Tensor) -> torch.Tensor:
        return h.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> None:
        return None


def _covered(dx: gv.Diagnosis, names: list[str]) -> set[tuple[str, str]]:
    """(kind, parameter) for every parameter a finding names, itself or through a module holding it."""
    return {(f.kind, n) for f in dx.findings for n in names if n == f.target or n.startswith(f.target + ".")}


def _run(model: nn.Module, kind: str) -> Outcome:
    """gv.doctor on the usual loop, then the loop itself: the parameters whose .grad is None or all zero."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        nn.functional.mse_loss(model(_X), _Y).backward()
        opt.step()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's own warnings about the planted bugs
        dx = gv.doctor(step, model, opt)
        opt.zero_grad()
        nn.functional.mse_loss(model(_X), _Y).backward()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    truth = {(kind, n) for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())}
    return flag_outcome(truth, _covered(dx, names))


def _gated(m: _Net, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    assert m.gate is not None
    return h * torch.tensor(m.gate(x).sigmoid().mean().item())  # the gate's value, as a Python float


def left_graph_item() -> Outcome:
    """A gate read with .item() and re-wrapped with torch.tensor(...). Truth: the gate's .grad is None."""
    return _run(_Net(_gated, gate=True), "left-graph")


def zero_derivative_round() -> Outcome:
    """The encoder's output rounded (a naive quantizer). Truth: the encoder's gradient is exactly zero."""
    return _run(_Net(lambda m, h, x: torch.round(h)), "zero-derivative")


def saturated_dead_relu() -> Outcome:
    """A ReLU after a bias of -100: every unit dead. Truth: the encoder's gradient is exactly zero."""
    model = _Net(lambda m, h, x: torch.relu(h))
    nn.init.constant_(model.enc.bias, -100.0)
    return _run(model, "saturated")


def _zeroing_hook(m: nn.Module, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    h.register_hook(lambda g: g * 0)  # meant to mask some rows, masks all
    return h


def hook_zeroed() -> Outcome:
    """A tensor hook on the encoder's output that returns zeros. Truth: the encoder's gradient is zero."""
    return _run(_Net(_zeroing_hook), "hook-zeroed")


def custom_backward_none() -> Outcome:
    """A custom autograd.Function whose backward returns None. Truth: the encoder's .grad is None."""
    return _run(_Net(lambda m, h, x: _DropInput.apply(h)), "custom-backward")


class _CheckpointedLora(nn.Module):
    """A frozen embedding and base layer, a LoRA adapter, and the block under a hand-written reentrant
    checkpoint: the embedding's output needs no grad, so the checkpoint makes no backward node."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(32, 8).requires_grad_(False)
        self.base = nn.Linear(8, 8).requires_grad_(False)
        self.lora_A = nn.Linear(8, 2, bias=False)
        self.lora_B = nn.Linear(2, 8, bias=False)
        nn.init.normal_(self.lora_B.weight, std=0.1)
        self.head = nn.Linear(8, 1)

    def block(self, h: torch.Tensor) -> torch.Tensor:
        return self.base(h) + self.lora_B(self.lora_A(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids = (x.abs() * 4).long().clamp(max=31)
        h = checkpoint(self.block, self.emb(ids), use_reentrant=True)
        return self.head(h).mean(dim=1)


def reentrant_checkpoint() -> Outcome:
    """LoRA under a reentrant checkpoint over a frozen embedding. Truth: lora_A and lora_B get no .grad."""
    return _run(_CheckpointedLora(), "reentrant-checkpoint")


CASES: list[Case] = [
    Case("causes-left-graph-item", "left-graph", left_graph_item),
    Case("causes-zero-derivative-round", "zero-derivative", zero_derivative_round),
    Case("causes-saturated-dead-relu", "saturated", saturated_dead_relu),
    Case("causes-hook-zeroed", "hook-zeroed", hook_zeroed),
    Case("causes-custom-backward-none", "custom-backward", custom_backward_none),
    Case("causes-reentrant-checkpoint", "reentrant-checkpoint", reentrant_checkpoint),
]

"""A cut is a design only while it harms nothing measurable, and a wrong backward harms every parameter under any
of its calls: both judged on the step's graph, checked against PyTorch's own gradients."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import gradviz_nb as gv

X = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
Y = torch.randn(16, 2, generator=torch.Generator().manual_seed(2))


class Gate(nn.Module):
    """A router whose load-balancing loss is kept on the module (as mixture-of-experts layers do)."""

    def __init__(self) -> None:
        super().__init__()
        self.router, self.expert = nn.Linear(4, 2), nn.Linear(4, 2)
        self.aux = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.router(x).softmax(-1)
        self.aux = (gate.mean(0) ** 2).sum()
        out: torch.Tensor = self.expert(x) * gate
        return out


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.moe = Gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.moe(x)
        return out


def test_a_detached_prediction_is_named_for_the_router_its_auxiliary_loss_still_reaches() -> None:
    """The prediction detached before the loss: the experts keep only the weight-decay term (measured harm), so
    the router, which its auxiliary loss still reaches through the model's modules, is named too, not taken for a
    stop-gradient by design."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss_of(detach: bool) -> torch.Tensor:
        pred = model(X)
        pred = pred.detach() if detach else pred
        penalty = sum(p.pow(2).sum() for p in model.parameters())
        return ((pred - Y) ** 2).mean() + model.moe.aux + 1e-3 * penalty

    def step() -> None:
        opt.zero_grad()
        loss_of(True).backward()
        opt.step()

    dx = gv.doctor(step, model, opt)
    named = {f.target for f in dx.findings if f.kind == "detached"}
    assert {"moe.router.weight", "moe.expert.weight"} <= {n for n, _ in model.named_parameters()
                                                          if any(n == t or n.startswith(t + ".") for t in named)}
    loss_of(False).backward()  # PyTorch: the uncut prediction gives the router a different gradient
    uncut = model.moe.router.weight.grad
    model.zero_grad()
    loss_of(True).backward()
    assert uncut is not None and model.moe.router.weight.grad is not None
    assert not torch.allclose(uncut, model.moe.router.weight.grad)


class Wrong(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * x  # forgets that the forward is the identity


def test_a_wrong_backward_called_twice_names_the_parameters_under_both_calls() -> None:
    torch.manual_seed(0)
    layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
    head = nn.Linear(4, 2)
    model = nn.ModuleDict({"layers": layers, "head": head})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def forward() -> torch.Tensor:
        h = X
        for layer in layers:
            h = Wrong.apply(layer(h))
        return ((head(h) - Y) ** 2).mean()

    def step() -> None:
        opt.zero_grad()
        forward().backward()
        opt.step()

    [f] = gv.doctor(step, model, opt).of_kind("wrong-gradient")
    assert f.target == "layers", f  # both layers' parameters: the second call's wrong backward reaches layers.1


def test_a_layer_norm_run_under_no_grad_is_no_grad_for_its_own_weights() -> None:
    """F.layer_norm hands its weight and bias to torch by keyword: their use under no_grad is seen all the same
    (they were named unused-parameter)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    inner = model[1].forward

    def without_grad(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out: torch.Tensor = inner(x)
        return out

    model[1].forward = without_grad
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        ((model(X) - Y) ** 2).mean().backward()
        opt.step()

    dx = gv.doctor(step, model, opt)
    assert {(f.kind, f.target) for f in dx.findings} >= {("no-grad", "1.weight"), ("no-grad", "1.bias")}, dx.summary()
    assert not dx.of_kind("unused-parameter")
    w = dx.why("1.weight")
    assert (w.status, w.kind) == ("none", "no-grad"), w.text()
    assert w.prove(fn=lambda: ((model(X) - Y) ** 2).mean(), model=model).proven

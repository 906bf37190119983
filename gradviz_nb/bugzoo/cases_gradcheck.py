"""Bug-zoo cases for ``gv.gradcheck``: hand-written backward rules, wrong and right.

The truth is ``torch.autograd.gradcheck`` on the same function (does the Jacobian of each input agree
with finite differences?) plus the Function and input we planted the mistake in. ``gv.gradcheck`` must
name exactly that node and input, and nothing upstream or beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo.case import Case, Outcome, flag_outcome

KIND = "wrong-backward"


def _function(name: str, forward: Callable[..., torch.Tensor], backward: Callable[..., Any]) -> Any:
    """A ``torch.autograd.Function`` subclass named ``name`` (its backward node is ``name + "Backward"``)."""
    methods = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (torch.autograd.Function,), methods)


def _scaled_mul(name: str, factor_w: float) -> Any:
    """``x * w`` (w broadcast over rows) whose backward multiplies w's gradient by ``factor_w``."""

    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return x * w

    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return g * w, factor_w * (g * x).sum(0)

    return _function(name, forward, backward)


def _softplus() -> Any:
    """A correct hand-written softplus: d/dx log(1 + e^x) = sigmoid(x)."""

    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return F.softplus(x)

    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(x)

    return _function("MySoftplus", forward, backward)


def _inputs(*shapes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes)


def _torch_fails(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> set[int]:
    """Which inputs torch.autograd.gradcheck fails on, each checked alone (the others held constant)."""
    bad = set()
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or not t.requires_grad:
            continue
        alone = tuple(a.detach().requires_grad_(j == i) if isinstance(a, torch.Tensor) else a
                      for j, a in enumerate(inputs))
        if not torch.autograd.gradcheck(fn, alone, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False):
            bad.add(i)
    return bad


def _named(res: gv.GradCheck) -> set[tuple[str, str]]:
    return {(KIND, f"{w.op} input {w.input}" + (f" in {w.module}" if w.module else "")) for w in res.wrong}


def _judge(fn: Callable[..., Any], inputs: tuple[Any, ...], planted: set[str], via: int | None,
           res: gv.GradCheck) -> Outcome:
    """Expected: the planted slots, when PyTorch's gradcheck fails on input ``via`` (the input whose
    gradient flows through the planted slot), else no flag at all."""
    fails = _torch_fails(fn, inputs)
    truth = {(KIND, p) for p in planted} if via is not None and via in fails else set()
    if via is None and fails:  # a "healthy" case PyTorch rejects is not healthy: make it fail loudly
        truth = {(KIND, f"torch.autograd.gradcheck fails on inputs {sorted(fails)}")}
    return flag_outcome(truth, _named(res))


def wrong_backward_in_chain() -> Outcome:
    """A custom Function in the middle of a chain (its input also read by a correct add) doubles its
    weight's gradient. Upstream matmul/tanh and the add must not be blamed."""
    bad = _scaled_mul("DoubledMul", 2.0)

    def fn(x: torch.Tensor, w1: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ w1)
        return F.layer_norm(bad.apply(h, g) + h, (h.shape[-1],)).exp()

    inputs = _inputs((5, 4), (4, 3), (3,))
    return _judge(fn, inputs, {"DoubledMulBackward input 1"}, 2, gv.gradcheck(fn, inputs))


def wrong_backward_in_module() -> Outcome:
    """A module's custom gate forgets its weight's gradient (backward returns None for it); the weight is a
    parameter, not an input, so PyTorch's verdict is taken on a function of that weight."""

    def forward(ctx: Any, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(w)
        return h * torch.sigmoid(w)

    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        (w,) = ctx.saved_tensors
        return g * torch.sigmoid(w), None

    gate_fn = _function("ForgetfulGate", forward, backward)

    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(6))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return gate_fn.apply(h, self.w)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), Gate(), nn.Tanh(), nn.Linear(6, 2)).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    res = gv.gradcheck(model, (x,), model=model)

    def of_weight(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # the same model, w as an input
        return model[3](torch.tanh(gate_fn.apply(model[0](x), w)))

    return _judge(of_weight, (x, model[1].w.detach().clone().requires_grad_()),
                  {"ForgetfulGateBackward input 1 in 1"}, 1, res)


def healthy_custom_softplus_mlp() -> Outcome:
    """A correct hand-written softplus inside an MLP with layer norm and softmax: no flag."""
    softplus = _softplus()

    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        h = F.layer_norm(softplus.apply(x @ w1), (w1.shape[1],))
        return F.softmax(h @ w2, dim=-1)

    inputs = _inputs((6, 4), (4, 8), (8, 3))
    return _judge(fn, inputs, set(), None, gv.gradcheck(fn, inputs))


def healthy_symmetric_cholesky() -> Outcome:
    """cholesky of a Gram matrix: its backward returns a symmetrised gradient, which disagrees with
    shifts off the symmetric matrices, yet every leaf's gradient is right. No flag."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.cholesky(x @ x.mT + torch.eye(4, dtype=x.dtype))

    inputs = _inputs((4, 4))
    return _judge(fn, inputs, set(), None, gv.gradcheck(fn, inputs))


CASES = [
    Case("gradcheck-wrong-backward-chain", "gradcheck", wrong_backward_in_chain,
         description="custom Function doubles its weight's gradient, mid-chain"),
    Case("gradcheck-forgotten-gradient-module", "gradcheck", wrong_backward_in_module,
         description="custom gate inside a module returns None for its weight's gradient"),
    Case("healthy-gradcheck-custom-softplus", "healthy", healthy_custom_softplus_mlp,
         description="correct hand-written softplus in an MLP"),
    Case("healthy-gradcheck-cholesky", "healthy", healthy_symmetric_cholesky,
         description="symmetrised-gradient convention, not a bug"),
]

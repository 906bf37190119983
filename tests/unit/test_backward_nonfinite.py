"""record_backward(...).first_nonfinite: where a NaN/Inf gradient is born in backward, against PyTorch."""

from __future__ import annotations

import torch

import gradviz_nb as gv


def test_first_nonfinite_is_the_node_whose_backward_made_it() -> None:
    x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (torch.sqrt(x * w) * 2).sum()  # sqrt'(0) = inf: born in SqrtBackward0, finite forward
    assert torch.isfinite(loss)
    rec = gv.record_backward(loss, names={"x": x, "w": w})
    step = rec.first_nonfinite
    assert step is not None and step.op == "SqrtBackward0"
    assert all(g is None or not g.nonfinite for g in step.grad_outputs)
    # PyTorch's truth: the gradient of the sqrt's input really is non-finite, and x's is too
    loss2 = (torch.sqrt(x * w) * 2).sum()
    loss2.backward()
    assert x.grad is not None and not torch.isfinite(x.grad).all()


def test_finite_backward_has_none() -> None:
    a = torch.randn(4, requires_grad=True)
    rec = gv.record_backward((a.tanh() * 3).sum(), names={"a": a})
    assert rec.first_nonfinite is None

"""Sparse gradients (nn.Embedding(sparse=True)) through record_backward, equal to PyTorch's own."""

from __future__ import annotations

import json

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.widgets import page


def test_record_backward_of_a_sparse_embedding() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8, sparse=True), nn.Linear(8, 1))
    loss = model(torch.tensor([[1, 2, 2, 7]])).sum()
    rec = gv.record_backward(loss, model=model)
    assert model[0].weight.grad is None  # recording leaves .grad alone
    loss.backward()
    truth = model[0].weight.grad
    assert truth is not None and truth.is_sparse
    recorded = rec.leaf_grad("0.weight")
    assert torch.equal(recorded.to_dense(), truth.to_dense())
    step = next(s for s in rec.steps if s.op == "EmbeddingBackward0")
    stats = step.grad_inputs[0]
    assert stats is not None
    dense = truth.to_dense()
    assert abs(stats.norm - dense.norm().item()) <= 1e-6 * dense.norm().item()
    assert abs(stats.max_abs - dense.abs().max().item()) <= 1e-7
    assert abs(stats.mean - dense.mean().item()) <= 1e-7
    json.dumps(page.recording(rec))  # reaches the page as plain numbers
    assert any(rec.explain(s) for s in rec.steps)

"""Causes of "no gradient" name what was observed, and hold against PyTorch's own .grad."""

from __future__ import annotations

import torch
from torch import nn

import gradviz_nb as gv


class TwoStage(nn.Module):
    """body -> head, where the head's forward detaches its input: body gets no gradient."""

    def __init__(self, detach_in_head: bool = True) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = Head(detach_in_head)
        self.unused = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class Head(nn.Module):
    def __init__(self, detach: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 1)
        self.detach = detach

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc(h.detach() if self.detach else h)  # the bug: a detach in ANOTHER module than body


def test_detach_in_another_module_is_named_with_its_line() -> None:
    model = TwoStage()
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).sum()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    assert model.body.weight.grad is None and model.head.fc.weight.grad is not None  # PyTorch's truth
    flow = gv.gradient_flow(model, graph=graph, capture=cap)
    reasons = {f.target: f.reason for f in flow.flags if f.kind == "no-grad"}
    assert set(reasons) == {"body.weight", "body.bias", "unused.weight", "unused.bias"}
    assert "detach() in module 'head' at " in reasons["body.weight"]
    assert "test_flow_causes.py:" in reasons["body.weight"]
    assert "outside gv.capture" not in reasons["body.weight"]
    # the unused module: the capture saw it never called
    assert "no call of its module 'unused'" in reasons["unused.weight"]


def test_backward_not_run_yet_is_said_plainly() -> None:
    model = TwoStage(detach_in_head=False)
    model(torch.randn(3, 4)).sum()  # no backward
    flow = gv.gradient_flow(model)
    assert all(f.kind == "no-grad" for f in flow.flags) and len(flow.flags) == 6
    assert all("backward() has not run" in f.reason for f in flow.flags)
    # traced but not backpropagated: the graph holds it, so backward has not run on that loss
    loss = model(torch.randn(3, 4)).sum()
    graph = gv.trace(loss, model=model)
    model.unused(torch.randn(1, 4)).sum().backward()  # some other backward ran
    flow = gv.gradient_flow(model, graph=graph)
    assert "it is in the graph of the traced loss" in flow.flags_for("body.weight")[0].reason
    assert model.body.weight.grad is None


def test_module_run_under_no_grad_is_named() -> None:
    class Frozen(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc, self.fc = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                h = self.enc(x)
            return self.fc(h)

    model = Frozen()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4)).sum()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    assert model.enc.weight.grad is None
    reason = gv.gradient_flow(model, graph=graph, capture=cap).flags_for("enc.weight")[0].reason
    assert "ran but made no autograd node" in reason and "no_grad" in reason


def test_sparse_embedding_gradients() -> None:
    torch.manual_seed(0)
    emb = nn.Embedding(50, 8, sparse=True)
    model = nn.Sequential(emb, nn.Linear(8, 1))
    ids = torch.tensor([[1, 2, 2, 7]])
    model(ids).sum().backward()
    g = emb.weight.grad
    assert g is not None and g.is_sparse
    flow = gv.gradient_flow(model)
    s = flow.param("0.weight")
    dense = g.to_dense()
    assert s.sparse and abs(s.norm - dense.norm().item()) < 1e-5 * dense.norm().item()
    assert abs(s.max_abs - dense.abs().max().item()) < 1e-6
    assert abs(s.zero_frac - (dense == 0).double().mean().item()) < 1e-12
    from gradviz_nb.probes.flow import layer_histograms

    _, hists = layer_histograms(model)
    assert abs(sum(hists["0"]) - 1) < 1e-9 and abs(hists["0"][0] - (dense == 0).float().mean().item()) < 1e-6

"""Tensors outside the usual: meta-device models, complex gradients, sparse, integer and quantized tensors.
Each tool either works (numbers compared with torch's own) or refuses with a GradvizError."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config
from gradviz_nb.widgets.page.convert import recorded_grad


def _tiny_gpt() -> GPT2:
    return GPT2(GPT2Config(n_layer=2, n_head=2, d_model=32, vocab=64, block_size=16))


def test_capture_trace_and_widget_on_a_meta_device_model() -> None:
    with torch.device("meta"):
        model = _tiny_gpt()
    idx = torch.randint(0, 64, (2, 8), device="meta")
    with gv.capture(model) as cap:
        out = model(idx)
        loss = (out[0] if isinstance(out, tuple) else out).float().sum()
    g = gv.trace(loss, model=model, capture=cap)
    assert g.calls and len(g.leaves()) > 0
    leaf = next(iter(g.leaves().values()))
    assert g.nx.nodes[leaf]["value"] is None  # shapes and dtypes only: a meta tensor has no values
    assert all(d["value"] is None for _, d in g.nx.nodes(data=True))
    gv.GraphWidget(g)
    w = gv.GraphWidget(loss, model=model, capture=cap)
    assert json.dumps(w.graph_data)  # the page payload is plain JSON


def _complex_model() -> tuple[nn.Linear, torch.Tensor]:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Complex modules are a new feature"
        model = nn.Linear(4, 3).to(torch.complex64)
    return model, torch.randn(2, 4, dtype=torch.complex64)


def test_gradient_flow_and_monitor_use_the_complex_norm() -> None:
    model, x = _complex_model()
    monitor = gv.GradientMonitor(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Casting complex values to real discards the imaginary part"
        (model(x).abs() ** 2).sum().backward()
        monitor.step()
        flow = gv.gradient_flow(model)
    by_name = {p.name: p for p in flow.params}
    for name, p in model.named_parameters():
        assert p.grad is not None
        truth = torch.linalg.vector_norm(p.grad).item()
        assert truth != pytest.approx(torch.linalg.vector_norm(p.grad.real).item(), rel=1e-3)
        assert by_name[name].norm == pytest.approx(truth, rel=1e-5)
        assert by_name[name].max_abs == pytest.approx(p.grad.abs().max().item(), rel=1e-5)
        assert by_name[name].weight_norm == pytest.approx(torch.linalg.vector_norm(p.detach()).item(), rel=1e-5)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = math.sqrt(sum(torch.linalg.vector_norm(g).item() ** 2 for g in grads))
    assert monitor.history("norm")[-1, 0].item() == pytest.approx(total, rel=1e-5)
    monitor.close()


def test_record_backward_and_json_with_complex_gradients() -> None:
    model, x = _complex_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rec = gv.record_backward((model(x).abs() ** 2).sum(), model=model)
    leaf = rec.graph.find("weight")
    step = next(s for s in rec.steps if s.node == leaf)
    stats = step.grad_outputs[0]
    assert stats is not None
    model.zero_grad()
    (model(x).abs() ** 2).sum().backward()
    assert model.weight.grad is not None
    assert stats.norm == pytest.approx(torch.linalg.vector_norm(model.weight.grad).item(), rel=1e-5)
    assert stats.max_abs == pytest.approx(model.weight.grad.abs().max().item(), rel=1e-5)
    record = recorded_grad(stats)
    assert json.dumps(record)  # magnitudes: plain real numbers
    text = gv.to_json(gv.trace((model(x).abs() ** 2).sum(), model=model))
    assert gv.from_json(text).nx.number_of_nodes() > 0
    gv.GraphWidget(rec)


class _OddBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # quantized creation functions are deprecated
            self.register_buffer("q", torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8))
        self.register_buffer("count", torch.zeros(3, dtype=torch.long))
        self.emb = nn.Embedding(10, 3, sparse=True)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.lin(self.emb(idx) + self.q.dequantize() + self.count)


def test_integer_quantized_and_sparse_tensors_in_a_model() -> None:
    model, idx = _OddBuffers(), torch.tensor([1, 2, 3])
    with gv.capture(model) as cap:
        loss = model(idx).sum()
    g = gv.trace(loss, model=model, capture=cap, names={"idx": idx, "q": model.q, "count": model.count})
    gv.from_json(gv.to_json(g))
    gv.GraphWidget(g)
    loss.backward()
    assert model.emb.weight.grad is not None and model.emb.weight.grad.is_sparse
    flow = gv.gradient_flow(model)
    emb = next(p for p in flow.params if p.name == "emb.weight")
    assert emb.norm == pytest.approx(torch.linalg.vector_norm(model.emb.weight.grad.to_dense()).item(), rel=1e-5)
    gv.GraphWidget(gv.record_backward(model(idx).sum(), model=model))


def test_sparse_inputs_and_sparse_leaves_trace() -> None:
    weight = torch.randn(5, 3, requires_grad=True)
    sparse = torch.randn(4, 5).relu().to_sparse()
    g = gv.trace(torch.sparse.mm(sparse, weight).sum(), names={"W": weight})
    saved = [s for _, d in g.nx.nodes(data=True) for s in d["saved"]]
    assert any(s.get("bytes") for s in saved)  # the sparse tensor saved for backward is counted
    gv.from_json(gv.to_json(g))
    leaf = torch.randn(4, 5).relu().to_sparse().requires_grad_()
    with gv.capture(None) as cap:
        y = torch.sparse.sum(leaf * 2.0)
    gv.GraphWidget(y, capture=cap, names={"S": leaf})
    assert gv.to_json(gv.trace(y, names={"S": leaf}))


def test_an_integer_root_is_refused_clearly() -> None:
    with pytest.raises(gv.GradvizError, match="no autograd graph"):
        gv.trace(torch.arange(3))


def test_memory_held_of_a_meta_model_equals_the_real_one() -> None:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh())

    with torch.device("meta"):
        meta = build()
    real = build()
    on_meta = gv.memory_held(gv.trace(meta(torch.randn(4, 8, device="meta")).sum(), model=meta))
    on_cpu = gv.memory_held(gv.trace(real(torch.randn(4, 8)).sum(), model=real))
    assert repr(on_meta) == repr(on_cpu)  # the same tensors share the same (would-be) storage


def test_leaf_summaries_skip_complex_and_sparse_tensors() -> None:
    from gradviz_nb.tracing.summary import summarize

    assert summarize(torch.randn(3, dtype=torch.complex64)) is None  # never a silent real part
    assert summarize(torch.randn(4, 5).relu().to_sparse()) is None
    assert summarize(torch.randn(3)) is not None

"""Mixed precision: autocast dtypes on the graph, GradScaler-scaled gradients, thresholds that follow the dtype.

Truths come from the tensors themselves: the dtype each forward op really produced, the gradients of an
unscaled backward, and what one real SGD step does to low-precision weights.
"""

from __future__ import annotations

import copy
import gc
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.probes.flow import live_scaler

LOW = [torch.bfloat16, torch.float16]


class _OutputDtypes(TorchFunctionMode):
    """grad_fn sequence number -> dtype of the tensor that op produced (its first output), as PyTorch made it."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: dict[int, str] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.grad_fn is not None and t.output_nr == 0:
                self.dtypes.setdefault(t.grad_fn._sequence_nr(), str(t.dtype).removeprefix("torch."))
        return out


@pytest.mark.parametrize("dtype", LOW)
def test_autocast_dtypes_on_the_graph_are_the_dtypes_pytorch_produced(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    seen = _OutputDtypes()
    with torch.autocast("cpu", dtype=dtype), gv.capture(model) as cap, seen:
        loss = gpt2_loss(model)
    g = gv.trace(loss, model=model, capture=cap)
    ops = [d for _, d in g.nx.nodes(data=True) if d["kind"] == "op"]
    matched = [(d["dtype"], seen.dtypes[d["seq"]]) for d in ops if d["seq"] in seen.dtypes]
    # The mode sees the ops called from Python (about half: not those nested inside composite ops); each of
    # those must carry the dtype its tensor really had.
    assert len(matched) >= 0.4 * len(ops)
    assert all(a == b for a, b in matched), [m for m in matched if m[0] != m[1]]
    assert {d["label"] for d in ops if d["seq"] in seen.dtypes} >= {"NllLoss", "Embedding"}
    low = str(dtype).removeprefix("torch.")
    by_label: dict[str, set[str]] = {}
    for d in ops:
        by_label.setdefault(d["label"], set()).add(d["dtype"])
    assert by_label["Addmm"] == {low}  # linear layers ran in low precision ...
    assert low in by_label["ToCopy"]  # ... through casts of their fp32 weights
    leaves = g.leaves()
    assert {g.nx.nodes[leaves[n]]["dtype"] for n in leaves} == {"float32"}  # the weights stay fp32
    assert g.nx.nodes["root0"]["dtype"] == str(loss.dtype).removeprefix("torch.")


@pytest.mark.parametrize("dtype", LOW)
def test_every_node_dtype_is_the_dtype_of_the_gradient_backward_hands_it(dtype: torch.dtype) -> None:
    """The inner ops the mode cannot see (autocast's casts of the weights, addmm): a pre-hook on every node
    records the dtype of the gradient the engine really passes in, which is its forward output's dtype."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with torch.autocast("cpu", dtype=dtype):
        loss = model(torch.randn(3, 4)).float().pow(2).sum()
    g = gv.trace(loss, model=model)
    seen: dict[int, str] = {}
    stack, handles, visited = [loss.grad_fn], [], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in visited:
            continue
        visited.add(fn)

        def pre(grads: Any, seq: int = fn._sequence_nr()) -> None:
            if grads[0] is not None:
                seen[seq] = str(grads[0].dtype).removeprefix("torch.")

        if fn.name() != "torch::autograd::AccumulateGrad":
            handles.append(fn.register_prehook(pre))
        stack += [n for n, _ in fn.next_functions]
    loss.backward()
    for h in handles:
        h.remove()
    ops = {d["seq"]: (d["label"], d["dtype"]) for _, d in g.nx.nodes(data=True) if d["kind"] == "op"}
    assert set(ops) == set(seen)
    assert {seq: dt for seq, (_, dt) in ops.items()} == seen
    low = str(dtype).removeprefix("torch.")
    assert {lbl for lbl, dt in ops.values() if dt == low} >= {"Addmm", "ToCopy", "Relu"}


def _amp_backward(model: nn.Module, scaler: torch.amp.GradScaler | None) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = gpt2_loss(model)  # type: ignore[arg-type]
    (scaler.scale(loss) if scaler is not None else loss).backward()


@pytest.fixture
def no_live_scaler() -> Iterator[None]:
    gc.collect()
    assert live_scaler() is None
    yield
    gc.collect()


@pytest.mark.usefixtures("no_live_scaler")
def test_grad_scaler_loop_numbers_are_unscaled_and_scaled_gradients_are_never_called_healthy_silently() -> None:
    torch.manual_seed(0)
    truth_model = GPT2(GPT2Config.small_test())
    model = copy.deepcopy(truth_model)
    _amp_backward(truth_model, None)
    truth = gv.gradient_flow(truth_model)
    assert not truth.flags

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    _amp_backward(model, scaler)
    scale = scaler.get_scale()
    assert scale == 65536.0

    flow = gv.gradient_flow(model, scaler=scaler)  # scaled .grad, scaler given: divided out exactly
    assert flow.grad_scale == scale and not flow.flags
    for p, q in zip(flow.params, truth.params, strict=True):
        assert math.isclose(p.norm, q.norm, rel_tol=1e-5), p.name

    bare = gv.gradient_flow(model)  # scaled .grad, no scaler=: it explodes, and says why
    exploding = [f for f in bare.flags if f.kind == "exploding"]
    assert exploding and {f.kind for f in bare.flags} == {"exploding"}
    for f in exploding:
        assert "look scaled by a GradScaler" in f.reason and "65536" in f.reason and "scaler=scaler" in f.reason
        assert "does not explode" in f.reason

    scaler.unscale_(opt)  # .grad is true now: the scaler knows, nothing is divided twice
    after = gv.gradient_flow(model, scaler=scaler)
    assert after.grad_scale == 1.0 and not after.flags
    assert not gv.gradient_flow(model).flags
    for p, q in zip(after.params, truth.params, strict=True):
        assert math.isclose(p.norm, q.norm, rel_tol=1e-5), p.name
    scaler.step(opt)
    scaler.update()


@pytest.mark.usefixtures("no_live_scaler")
def test_a_really_exploding_model_gets_no_scaler_hint_without_a_scaler() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    with torch.no_grad():
        model[2].weight.mul_(1e4)  # a real explosion: the first layer's gradient is 1e4x too big
    model(torch.randn(16, 8)).pow(2).mean().backward()
    flags = gv.gradient_flow(model).flags
    assert any(f.kind == "exploding" for f in flags)
    assert not any("GradScaler" in f.reason for f in flags)


@pytest.mark.parametrize("dtype", LOW)
def test_a_healthy_low_precision_model_gets_no_false_alarm(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test()).to(dtype)
    gpt2_loss(model).backward()
    flow = gv.gradient_flow(model)
    assert {p.dtype for p in flow.params} == {str(dtype).removeprefix("torch.")}
    # LayerNorm weights (1.0) sit under the ratio test's resolution, but their zero biases move: the layer learns
    ln = flow.module("blocks.0.ln_1")
    assert ln.ratio < torch.finfo(dtype).eps
    assert not flow.flags, flow.summary()


class _Damped(nn.Module):
    """``head(1e-4 * body(x))``: body's gradient is 1e-4 of what it would be, a real vanishing path."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(torch.tanh(self.body(x)) * 1e-4)
        return out


def _step_changes(model: nn.Module, x: torch.Tensor, layer: str) -> float:
    """The fraction of ``layer``'s values one real SGD step at lr 1 changes (the truth)."""
    before = {n: p.detach().clone() for n, p in model.named_parameters() if n.startswith(layer + ".")}
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    changed = sum(int((dict(model.named_parameters())[n].detach() != v).sum()) for n, v in before.items())
    return changed / sum(v.numel() for v in before.values())


@pytest.mark.parametrize("dtype", LOW)
def test_gradients_under_the_dtype_resolution_are_vanishing_in_low_precision_only(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    wide = _Damped()
    narrow = copy.deepcopy(wide).to(dtype)
    x = torch.randn(32, 16)
    flows = {}
    for model, xin in ((wide, x), (narrow, x.to(dtype))):
        model(xin).pow(2).mean().backward()
        flows[model] = gv.gradient_flow(model)
        moved = _step_changes(model, xin, "body")
        if model is wide:
            assert moved > 0.9  # float32 resolves the small step: the layer learns, slowly
        else:
            assert moved < 0.01  # the truth: in low precision the step rounds away
    assert not flows[wide].flags
    name = str(dtype).removeprefix("torch.")
    assert {(f.kind, f.target) for f in flows[narrow].flags} == {("vanishing", "body")}
    assert f"{name}'s resolution" in flows[narrow].flags[0].reason


def test_float16_gradients_near_its_maximum_are_exploding() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 1)).half()
    with torch.no_grad():
        model[0].weight.mul_(100.0)  # large weights: a healthy gradient/weight ratio for large gradients
    x = torch.rand(64, 8).half() * 30  # positive inputs: the batch sums the gradient elements to ~1e3
    model(x).sum().backward()
    g = model[0].weight.grad
    assert g is not None and torch.isfinite(g).all()
    assert not torch.isfinite(g * 100).all()  # the truth: 100x more (a larger batch, a loss scale) overflows
    flags = gv.gradient_flow(model).flags
    hit = [f for f in flags if f.kind == "exploding" and f.target == "0"]
    assert hit and "float16's maximum" in hit[0].reason
    wide = copy.deepcopy(model).float()
    wide(x.float()).sum().backward()
    assert not any(f.target == "0" for f in gv.gradient_flow(wide).flags)  # float32 has room

"""Engine calls inside a backward: a reentrant checkpoint runs its block's backward in a nested
``torch.autograd.backward``; the recorder and the armed pass follow it.

PyTorch's truth: a plain backward's ``.grad`` (NaN in the checkpointed block's parameter, the input's finite)
and our own hooks on the inner nodes, installed by wrapping the block's forward output during recomputation.
"""

from __future__ import annotations

import threading

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import gradviz_nb as gv


class Hidden(nn.Module):
    """A NaN that reaches only this block's parameter: sqrt at 0 sends inf, times the zero it received."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.p = nn.Parameter(torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x)) + torch.sqrt(self.p).sum() * 0.0


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = Hidden()
        self.c = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(checkpoint(self.b, self.a(x), use_reentrant=True)).sum()


def test_a_nan_inside_a_reentrant_checkpoint_is_found_by_the_recording_and_the_armed_pass() -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4)
    with gv.capture(model) as cap:
        loss = model(x)
    truth = Net()
    truth.load_state_dict(model.state_dict())
    truth(x).backward()
    assert torch.isnan(truth.b.p.grad).all() and torch.isfinite(truth.a.weight.grad).all()  # PyTorch's truth
    rec = gv.record_backward(loss, model=model, capture=cap)
    stop = rec.find("nonfinite")
    assert stop.hit and stop.step is not None and stop.step.op == "SqrtBackward0", stop
    assert "born at" in stop.text and " in b" in stop.text  # inside the checkpointed box
    assert rec.graph.nx.nodes[stop.node]["call"] == "b"
    got = rec.leaf_grad("b.p")
    assert torch.isnan(got).all() and torch.allclose(rec.leaf_grad("b.fc.weight"), truth.b.fc.weight.grad)
    armed = gv.record_backward(loss, model=model, capture=cap, until="nonfinite")
    assert armed.armed is not None and armed.armed.hit and armed.armed.first == stop.index
    assert all(p.grad is None for p in model.parameters())  # neither pass left a gradient behind
    w = gv.GraphWidget(rec)  # the nested steps are drawable: their nodes are in the page's graph
    shown = {n["id"] for n in w.graph_data["nodes"]} if "nodes" in w.graph_data else set(rec.graph.nx)
    assert stop.node in shown or stop.node in rec.graph.nx


def test_every_inner_step_pytorch_ran_is_recorded_in_engine_order() -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4)
    ran: list[str] = []
    original = model.b.forward

    def hooked(inp: torch.Tensor) -> torch.Tensor:
        out = original(inp)
        if torch.is_grad_enabled() and torch._C._current_graph_task_id() != -1:  # the recomputation
            stack, seen = [out.grad_fn], set()
            while stack:
                fn = stack.pop()
                if fn is None or fn in seen:
                    continue
                seen.add(fn)
                fn.register_hook(lambda *_, fn=fn: ran.append(fn.name().rsplit("::", 1)[-1]))
                stack.extend(n for n, _ in fn.next_functions)
        return out

    model.b.forward = hooked  # type: ignore[method-assign]
    loss = model(x)
    rec = gv.record_backward(loss, model=model)
    inner = [s.op for s in rec.steps if "/" in s.node]
    assert inner == ran and len(inner) >= 5


def test_other_threads_backward_is_not_followed() -> None:
    # While a recording follows nested calls, another thread's own backward runs untouched.
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4)
    loss = model(x)
    other = nn.Linear(3, 1)
    done: list[bool] = []

    def work() -> None:
        for _ in range(20):
            other(torch.randn(2, 3)).sum().backward()
        done.append(True)

    t = threading.Thread(target=work)
    t.start()
    for _ in range(3):
        gv.record_backward(loss, model=model)
    t.join()
    assert done == [True] and torch.autograd.backward.__module__ == "torch.autograd"


def test_an_autograd_grad_inside_a_custom_backward_is_followed() -> None:
    ran: list[str] = []

    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x, w)  # type: ignore[attr-defined]
            return x * w

        @staticmethod
        def backward(ctx: object, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x, w = ctx.saved_tensors  # type: ignore[attr-defined]
            with torch.enable_grad():
                xx = x.detach().requires_grad_()
                y = torch.sin(xx * w.detach()).sum()
                stack = [y.grad_fn]  # PyTorch's truth: our own hooks on the nested graph's nodes
                while stack:
                    fn = stack.pop()
                    if fn is not None and fn.name() != "torch::autograd::AccumulateGrad":
                        fn.register_hook(lambda *_, fn=fn: ran.append(fn.name()))
                        stack.extend(n for n, _ in fn.next_functions)
                (gx,) = torch.autograd.grad(y, xx)
            return g * w + gx * 0, g * x

    x, w = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    loss = F.apply(x, w).sum()
    rec = gv.record_backward(loss, names={"x": x, "w": w})
    inner = [s for s in rec.steps if "/" in s.node]
    assert [s.op for s in inner] == ran == ["SumBackward0", "SinBackward0", "MulBackward0"]
    outer = next(s for s in rec.steps if s.op == "FBackward")
    assert all(s.index < outer.index for s in inner)  # in the engine's order: inside the outer node's run


def test_the_nested_nodes_reach_the_loss_through_the_checkpoint_and_their_box_counts_them() -> None:
    # PyTorch's truth: a plain backward gives every parameter a gradient, those inside the checkpoint too.
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4)
    truth = Net()
    truth.load_state_dict(model.state_dict())
    truth(x).backward()
    assert all(p.grad is not None for p in truth.parameters())
    with gv.capture(model) as cap:
        loss = model(x)
    rec = gv.record_backward(loss, model=model, capture=cap)
    g = rec.graph.nx
    (outer,) = [n for n, op in g.nodes(data="op") if op == "CheckpointFunctionBackward"]
    nested = [n for n in g if n.startswith(f"{outer}/")]
    assert nested and any(u in nested for u in g.predecessors(outer))  # the recomputed output feeds its node
    assert rec.graph.what_if().lost == []  # so no leaf inside is called cut off (the page's box said "4 lose")
    sizes = {c["id"]: c["size"] for c in g.graph["calls"]}
    assert sizes["b"] == sum(1 for _, call in g.nodes(data="call") if call == "b") == len(nested) + 1

"""The stepper's statistics at the edges of every dtype, against PyTorch's own truth.

The truth is the gradients PyTorch's engine really passed, taken by our own hooks on every autograd node
(``node.register_hook``), measured in float64: never the recording's numbers.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv


def engine_truth(loss: torch.Tensor) -> list[tuple[str, list[torch.Tensor | None]]]:
    """(node name, gradients it sent) for every node, in the order the engine ran them; the graph is kept."""
    seen: list[tuple[str, list[torch.Tensor | None]]] = []
    nodes: list[Any] = []
    stack, visited = [loss.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in visited:
            continue
        visited.add(fn)
        nodes.append(fn)
        stack.extend(nxt for nxt, _ in fn.next_functions)

    def hook(fn: Any) -> Any:
        def record(sent: tuple[Any, ...], _: tuple[Any, ...]) -> None:
            grads = [g.detach().clone() if isinstance(g, torch.Tensor) else None for g in sent]
            seen.append((fn.name().rsplit("::", 1)[-1], grads))
        return record

    handles = [fn.register_hook(hook(fn)) for fn in nodes]
    leaves = [fn.variable for fn in nodes if hasattr(fn, "variable")]
    saved = [t.grad for t in leaves]
    try:
        loss.backward(retain_graph=True)
    finally:
        for h in handles:
            h.remove()
        for t, g in zip(leaves, saved, strict=True):
            t.grad = g
    return seen


def norm64(g: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(g.detach().double()))


@pytest.mark.parametrize("magnitude", [1e-30, 1e30, 1e-40, 1e38])
def test_float32_norms_are_exact_at_any_magnitude(magnitude: float) -> None:
    w = torch.full((8, 8), 1.0, requires_grad=True)
    scale = torch.tensor(magnitude / 8)
    loss = (torch.tanh(w) * scale).sum()
    truth = engine_truth(loss)
    rec = gv.record_backward(loss, names={"w": w})
    assert [s.op for s in rec.steps] == [name for name, _ in truth]
    for step, (_, sent) in zip(rec.steps, truth, strict=True):
        for got, want in zip(step.grad_inputs, sent, strict=True):
            if want is None:
                continue
            assert got is not None and not got.nonfinite
            assert math.isclose(got.norm, norm64(want), rel_tol=1e-6), (step.op, got.norm, norm64(want))
            assert math.isclose(got.max_abs, float(want.abs().max()), rel_tol=1e-6)
            assert math.isclose(got.mean, float(want.double().mean()), rel_tol=1e-5)
    stop = rec.find("above", threshold=magnitude / 100)
    assert stop.hit and "inf" not in stop.text and "norm 0 " not in stop.text


def test_jump_finds_the_31_decade_step_and_above_prints_a_finite_norm() -> None:
    # Backward sends 1e20, then 1e31 (a float32 norm of it would be inf), then back to ~1: the largest change
    # of norm is the 31-decade step into x, not the 20-decade one the float32 norms leave as the only finite.
    x = torch.full((4,), 1.0, requires_grad=True)
    loss = ((x * torch.tensor(1e-31)) * torch.tensor(1e11)).sum() * torch.tensor(1e20)
    truth = engine_truth(loss)
    rec = gv.record_backward(loss, names={"x": x})
    best: tuple[float, int] | None = None
    received = 1.0  # the root's gradient; then what each node sent is what the next one received (a chain)
    for i, (_, sent) in enumerate(truth):
        norms = [norm64(g) for g in sent if g is not None]
        if norms and norms[0] > 0:
            size = abs(math.log10(norms[0] / received))
            if best is None or size > best[0]:
                best = (size, i)
            received = norms[0]
    assert best is not None and best[0] > 30
    jump = rec.find("jump")
    assert jump.index == best[1] and rec.steps[jump.index].op == "MulBackward0", jump
    assert not rec.find("above", threshold=1e35).hit  # no gradient is "inf"
    above = rec.find("above", threshold=1e29)
    assert above.hit and "inf" not in above.text and "e+31" in above.text, above


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_with_loss_scaling_raises_no_false_alarm(dtype: torch.dtype) -> None:
    # A half-precision model with a GradScaler-sized loss scale: every gradient is finite, but their sums
    # in the gradient's own dtype overflow (float16 past 65,504; bfloat16 past 3.4e38).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64)).to(dtype)
    x = torch.rand(32, 64).to(dtype)
    # Each of the 2,048 outputs receives scale / 2048: 1,024 in float16, 2**119 in bfloat16 (finite).
    scale = 2.0**21 if dtype == torch.float16 else 2.0**130
    loss = model(x).double().mean() * scale
    truth = engine_truth(loss)
    assert all(torch.isfinite(g).all() for _, sent in truth for g in sent if g is not None)  # PyTorch: finite
    sums = [g.sum() for _, sent in truth for g in sent if g is not None and g.dtype == dtype]
    assert any(not torch.isfinite(s) for s in sums)  # the trap: a sum in the dtype overflows
    rec = gv.record_backward(loss, model=model)
    assert not any(g.nonfinite for s in rec.steps for g in (*s.grad_inputs, *s.grad_outputs) if g is not None)
    assert not rec.find("nonfinite").hit
    for step, (_, sent) in zip(rec.steps, truth, strict=True):
        for got, want in zip(step.grad_inputs, sent, strict=True):
            if want is not None and got is not None:
                assert math.isclose(got.norm, norm64(want), rel_tol=1e-5), (step.op, got.norm, norm64(want))
    armed = gv.record_backward(loss, model=model, until="nonfinite")
    assert armed.armed is not None and not armed.armed.hit and armed.steps == []


def test_the_armed_pass_checks_complex_gradients() -> None:
    z = torch.tensor([1 + 1j, 2 - 1j], requires_grad=True)
    bad = torch.tensor([complex(math.nan, math.nan), 1 + 0j])
    loss = (z * bad).abs().sum()
    truth = engine_truth(loss)
    assert any(not torch.isfinite(torch.view_as_real(g)).all() for _, sent in truth for g in sent
               if g is not None and g.is_complex())
    armed = gv.record_backward(loss, names={"z": z}, until="nonfinite")
    assert armed.armed is not None and armed.armed.hit
    full = gv.record_backward(loss, names={"z": z})
    assert armed.find("nonfinite").index == full.find("nonfinite").index >= 0

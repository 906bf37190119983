"""What the doctor reads once and shares (gradviz_nb/doctor/observe.py, steps.py, probes/flow/stats.py).

Per-parameter gradient statistics are computed once per set of gradients: an optimizer step right after the
backward reuses the backward's, judged by identity and version counters, and by ``StepWatch.escapes`` (a
``.data`` or ``.numpy()`` reach past the counters). Each test that proves a reuse also proves the case where
reusing would be wrong reads again.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

import gradviz_nb as gv
import gradviz_nb.probes.flow.result as flow_result
from gradviz_nb.doctor.observe import observe_step
from gradviz_nb.probes.flow import param_stats


def _mlp() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.randn(16, 4), torch.randn(16, 1)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = flow_result.param_stats

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(flow_result, "param_stats", counted)
    return calls


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
          between: Callable[[], None] = lambda: None) -> Callable[[], None]:
    def step() -> None:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        between()
        opt.step()

    return step


def test_param_stats_run_once_per_step_of_one_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    model, opt, x, y = _mlp()
    calls = _counting(monkeypatch)
    dx = gv.doctor(_step(model, opt, x, y), model, opt, steps=3)
    assert dx.ok, dx.summary()
    assert calls[0] == 3  # one per step: the optimizer step's look reuses the backward's (4 calls per 2 steps before)


@pytest.mark.parametrize("edit", ["inplace", "data", "numpy"])
def test_gradients_edited_between_backward_and_step_are_read_again(edit: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A write into ``.grad`` after backward: by a torch op (its version counter moves), through ``.data`` or
    a numpy view (no counter moves: ``StepWatch.escapes`` says so). The flow the step ends with is the edited
    gradient's, against PyTorch's own norm."""
    model, opt, x, y = _mlp()
    weight = model[0].weight

    def between() -> None:
        assert weight.grad is not None
        if edit == "inplace":
            weight.grad.mul_(0.5)
        elif edit == "data":
            weight.grad.data.mul_(0.5)
        else:
            view = weight.grad.numpy()
            view *= 0.5

    calls = _counting(monkeypatch)
    rec = observe_step(_step(model, opt, x, y, between), model, opt, 1, None)
    assert rec.error is None and rec.flow is not None and calls[0] == 2  # after backward, and before the step
    stats = {p.name: p for p in rec.flow.params}
    assert stats["0.weight"].norm == pytest.approx(_edited_norm(), rel=1e-5)


def _edited_norm() -> float:
    """PyTorch's gradient of the first weight at the weights the step started with, halved."""
    model, _, x, y = _mlp()
    nn.functional.mse_loss(model(x), y).backward()
    assert model[0].weight.grad is not None
    return float(model[0].weight.grad.norm()) * 0.5


def test_optimizer_step_update_uses_the_step_start_copy_only_while_unwritten() -> None:
    """The update an optimizer step made is measured against the values just before it. Unwritten since the
    step began, those are the step's starting copy (no second copy of the model); written through ``.data``
    (no version counter moves) they are copied again, so the write is not counted as the optimizer's."""
    model, _, x, y = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # an optimizer step that moves nothing
    weight = model[0].weight

    def shift() -> None:
        weight.data.add_(1.0)

    rec = observe_step(_step(model, opt, x, y, shift), model, opt, 1, None)
    [step] = rec.events.optimizer_steps
    assert step.update["0.weight"] == 0.0  # lr 0: the .data write before the step is not its update
    assert "0.weight" in rec.moved  # ... but the parameter did move during the step

    model, _, x, y = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model[0].weight.detach().clone()
    rec = observe_step(_step(model, opt, x, y), model, opt, 1, None)
    [step] = rec.events.optimizer_steps
    assert step.update["0.weight"] == pytest.approx(float((model[0].weight.detach() - before).norm()), rel=1e-6)
    assert step.update_max["0.weight"] == pytest.approx(float((model[0].weight.detach() - before).abs().max()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("magnitude", [1e-25, 1.0, 1e25])
def test_param_stats_are_exact_at_any_magnitude(dtype: torch.dtype, magnitude: float) -> None:
    """Norm, max-abs, mean and zero fraction against a float64 reference; a float32 norm of 1e-25 elements
    was 0.0 before (and of 1e25, inf)."""
    finfo = torch.finfo(dtype)
    if magnitude < finfo.tiny * 1e3 or magnitude * 1e3 > finfo.max:
        pytest.skip(f"{dtype} cannot hold {magnitude}")
    torch.manual_seed(0)
    layer = nn.Linear(64, 32).to(dtype)
    g = torch.randn(32, 64, dtype=torch.float64)
    g[0] = 0.0
    layer.weight.grad = (g * magnitude).to(dtype)
    ref = layer.weight.grad.double()
    [w, b] = param_stats(layer)
    assert w.norm == pytest.approx(float(ref.norm()), rel=1e-3)
    assert w.max_abs == pytest.approx(float(ref.abs().max()), rel=1e-6)
    assert w.mean == pytest.approx(float(ref.mean()), rel=1e-2, abs=1e-3 * magnitude)
    assert w.zero_frac == float((ref == 0).double().mean()) and w.nonfinite == 0
    assert not b.has_grad and math.isnan(b.norm)


def test_param_stats_count_nonfinite_zeros_sparse_complex_and_empty() -> None:
    t = nn.Parameter(torch.zeros(6))
    t.grad = torch.tensor([1.0, 0.0, float("nan"), float("inf"), -2.0, 0.0])
    [s] = param_stats(nn.ParameterList([t]))
    assert s.nonfinite == 2 and s.zero_frac == pytest.approx(2 / 6) and math.isnan(s.max_abs)
    emb = nn.Embedding(10, 3, sparse=True)
    emb(torch.tensor([1, 1, 4])).sum().backward()
    [e] = param_stats(emb)
    dense = emb.weight.grad.to_dense()
    assert e.sparse and e.norm == pytest.approx(float(dense.norm())) and e.zero_frac == pytest.approx(8 / 10)
    c = nn.Parameter(torch.zeros(3, dtype=torch.complex64))
    c.grad = torch.tensor([3 + 4j, 0, 1j], dtype=torch.complex64)
    [z] = param_stats(nn.ParameterList([c]))
    assert z.norm == pytest.approx(float(np.linalg.norm([5, 0, 1]))) and z.max_abs == pytest.approx(5.0)
    assert z.zero_frac == pytest.approx(1 / 3)
    empty = nn.Parameter(torch.zeros(0))
    empty.grad = torch.zeros(0)
    [m] = param_stats(nn.ParameterList([empty]))
    assert m.has_grad and m.norm == 0.0 and m.nonfinite == 0


def test_the_first_step_compares_with_the_snapshot_copies_it_is_given() -> None:
    """``values`` (the doctor's snapshot, taken just before the first step) stands in for a second copy of the
    model: what the step moved is judged against it, and a copy of another shape is not used."""
    model, opt, x, y = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # nothing moves
    given = {n: p.detach().clone() for n, p in model.named_parameters()}
    given["2.bias"] = given["2.bias"] + 1.0  # a copy that differs from the parameter: only its use can show it
    given["0.bias"] = torch.zeros(3)  # wrong shape: a copy of its own is taken instead
    rec = observe_step(_step(model, opt, x, y), model, opt, 1, None, values=given)
    assert rec.moved == {"2.bias"}
    rec = observe_step(_step(model, opt, x, y), model, opt, 1, None)
    assert rec.moved == set()


def test_doctor_leaves_the_model_as_a_full_copy_had_it() -> None:
    model, opt, x, y = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    _step(model, opt, x, y)()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    moments = [s["exp_avg"].clone() for s in opt.state.values()]
    dx = gv.doctor(_step(model, opt, x, y), model, opt, steps=3)
    assert dx.ok and dx.moved == {n for n, _ in model.named_parameters()}
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert all(torch.equal(m, s["exp_avg"]) for m, s in zip(moments, opt.state.values(), strict=True))

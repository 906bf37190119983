"""``torch.compile``d models: capture, trace, gradient_flow, GradientMonitor and the doctor.

Every number is checked against the same model run eagerly with the same weights and input. Compiling is
slow on small CPUs, so the models are tiny, ``dynamic=False``, and only the MLP goes through inductor
(code generation, a C++ compiler); the others use ``aot_eager``, which builds the same AOTAutograd
``CompiledFunctionBackward`` node without generating code.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, gpt2_loss
from gradviz_nb.tracing.compiled import COMPILED_LABEL, COMPILED_OP, real_name, unwrap_compiled


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    with warnings.catch_warnings():
        # "Using torch.compile(module) when there are global hooks on modules": capture's hooks, expected
        warnings.filterwarnings("ignore", message=".*global hooks on modules.*")
        yield
    torch._dynamo.reset()


def _compile(model: nn.Module, backend: str = "aot_eager") -> nn.Module:
    compiled: nn.Module = torch.compile(model, backend=backend, dynamic=False)  # type: ignore[assignment]
    return compiled


def _ops(g: gv.AutogradGraph) -> list[dict[str, Any]]:
    return [d for _, d in g.nx.nodes(data=True) if d["kind"] == "op"]


def _regions(g: gv.AutogradGraph) -> list[dict[str, Any]]:
    return [d for d in _ops(g) if d["op"] == COMPILED_OP]


def _real_names(model: nn.Module) -> set[str]:
    return {n for n, _ in model.named_parameters(remove_duplicate=False)}


def _assert_same_flow(a: gv.GradientFlow, b: gv.GradientFlow) -> None:
    assert [p.names for p in a.params] == [p.names for p in b.params]
    for pa, pb in zip(a.params, b.params, strict=True):
        for stat in ("norm", "max_abs", "mean", "weight_norm", "ratio"):
            assert math.isclose(getattr(pa, stat), getattr(pb, stat), rel_tol=1e-4, abs_tol=1e-8), (pa.name, stat)
    assert [(f.kind, f.target) for f in a.flags] == [(f.kind, f.target) for f in b.flags]


def test_unwrap_and_real_names() -> None:
    model = MLP()
    compiled = _compile(model)
    assert unwrap_compiled(compiled) is model and unwrap_compiled(model) is model
    assert real_name("_orig_mod.fc1.weight") == "fc1.weight"
    assert real_name("body._orig_mod.0.weight") == "body.0.weight"
    assert real_name("_orig_mod") == ""
    assert real_name("orig_mod_x.weight") == "orig_mod_x.weight"


def test_compiled_mlp_with_inductor_is_one_named_region_and_flows_like_eager() -> None:
    torch.manual_seed(0)
    eager = MLP()
    model = copy.deepcopy(eager)
    compiled = _compile(model, backend="inductor")
    x = torch.randn(5, 4)
    torch._dynamo.utils.counters.clear()
    # One compile thread: no worker pool to start (seconds on a small, busy CPU) for a graph this small.
    with torch._inductor.config.patch(compile_threads=1), gv.capture(compiled) as cap:
        loss = compiled(x).pow(2).sum()
    assert not torch._dynamo.utils.counters["graph_break"], "capture's hooks split the compiled graph"
    g = gv.trace(loss, model=compiled, capture=cap)
    regions = _regions(g)
    assert len(regions) == 1
    assert regions[0]["label"] == COMPILED_LABEL and regions[0]["compiled"] is True
    assert regions[0]["module"] == ""  # the whole model was compiled: its region is the model itself
    assert regions[0]["dtype"] == "float32" and regions[0]["shape"] == [5, 3]
    assert {d["label"] for d in _ops(g)} == {"Sum", "Pow", COMPILED_LABEL}  # the loss ops ran eagerly
    assert set(g.leaves()) == _real_names(eager)
    assert g.nx.graph["modules"][""]["type"] == "MLP" and "fc1" in g.nx.graph["modules"]
    assert not any("_orig_mod" in p for p in g.nx.graph["modules"])
    note = next(n for n in g.notes if "compiled region" in n)
    assert "torch.compiler.disable" in note and "without compile" in note
    assert not any(n.startswith("No module boxes") for n in g.notes)

    with torch._inductor.config.patch(compile_threads=1):
        loss.backward()  # the backward graph is compiled now
    ref = eager(x).pow(2).sum()
    ref.backward()
    assert math.isclose(loss.item(), ref.item(), rel_tol=1e-5)
    _assert_same_flow(gv.gradient_flow(compiled), gv.gradient_flow(eager))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.body(x))
        return out


def test_a_compiled_submodule_is_a_region_in_its_box_beside_eager_boxes() -> None:
    torch.manual_seed(0)
    eager = _Net()
    net = copy.deepcopy(eager)
    net.body = _compile(net.body)  # type: ignore[assignment]
    assert "body._orig_mod.0.weight" in dict(net.named_parameters())
    x = torch.randn(3, 4)
    with gv.capture(net) as cap:
        loss = net(x).sum()
    g = gv.trace(loss, model=net, capture=cap)
    regions = _regions(g)
    assert len(regions) == 1 and regions[0]["module"] == "body" and regions[0]["call"] == "body"
    assert {c["id"]: c["type"] for c in g.calls} == {"body": "Sequential", "head": "Linear"}
    assert {d["label"] for d in _ops(g) if d["module"] == "head"} >= {"Addmm"}  # eager ops keep their box
    assert set(g.leaves()) == _real_names(eager)
    assert "body.0" in g.nx.graph["modules"] and not any("_orig_mod" in p for p in g.nx.graph["modules"])

    loss.backward()
    eager(x).sum().backward()
    flow = gv.gradient_flow(net)
    _assert_same_flow(flow, gv.gradient_flow(eager))
    assert flow.module("body").type == "Sequential"


def _gpt2_pair() -> tuple[GPT2, GPT2, nn.Module]:
    torch.manual_seed(0)
    eager = GPT2(GPT2Config.small_test())
    model = copy.deepcopy(eager)
    return eager, model, _compile(model)


def test_compiled_gpt2_traces_to_one_region_with_every_parameter_named() -> None:
    eager, _, compiled = _gpt2_pair()
    torch._dynamo.utils.counters.clear()
    with gv.capture(compiled) as cap:
        loss = gpt2_loss(compiled)  # type: ignore[arg-type]
    assert not torch._dynamo.utils.counters["graph_break"]
    g = gv.trace(loss, model=compiled, capture=cap)
    assert [d["label"] for d in _ops(g)] == [COMPILED_LABEL]  # the loss is computed inside the model
    leaves = g.leaves()
    assert set(leaves) == _real_names(eager)  # the tied wte / lm_head weight under both names
    assert leaves["wte.weight"] == leaves["lm_head.weight"]
    loss.backward()
    gpt2_loss(eager).backward()
    _assert_same_flow(gv.gradient_flow(compiled, graph=g), gv.gradient_flow(eager))


def _train(model: nn.Module, forward: Callable[[], torch.Tensor], monitor: gv.GradientMonitor,
           opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        forward().backward()
        monitor.step()
        opt.step()


def test_monitor_on_a_compiled_gpt2_records_what_the_eager_model_records() -> None:
    eager, model, compiled = _gpt2_pair()
    runs = []
    for net, run in ((eager, eager), (model, compiled)):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        monitor = gv.GradientMonitor(run, optimizer=opt)
        _train(net, lambda run=run: gpt2_loss(run), monitor, opt, steps=3)  # type: ignore[misc]
        runs.append(monitor)
    want, got = runs
    assert got.layers == want.layers and not any("_orig_mod" in layer for layer in got.layers)
    assert got.steps == want.steps == [1, 2, 3]
    for stat in ("norm", "ratio", "update"):
        assert torch.allclose(got.history(stat), want.history(stat), rtol=1e-4, atol=1e-8, equal_nan=True), stat
    assert [(s, f.kind, f.target) for s, f in got.flags()] == [(s, f.kind, f.target) for s, f in want.flags()]


def test_doctor_on_a_compiled_model_finds_what_it_finds_eagerly() -> None:
    torch.manual_seed(0)
    eager = _Net()
    eager.head.bias.requires_grad_(False)  # a real finding on both: head.bias is frozen and never moves
    model = copy.deepcopy(eager)
    compiled = _compile(model)
    x, y = torch.randn(6, 4), torch.randn(6, 2)
    verdicts = []
    for net, run in ((eager, eager), (model, compiled)):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

        def step(run: nn.Module = run, opt: torch.optim.Optimizer = opt) -> None:
            opt.zero_grad()
            nn.functional.mse_loss(run(x), y).backward()
            opt.step()

        before = {n: p.detach().clone() for n, p in net.named_parameters()}
        dx = gv.doctor(step, run, opt)
        assert all(torch.equal(p, before[n]) for n, p in net.named_parameters())  # restored
        verdicts.append(sorted((f.kind, f.target) for f in dx.findings))
    assert verdicts[1] == verdicts[0] == [("frozen", "head.bias")]

"""Breakpoints on a backward recording (gradviz_nb/probes/backward/breakpoints.py), against PyTorch's own truth.

The truth comes from tensor hooks registered in the forward pass (``t.register_hook``): the gradient each
intermediate tensor really received, in the order the engine produced them; never from the recording.
A recording of over 2,000 steps makes sure the search is over a real length.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.backward import Stop
from gradviz_nb.widgets.page import graph as graph_payload
from gradviz_nb.widgets.page.convert import recording as recording_payload
from gradviz_nb.widgets.page.finite_json import finite_json

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "js"
ESBUILD = JS / "node_modules" / ".bin" / "esbuild"


class Chain(nn.Module):
    """``depth`` layers of h = tanh(h * w + b) (5 engine steps each), with one chosen fault at layer ``at``."""

    def __init__(self, depth: int, at: int, fault: str) -> None:
        super().__init__()
        self.w = nn.ParameterList([nn.Parameter(torch.full((4,), 0.9)) for _ in range(depth)])
        self.b = nn.ParameterList([nn.Parameter(torch.full((4,), 0.1)) for _ in range(depth)])
        self.at, self.fault = at, fault
        self.seen: list[tuple[int, str, torch.Tensor]] = []  # (layer, tensor, gradient) in arrival order

    def watch(self, layer: int, what: str, t: torch.Tensor) -> torch.Tensor:
        t.register_hook(lambda g: self.seen.append((layer, what, g.detach().clone())))
        return t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (w, b) in enumerate(zip(self.w, self.b, strict=True)):
            if i == self.at:
                h = self.watch(i, "into fault", h * 1.0)
                if self.fault == "nan":  # sqrt(u) at u == 0: backward sends inf, then inf * 0 = NaN
                    h = torch.sqrt(self.watch(i, "sqrt input", h * h) * torch.tensor([0.0, 1, 1, 1]))
            h = self.watch(i, "out", torch.tanh(h * w + b))
            if i == self.at and self.fault == "zero":  # a dead ReLU on the last layer: every input below zero
                h = torch.relu(self.watch(i, "relu input", h - 100.0))
            if i == self.at and self.fault == "scale":  # the last layer's output times a million
                h = self.watch(i, "scaled input", h * 1.0) * 1e6
        return h.sum()


def record(fault: str, depth: int = 410, at: int = 400) -> tuple[Chain, gv.BackwardRecording]:
    model = Chain(depth, at, fault)
    with gv.capture(model) as cap:
        loss = model(torch.ones(4))
    rec = gv.record_backward(loss, model=model, capture=cap)
    return model, rec


def test_a_recording_of_over_2000_steps_stops_where_pytorch_made_the_first_nan() -> None:
    model, rec = record("nan")
    assert len(rec.steps) >= 2000
    # PyTorch's truth: the first watched tensor whose gradient is not finite is sqrt's input (sqrt sent inf).
    first_bad = next((layer, what) for layer, what, g in model.seen if not torch.isfinite(g).all())
    assert first_bad == (400, "sqrt input")
    stop = rec.find("nonfinite")
    assert stop.hit and stop.step is not None and stop.step.op == "SqrtBackward0", stop
    assert str(stop).startswith(f"born at step {stop.index + 1} (SqrtBackward0")  # counted from 1, as the stepper
    assert "received finite gradients" in str(stop)
    # every step before it received and sent finite gradients only
    for s in rec.steps[: stop.index]:
        assert not any(g is not None and g.nonfinite for g in (*s.grad_inputs, *s.grad_outputs))
    assert not stop.healed  # x * 0 keeps a NaN: nothing after it turns it back into finite values


def test_healed_nans_are_named() -> None:
    # sqrt(u) at u == 0 sends inf; torch.where's backward sends 0 where its mask is False: a finite .grad.
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    m = torch.tensor([True, False])
    seen: list[torch.Tensor] = []

    def loss() -> torch.Tensor:
        u = torch.where(m, a, torch.zeros(2))
        u.register_hook(lambda g: seen.append(g.detach().clone()))
        return torch.sqrt(u).sum()

    loss().backward()
    assert not torch.isfinite(seen[0]).all() and torch.isfinite(a.grad).all()  # PyTorch: born, then healed
    a.grad = None
    rec = gv.record_backward(loss(), names={"a": a})
    stop = rec.find("nonfinite")
    assert stop.step is not None and stop.step.op == "SqrtBackward0", stop
    assert len(stop.healed) == 1 and stop.healed[0].op.startswith("WhereBackward"), stop.healed
    assert "healed 1 time later" in str(stop), stop


def test_first_exact_zero_is_the_dead_relu() -> None:
    model, rec = record("zero", at=409)
    truth = next((layer, what) for layer, what, g in model.seen if not g.any())
    assert truth == (409, "relu input")  # the first all-zero gradient PyTorch produced
    stop = rec.find("zero")
    assert stop.hit and stop.step is not None and stop.step.op == "ReluBackward0", stop
    assert "sent exactly zero" in str(stop)


def test_largest_jump_is_the_scale_by_a_million() -> None:
    model, rec = record("scale", at=409)
    stop = rec.find("jump")
    assert stop.hit and stop.step is not None and stop.step.op == "MulBackward0", stop
    # truth, measured by PyTorch: the gradient into the scaled tensor is 1e6 times what the product received
    into = next(g.norm().item() for layer, what, g in model.seen if (layer, what) == (409, "scaled input"))
    factor = float(str(stop).rsplit("(x", 1)[1].rstrip(")"))
    assert math.isclose(factor, 1e6, rel_tol=1e-3), stop
    received = stop.step.grad_outputs[0]
    assert received is not None and math.isclose(into / received.norm, 1e6, rel_tol=1e-3)


def test_threshold_stops_at_the_first_norm_above_it_and_says_when_it_never_does() -> None:
    _, rec = record("scale", depth=40, at=39)
    stop = rec.find("above", threshold=1e3)
    assert stop.hit and stop.step is not None
    assert all(g is None or g.norm <= 1e3 for s in rec.steps[: stop.index] for g in (*s.grad_inputs, *s.grad_outputs))
    never = rec.find("above", threshold=1e30)
    assert not never.hit and never.index == -1 and str(never).startswith("never hit")
    clean = record("none", depth=10, at=-1)[1]
    assert not clean.find("nonfinite").hit and "never hit" in str(clean.find("nonfinite"))
    assert not clean.find("zero").hit


class Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x.pow(2).sum()


def test_module_box_and_leaf_spans_follow_the_engine_order() -> None:
    torch.manual_seed(0)
    model = Blocks()
    order: list[str] = []
    for n, p in model.named_parameters():
        p.register_hook(lambda g, n=n: order.append(n))  # PyTorch's truth: when each parameter's grad arrives
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4))
    rec = gv.record_backward(loss, model=model, capture=cap)
    box = rec.find(module="blocks.1")
    assert box.hit and box.last is not None and box.index <= box.last.index
    inside = [s for s in rec.steps if box.index <= s.index <= box.last.index]
    nodes = rec.graph.nx.nodes
    assert all((nodes[s.node].get("call") or "").startswith("blocks.1") for s in inside)
    # blocks.2's parameters are delivered before anything of blocks.1 runs; blocks.0's after its last step
    leaf = rec.find(leaf="blocks.1.0.weight")
    assert leaf.hit and box.index <= leaf.index <= box.last.index
    assert order.index("blocks.2.0.weight") < order.index("blocks.1.0.weight") < order.index("blocks.0.0.weight")
    w2 = rec.find(leaf="blocks.2.0.weight")
    w0 = rec.find(leaf="blocks.0.0.weight")
    assert w2.index < box.index and w0.index > box.last.index
    assert "first delivery at step" in str(leaf)


def test_bad_breakpoints_say_what_to_give() -> None:
    _, rec = record("none", depth=3, at=-1)
    for call, words in (
        (lambda: rec.find("nan"), "give one of"),
        (lambda: rec.find("above"), "threshold="),
        (lambda: rec.find("above", threshold=float("nan")), "finite number"),
        (lambda: rec.find(module="nope"), "no module call"),
    ):
        with pytest.raises(GradvizError, match=words):
            call()


# --- the page's "Run to" rules (js/src/features/stepper/breakpoints.ts) agree with rec.find ---------------


@pytest.fixture(scope="module")
def run_to_cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("node") is None or not ESBUILD.exists():
        why = "node or js/node_modules missing: cd js && npm ci"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    out = tmp_path_factory.mktemp("runto") / "breakpoints_cli.mjs"
    subprocess.run([str(ESBUILD), "src/features/stepper/breakpoints_cli.ts", "--bundle", "--platform=node",
                    "--format=esm", f"--outfile={out}", "--log-level=warning"], cwd=JS, check=True)
    return out


def page_stops(cli: Path, rec: gv.BackwardRecording, queries: list[tuple[str, str, float]]) -> dict[str, Any]:
    """The page's stops for ``queries`` ((rule, target, threshold)) on the recording as the widget sends it."""
    body = finite_json({"payload": graph_payload(rec.graph), "recording": recording_payload(rec), "queries": queries})
    done = subprocess.run(["node", str(cli)], input=json.dumps(body, allow_nan=False), capture_output=True,
                          text=True, check=True)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def python_stop(rec: gv.BackwardRecording, rule: str, target: str, threshold: float) -> Stop:
    if rule == "module":
        return rec.find(module=target)
    if rule == "leaf":
        return rec.find(leaf=(rec.graph.nx.nodes[target].get("names") or [target])[0])
    return rec.find(rule, threshold=threshold if rule == "above" else None)


def recordings() -> list[tuple[str, gv.BackwardRecording]]:
    faults = ("nan", "zero", "scale", "none")
    out = [(fault, record(fault, depth=60, at=50 if fault != "zero" else 59)[1]) for fault in faults]
    torch.manual_seed(0)
    model = Blocks()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4))
    out.append(("blocks", gv.record_backward(loss, model=model, capture=cap)))
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    u = torch.where(torch.tensor([True, False]), a, torch.zeros(2))
    out.append(("healed", gv.record_backward(torch.sqrt(u).sum(), names={"a": a})))
    return out


def test_page_run_to_stops_where_rec_find_stops(run_to_cli: Path) -> None:
    checked = 0
    for name, rec in recordings():
        leaves = [n for n, d in rec.graph.nx.nodes(data=True) if d["kind"] == "leaf"]
        calls = [c["id"] for c in rec.graph.calls]
        norms = sorted(g.norm for s in rec.steps for g in s.grad_outputs if g is not None and math.isfinite(g.norm))
        thresholds = [norms[len(norms) // 2], norms[-1] * 0.99, norms[-1] * 10] if norms else [1.0]
        queries = [(r, "", 0.0) for r in ("nonfinite", "zero", "jump")] + [("above", "", t) for t in thresholds]
        queries += [("module", c, 0.0) for c in calls] + [("leaf", leaf, 0.0) for leaf in leaves[:6]]
        got = page_stops(run_to_cli, rec, queries)["stops"]
        for (rule, target, threshold), page in zip(queries, got, strict=True):
            want = python_stop(rec, rule, target, threshold)
            assert (page["index"], page["node"]) == (want.index, want.node), (name, rule, target, page, want)
            assert page["text"] == want.text, (name, rule, target)
            assert page["last"] == (want.last.index if want.last is not None else -1), (name, rule, target)
            assert page["healed"] == [s.index for s in want.healed], (name, rule)
            checked += 1
    assert checked >= 40


def test_page_run_to_agrees_on_a_recording_of_over_2000_steps(run_to_cli: Path) -> None:
    _, rec = record("nan")
    assert len(rec.steps) >= 2000
    got = page_stops(run_to_cli, rec, [("nonfinite", "", 0.0), ("jump", "", 0.0)])["stops"]
    want = [rec.find(r) for r in ("nonfinite", "jump")]
    assert [(s["index"], s["text"]) for s in got] == [(w.index, w.text) for w in want]


def test_widget_run_to_moves_the_stepper_and_leaves_it_when_never_hit() -> None:
    _, rec = record("nan", depth=20, at=10)
    w = gv.GraphWidget(rec)
    stop = w.run_to(rec, "nonfinite")
    assert stop.hit and w.step == stop.index == rec.find("nonfinite").index
    clean = record("none", depth=5, at=-1)[1]
    w = gv.GraphWidget(clean)
    w.step = 3
    never = w.run_to(clean, "nonfinite")
    assert not never.hit and w.step == 3 and "never hit" in never.text

"""gv.why: each cause named from evidence (op, source line, module, measured numbers), checked against
PyTorch's own truth, from every source (the model with fn, a traced graph, a Diagnosis); prove() shows the
gradient appear in a re-run and leaves the model as it was."""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import gradviz_nb as gv

X = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
Y = torch.randn(6, 1, generator=torch.Generator().manual_seed(2))


def line_of(marker: str) -> str:
    """``file:line`` of the line in this file that holds ``marker`` (where the bug is planted)."""
    lines, start = inspect.getsourcelines(Net.forward)
    offset = next(i for i, text in enumerate(lines) if marker in text)
    return f"{os.path.relpath(__file__)}:{start + offset}"  # relative to the working directory


class Cut(torch.autograd.Function):
    """A custom Function whose backward drops the gradient."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: object, g: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(g)


class Net(nn.Module):
    def __init__(self, bug: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bug = bug
        self.enc = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.enc(x)
        bug = self.bug
        if bug == "detach":
            h = h.detach()  # BUG detach
        elif bug == "data":
            h = h.data  # BUG data
        elif bug == "item":
            h = torch.ones_like(x[:, :1]) * torch.tensor(h.mean().item())  # BUG item
        elif bug == "tolist":
            h = torch.tensor(h.tolist())  # BUG tolist
        elif bug == "numpy":
            h = torch.from_numpy(h.detach().numpy())  # BUG numpy
        elif bug == "long":
            h = h.long().float()  # BUG long
        elif bug == "round":
            h = torch.round(h)  # BUG round
        elif bug == "sign":
            h = h.sign()  # BUG sign
        elif bug == "gt":
            h = (h > 0).float()  # BUG gt
        elif bug == "relu":
            h = torch.relu(h - 50)  # BUG relu
        elif bug == "clamp":
            h = h.clamp(min=100.0)  # BUG clamp
        elif bug == "sigmoid":
            h = torch.sigmoid(h + 15)  # BUG sigmoid
        elif bug == "hook":
            h.register_hook(lambda g: g * 0)  # BUG hook
        elif bug == "custom":
            h = Cut.apply(h)  # BUG custom
        elif bug == "no_grad":
            with torch.no_grad():
                h = self.enc(x)  # BUG no_grad
        return self.head(h if h.dim() == 2 and h.shape[-1] == 8 else h.expand(-1, 8).float())


def run(bug: str, name: str = "enc.weight") -> tuple[gv.AutogradGraph, Net, torch.Tensor | None]:
    """The forward under gv.capture, then backward: the graph, the model, and PyTorch's truth (.grad)."""
    model = Net(bug)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gv.capture(model) as cap:
            loss = nn.functional.mse_loss(model(X), Y)
        graph = gv.trace(loss, model=model, capture=cap)
        loss.backward()
    return graph, model, model.get_parameter(name).grad


CUTS = [("detach", "detached", "none"), ("data", "data-access", "none"), ("item", "left-graph", "none"),
        ("tolist", "left-graph", "none"), ("numpy", "left-graph", "none"), ("long", "left-graph", "none"),
        ("gt", "zero-derivative", "none"), ("no_grad", "no-grad", "none"), ("round", "zero-derivative", "zero"),
        ("sign", "zero-derivative", "zero"), ("relu", "saturated", "zero"), ("clamp", "saturated", "zero"),
        ("sigmoid", "saturated", "tiny"), ("hook", "hook-zeroed", "zero"), ("custom", "custom-backward", "zero")]


@pytest.mark.parametrize(("bug", "kind", "status"), CUTS)
def test_each_cause_is_named_with_its_line_from_the_traced_graph(bug: str, kind: str, status: str) -> None:
    graph, _, grad = run(bug)
    truth = "none" if grad is None else "zero" if not grad.any() else "tiny"
    assert truth == status, f"the planted bug does not do what the test claims: {truth}"
    w = gv.why(graph, "enc.weight")
    assert (w.status, w.kind) == (status, kind), w.text()
    if kind != "custom-backward":  # a custom Function's backward has no forward line of its own
        assert line_of(f"# BUG {bug}") in w.cause + w.evidence, w.text()
    assert w.fix and set(w.to_dict()) == {"name", "status", "kind", "cause", "evidence", "fix", "node"}


def test_a_healthy_parameter_is_ok_and_never_blamed() -> None:
    graph, _, grad = run("none")
    assert grad is not None and grad.any()
    w = gv.why(graph, "enc.weight")
    assert (w.status, w.kind) == ("ok", None) and w.node == graph.leaves()["enc.weight"]


def test_the_saturated_fraction_is_the_measured_one() -> None:
    h = Net("relu").enc(X) - 50
    truth = float((h <= 0).float().mean())  # relu's flat region, by PyTorch
    graph, _, _ = run("relu")
    w = gv.why(graph, "enc.weight")
    assert f"{truth:.1%}" in w.cause and w.node in graph.nx


def test_a_value_that_left_the_graph_names_where_it_came_back() -> None:
    graph, _, _ = run("item")
    w = gv.why(graph, "enc.weight")
    assert ".item()" in w.cause and "torch.tensor(...)" in w.evidence and "no detach" not in w.evidence


def test_the_hook_is_named_and_measured() -> None:
    graph, _, _ = run("hook")
    w = gv.why(graph, "enc.weight")
    assert "<lambda>" in w.cause and "returned norm 0" in w.evidence
    assert "received a gradient of norm 0 " not in w.evidence


def test_frozen_parent_unused_and_a_hook_on_the_parameter() -> None:
    model = Net("none")
    model.enc.requires_grad_(False)
    w = gv.why(model, "enc.weight", fn=lambda: model(X).sum())
    assert (w.status, w.kind) == ("none", "frozen") and "'enc'" in w.cause
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1), nn.Linear(3, 3))
    w = gv.why(model, "2.weight", fn=lambda: model[1](model[0](X)).sum())
    assert (w.status, w.kind) == ("none", "unused-parameter") and "'2'" in w.cause
    model[0].weight.register_hook(lambda g: torch.zeros_like(g))
    w = gv.why(model, "0.weight", fn=lambda: model[1](model[0](X)).sum())
    assert (w.status, w.kind) == ("zero", "hook-zeroed")
    assert w.prove().proven


class Lora(nn.Module):
    """A frozen embedding and base layer, a LoRA adapter, a reentrant checkpoint over the block."""

    def __init__(self, reentrant: bool, b_zero: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(10, 8).requires_grad_(False)
        self.base = nn.Linear(8, 8).requires_grad_(False)
        self.lora_A = nn.Linear(8, 2, bias=False)
        self.lora_B = nn.Linear(2, 8, bias=False)
        nn.init.zeros_(self.lora_B.weight) if b_zero else nn.init.normal_(self.lora_B.weight)
        self.head = nn.Linear(8, 1)
        self.reentrant = reentrant

    def block(self, h: torch.Tensor) -> torch.Tensor:
        return self.base(h) + self.lora_B(self.lora_A(h))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        h = checkpoint(self.block, h, use_reentrant=self.reentrant)
        return self.head(h)


IDS = torch.randint(0, 10, (3, 4), generator=torch.Generator().manual_seed(0))


def test_reentrant_checkpoint_is_named_and_proven_without_touching_the_model() -> None:
    model = Lora(reentrant=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = gv.why(model, "lora_A.weight", fn=lambda: model(IDS).mean())
        assert (w.status, w.kind) == ("none", "reentrant-checkpoint"), w.text()
        proof = w.prove()
    assert proof.proven and proof.before is None and proof.after and proof.after > 0
    truth = Lora(reentrant=False)
    truth(IDS).mean().backward()
    assert truth.lora_A.weight.grad is not None
    assert proof.after == pytest.approx(float(truth.lora_A.weight.grad.norm()), rel=1e-5)
    assert all(torch.equal(p, before[n]) and p.grad is None for n, p in model.named_parameters())


def test_lora_a_at_initialisation_is_expected_not_flagged() -> None:
    model = Lora(reentrant=False, b_zero=True)
    w = gv.why(model, "lora_A.weight", fn=lambda: model(IDS).mean())
    assert (w.status, w.kind) == ("zero", None) and "expected" in w.cause


def test_prediction_detached_while_weight_decay_keeps_the_loss_alive() -> None:
    model = Net("none")

    def loss() -> torch.Tensor:
        pred = model(X).detach()
        return nn.functional.mse_loss(pred, Y) + 1e-3 * sum((p ** 2).sum() for p in model.parameters())

    w = gv.why(model, "enc.weight", fn=loss)
    assert (w.status, w.kind) == ("scaled", "detached") and "penalty" in w.cause
    proof = w.prove()
    assert proof.proven and proof.before is not None and proof.after is not None and proof.after > proof.before


@pytest.mark.parametrize("bug", ["detach", "data", "item", "long", "no_grad"])
def test_prove_applies_the_mechanical_fix_and_matches_the_clean_model(bug: str) -> None:
    model = Net(bug)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    fn: Callable[[], torch.Tensor] = lambda: nn.functional.mse_loss(model(X), Y)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proof = gv.why(model, "enc.weight", fn=fn).prove()
    assert proof.proven, proof.text()
    assert all(torch.equal(p, before[n]) and p.grad is None for n, p in model.named_parameters())


@pytest.mark.parametrize("bug", ["round", "relu", "custom"])
def test_prove_says_when_no_fix_is_mechanical(bug: str) -> None:
    model = Net(bug)
    proof = gv.why(model, "enc.weight", fn=lambda: model(X).sum()).prove()
    assert not proof.applied and "no mechanical fix" in proof.text()


def test_diagnosis_why_is_the_doctors_answer() -> None:
    model = Net("item")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        nn.functional.mse_loss(model(X), Y).backward()
        opt.step()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dx = gv.doctor(step, model, opt)
    finding = next(f for f in dx.findings if f.target in ("enc", "enc.weight"))
    assert finding.kind == "left-graph" and line_of("# BUG item") in finding.message
    w = dx.why("enc.weight")
    assert (w.status, w.kind) == ("none", "left-graph") and w.to_dict() == gv.why(dx, "enc.weight").to_dict()


def test_bad_names_are_refused_with_close_matches() -> None:
    graph, _, _ = run("none")
    with pytest.raises(gv.GradvizError, match=r"enc\.weight"):
        gv.why(graph, "enc.wieght")
    with pytest.raises(gv.GradvizError, match="fn="):
        gv.why(Net("none"), "enc.weight")


def test_a_modules_backward_hook_and_a_weight_fed_by_a_dead_relu() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.0), nn.Linear(8, 1))
    handle = model[1].register_full_backward_hook(lambda mod, gi, go: (torch.zeros_like(gi[0]),))
    fn: Callable[[], torch.Tensor] = lambda: nn.functional.mse_loss(model(X), Y)  # noqa: E731
    w = gv.why(model, "0.weight", fn=fn)
    assert (w.status, w.kind) == ("zero", "hook-zeroed") and "'1'" in w.cause, w.text()
    assert w.prove().proven and len(model[1]._backward_hooks) == 1  # left out in the re-run only
    handle.remove()
    nn.init.constant_(model[0].bias, -1e4)  # every ReLU unit dead: 3.weight's input is all zero
    w = gv.why(model, "3.weight", fn=fn)
    assert (w.status, w.kind) == ("zero", "saturated") and "input" in w.cause, w.text()

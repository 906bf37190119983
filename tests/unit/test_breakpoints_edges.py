"""Breakpoints at the edges: tied and reused weights, arguments that cannot all apply, quiet armed recordings.

PyTorch's truth is taken by our own hooks on every autograd node: which node sent a gradient into a leaf's
``AccumulateGrad`` buffer, in the order the engine ran them, and the gradient it sent there.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.errors import GradvizError
from tests.unit.test_breakpoints import page_stops, python_stop, run_to_cli  # noqa: F401 (a fixture)


def deliveries_truth(loss: torch.Tensor, leaf: torch.Tensor) -> list[tuple[str, float]]:
    """(node name, norm sent into ``leaf``) for each node that sent into its AccumulateGrad, engine order."""
    nodes: list[Any] = []
    stack, seen = [loss.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        nodes.append(fn)
        stack.extend(nxt for nxt, _ in fn.next_functions)
    got: list[tuple[str, float]] = []

    def hook(fn: Any) -> Any:
        slots = [i for i, (nxt, _) in enumerate(fn.next_functions) if getattr(nxt, "variable", None) is leaf]

        def record(sent: tuple[Any, ...], _: tuple[Any, ...]) -> None:
            parts = [sent[i] for i in slots if isinstance(sent[i], torch.Tensor)]
            if parts:
                got.append((fn.name(), math.sqrt(sum(float(p.double().pow(2).sum()) for p in parts))))
        return record

    handles = [fn.register_hook(hook(fn)) for fn in nodes]
    saved = leaf.grad
    leaf.grad = None
    try:
        loss.backward(retain_graph=True)
    finally:
        for h in handles:
            h.remove()
        leaf.grad = saved
    return got


class Tied(nn.Module):
    """An embedding whose weight is also the output head's (GPT-2's tied weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.mid = nn.Linear(6, 6)
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mid(self.emb(x)))).logsumexp(-1).mean()


class Reused(nn.Module):
    """One layer applied four times."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(5, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x = torch.tanh(self.layer(x))
        return x.sum()


@pytest.mark.parametrize(("make", "asked", "uses"), [(Tied, "head.weight", 2), (Tied, "emb.weight", 2),
                                                     (Reused, "layer.weight", 4), (Reused, "layer.bias", 4)])
def test_a_tied_or_reused_weight_gets_every_delivery(make: Any, asked: str, uses: int) -> None:
    torch.manual_seed(0)
    model = make()
    x = torch.randint(0, 11, (3, 4)) if make is Tied else torch.randn(3, 5)
    with gv.capture(model) as cap:
        loss = model(x)
    leaf = dict(model.named_parameters(remove_duplicate=False))[asked]
    truth = deliveries_truth(loss, leaf)
    assert len(truth) == uses  # PyTorch delivered once per use
    rec = gv.record_backward(loss, model=model, capture=cap)
    stop = rec.find(leaf=asked)
    assert stop.hit and stop.last is not None and len(stop.each) == uses
    assert [s.op for s in stop.each] == [name for name, _ in truth]
    assert stop.step is stop.each[0] and stop.last is stop.each[-1]
    node = rec.graph.find(asked)
    for s, (_, norm) in zip(stop.each, truth, strict=True):
        sent = [s.grad_inputs[d.input_nr] for d in s.deliveries if d.target == node]
        got = math.sqrt(sum(g.norm ** 2 for g in sent if g is not None))
        assert math.isclose(got, norm, rel_tol=1e-5)
    assert stop.text.startswith(f"{asked}: first delivery at ") and f"{uses} in all" in stop.text
    other = {"head.weight": "emb.weight", "emb.weight": "head.weight"}.get(asked)
    if other is not None:
        assert other not in stop.text  # named as the user asked, never by the tied twin's name


def small() -> tuple[nn.Module, torch.Tensor, gv.Capture]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 3)).sum()
    return model, loss, cap


def test_arguments_that_cannot_all_apply_are_refused_naming_the_valid_ones() -> None:
    model, loss, _cap = small()
    rec = gv.record_backward(loss, model=model)
    for kwargs, words in (
        ({"rule": "nonfinite", "module": "0"}, "cannot apply together"),
        ({"module": "0", "leaf": "0.weight"}, "cannot apply together"),
        ({"rule": "zero", "threshold": 1.0}, "threshold= only applies to 'above'"),
        ({"rule": ["nonfinite"]}, "one rule as a string"),
        ({"rule": "above", "threshold": True}, "finite number"),
        ({"module": 3}, "as a string"),
    ):
        with pytest.raises(GradvizError, match=words) as err:
            rec.find(**kwargs)
        assert "rec.find('above', threshold=1e3)" in str(err.value) or "finite number" in str(err.value)


def test_run_to_refuses_a_recording_the_widget_does_not_show() -> None:
    model, loss, _cap = small()
    rec = gv.record_backward(loss, model=model)
    other = gv.record_backward(model(torch.randn(2, 3)).sum() * 1e3, model=model)
    w = gv.GraphWidget(rec)
    w.step = 1
    with pytest.raises(GradvizError, match="not the recording this widget shows"):
        w.run_to(other, "jump")
    assert w.step == 1
    assert w.run_to(rec, "jump").index == rec.find("jump").index == w.step


def test_a_quiet_armed_recording_answers_every_rule_or_says_it_kept_no_steps() -> None:
    model, loss, cap = small()
    full = gv.record_backward(loss, model=model, capture=cap)
    rec = gv.record_backward(loss, model=model, capture=cap, until="nonfinite")
    assert rec.armed is not None and not rec.armed.hit and not rec.steps
    assert not rec.find("nonfinite").hit and f"checked all {len(full.steps)} steps" in rec.find("nonfinite").text
    # PyTorch ran steps inside module 0: the quiet recording must not say none ran, only that it kept none
    assert full.find(module="0").hit
    for stop in (rec.find(module="0"), rec.find(leaf="0.weight"), rec.find("zero"), rec.find("jump"),
                 rec.find("above", threshold=0.0)):
        assert not stop.hit and "kept no steps" in stop.text and "without until=" in stop.text
        assert "ran no step" not in stop.text
    with pytest.raises(GradvizError, match="kept no steps"):
        rec.leaf_grad("0.weight")
    with pytest.raises(GradvizError, match="pass_index"):
        full.leaf_grad("0.weight", pass_index=7)


def test_arming_a_freed_loss_says_what_to_do() -> None:
    model, loss, _cap = small()
    loss.backward()
    with pytest.raises(GradvizError, match=r"already freed.*Run the forward again"):
        gv.record_backward(loss, model=model, until="nonfinite")


def test_the_page_gives_the_same_deliveries_for_tied_and_reused_weights(request: pytest.FixtureRequest) -> None:
    cli = request.getfixturevalue("run_to_cli")
    for make, x in ((Tied, torch.randint(0, 11, (3, 4))), (Reused, torch.randn(3, 5))):
        torch.manual_seed(0)
        model = make()
        with gv.capture(model) as cap:
            loss = model(x)
        rec = gv.record_backward(loss, model=model, capture=cap)
        leaves = [n for n, d in rec.graph.nx.nodes(data=True) if d["kind"] == "leaf"]
        got = page_stops(cli, rec, [("leaf", leaf, 0.0) for leaf in leaves])["stops"]
        for leaf, page in zip(leaves, got, strict=True):
            want = python_stop(rec, "leaf", leaf, 0.0)
            assert (page["index"], page["text"], page["last"]) == (
                want.index, want.text, want.last.index if want.last else -1)
            assert page["each"] == [s.index for s in want.each]

"""``gv.record_backward(loss, until="nonfinite")``: a cheap armed pass, the full record only when it fires.

The truth is PyTorch's own: a plain backward's gradients (tensor hooks) and ``.grad`` before and after.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.errors import GradvizError
from tests.unit.test_breakpoints import record


def test_armed_clean_backward_records_nothing_and_changes_no_grad() -> None:
    model, full = record("none", depth=30, at=-1)
    with gv.capture(model) as cap:
        loss = model(torch.ones(4))
    before = [p.grad for p in model.parameters()]
    rec = gv.record_backward(loss, model=model, capture=cap, until="nonfinite")
    assert rec.armed is not None and not rec.armed.hit and rec.steps == []
    assert rec.armed.steps == len(full.steps)  # every engine step ran and was checked
    assert [p.grad for p in model.parameters()] == before  # the same objects (None here)
    stop = rec.find("nonfinite")
    assert not stop.hit and f"checked all {len(full.steps)} steps" in stop.text


def test_armed_backward_that_fires_is_recorded_in_full_and_stops_where_the_full_record_does() -> None:
    model, full = record("nan", depth=30, at=20)
    with gv.capture(model) as cap:
        loss = model(torch.ones(4))
    rec = gv.record_backward(loss, model=model, capture=cap, until="nonfinite")
    assert rec.armed is not None and rec.armed.hit and len(rec.steps) == len(full.steps)
    want = full.find("nonfinite")
    assert rec.armed.first == want.index == rec.find("nonfinite").index
    assert want.step is not None and want.step.op == "SqrtBackward0"  # PyTorch: sqrt at 0 sends inf


def test_an_overflowing_sum_in_a_buffer_is_caught() -> None:
    # Two finite gradients of 3e38 into one float32 buffer: the sum is inf, no node sent a non-finite one.
    a = torch.tensor([1.0], requires_grad=True)
    h = a * 1.0
    loss = (h * 3e38).sum() + (h * 3e38).sum()
    rec = gv.record_backward(loss, names={"a": a}, until="nonfinite")
    assert rec.armed is not None and rec.armed.hit
    assert rec.steps[rec.armed.first].op == "MulBackward0" and rec.find("nonfinite").index == rec.armed.first


def test_bad_until_says_what_to_give() -> None:
    a = torch.ones(2, requires_grad=True)
    with pytest.raises(GradvizError, match="'nonfinite'"):
        gv.record_backward((a * 2).sum(), until="nan")
    with pytest.raises(GradvizError, match="into="):
        gv.record_backward((a * 2).sum(), until="nonfinite", accumulate=True)


def test_a_quiet_armed_recording_keeps_no_graph_and_traces_it_when_asked() -> None:
    # The armed pass only hooks the nodes; a quiet result traces its graph when first asked, and holds the
    # loss weakly: a training loop arming every step keeps no step's activations alive.
    w = torch.ones(3, requires_grad=True)

    def step() -> tuple[torch.Tensor, weakref.ref[torch.Tensor]]:
        h = w * 2  # kept alive only by the graph: MulBackward0 saves it for backward
        return (h * h).sum(), weakref.ref(h)

    loss, held = step()
    rec = gv.record_backward(loss, names={"w": w}, until="nonfinite")
    assert rec.armed is not None and not rec.armed.hit and w.grad is None
    assert sorted(rec.graph.nx.nodes(data="op")) == sorted(gv.trace(loss, names={"w": w}).nx.nodes(data="op"))

    other, held_other = step()
    quiet = gv.record_backward(other, names={"w": w}, until="nonfinite")
    del other
    gc.collect()
    assert held() is not None and held_other() is None  # the quiet recording kept nothing of its step
    with pytest.raises(GradvizError, match=r"kept no graph.*gv\.trace"):
        _ = quiet.graph
    del loss
    gc.collect()
    assert held() is None and list(rec.graph.leaves()) == ["w"]  # traced before: the graph data stays

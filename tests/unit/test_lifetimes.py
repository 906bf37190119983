"""What gradviz_nb holds on to: a watched model that is dropped, a closed widget, a closed monitor all go."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module

import gradviz_nb as gv
from gradviz_nb.tracing.capture import watched


def _global_hooks() -> tuple[int, int]:
    return len(torch_module._global_forward_pre_hooks), len(torch_module._global_forward_hooks)


def test_a_dropped_watched_model_is_collected_with_its_hooks() -> None:
    before = _global_hooks()
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    gv.watch(model)
    g = gv.trace(model(torch.randn(4, 2)).sum())
    assert g.calls  # the watch worked
    assert _global_hooks() != before
    model_ref, weight_ref = weakref.ref(model), weakref.ref(model[0].weight)
    del model
    gc.collect()
    assert model_ref() is None and weight_ref() is None
    assert _global_hooks() == before
    assert watched() == []


def test_watch_twice_and_unwatch_still_work() -> None:
    model = nn.Linear(2, 2)
    assert gv.watch(model) is gv.watch(model)
    gv.unwatch(model)
    assert watched() == []
    gv.unwatch(model)  # a no-op


def test_a_closed_widget_and_its_graph_are_collected() -> None:
    model = nn.Linear(3, 2)
    loss = model(torch.randn(4, 3)).sum()
    w = gv.GraphWidget(loss, model=model)
    widget_ref, graph_ref = weakref.ref(w), weakref.ref(w.graph)
    w.close()
    assert w.graph_data == {} and repr(w) == "<GraphWidget: closed>"
    w.close()  # twice is fine
    del w
    gc.collect()
    assert graph_ref() is None
    assert widget_ref() is None


def test_a_closed_recording_widget_lets_go_of_the_recording() -> None:
    model = nn.Linear(3, 2)
    rec = gv.record_backward(model(torch.randn(4, 3)).sum(), model=model)
    w = gv.GraphWidget(rec)
    assert w.recording
    rec_ref, widget_ref = weakref.ref(rec), weakref.ref(w)
    del rec
    w.close()
    assert w.recording == {}
    del w
    gc.collect()
    assert rec_ref() is None and widget_ref() is None


def test_a_closed_monitor_holds_nothing() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = gv.GradientMonitor(model, optimizer=opt)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        monitor.step()
        opt.step()
    monitor.close()
    assert len(monitor.steps) == 2  # the history stays readable
    with pytest.raises(gv.GradvizError, match="closed"):
        monitor.step()
    weight_ref, model_ref, opt_ref = weakref.ref(model[0].weight), weakref.ref(model), weakref.ref(opt)
    monitor_ref = weakref.ref(monitor)
    del model, opt
    gc.collect()
    assert weight_ref() is None and model_ref() is None and opt_ref() is None
    del monitor
    gc.collect()
    assert monitor_ref() is None

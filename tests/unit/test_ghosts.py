"""Ghost tensors: detached results and frozen parameters, seen during capture, drawn where paths are cut."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import gradviz_nb as gv


class Detaches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.enc(x)
        return self.head(h.detach() * 2 + h.data + h).sum()


def traced(model: nn.Module, x: torch.Tensor) -> gv.AutogradGraph:
    with gv.capture(model) as cap:
        loss = model(x)
    return gv.trace(loss, model=model, capture=cap)


def test_detach_and_data_become_ghosts_between_source_and_consumer() -> None:
    g = traced(Detaches(), torch.randn(3, 4))
    ghosts = g.nx.graph["ghosts"]
    assert sorted(gh["label"] for gh in ghosts) == [".data", "detach()"]
    enc_out = next(n for n, d in g.nx.nodes(data=True) if d["call"] == "enc" and d["op"] == "AddmmBackward0")
    detach = next(gh for gh in ghosts if gh["label"] == "detach()")
    assert detach["source"] == enc_out and detach["shape"] == [3, 4]
    # `* 2` and `+ h.data` make no node (nothing requires grad); the path re-enters the graph at `+ h`
    assert [g.nx.nodes[t]["op"] for t in detach["targets"]] == ["AddBackward0"]
    data = next(gh for gh in ghosts if gh["label"] == ".data")
    assert [g.nx.nodes[t]["op"] for t in data["targets"]] == ["AddBackward0"]


def test_frozen_parameter_is_a_ghost_feeding_its_layer() -> None:
    model = Detaches()
    model.enc.weight.requires_grad_(False)
    g = traced(model, torch.randn(3, 4))
    frozen = [gh for gh in g.nx.graph["ghosts"] if gh["kind"] == "frozen"]
    assert [gh["label"] for gh in frozen] == ["enc.weight"]
    assert frozen[0]["call"] == "enc" and frozen[0]["targets"]
    assert all(g.nx.nodes[t]["call"] == "enc" for t in frozen[0]["targets"])
    assert "enc.weight" not in g.leaves()  # not in the backward graph: only the ghost shows it


def test_a_fully_frozen_input_layer_is_followed_to_the_first_op_in_the_graph() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    model[0].requires_grad_(False)
    g = traced(model, torch.randn(3, 4))
    frozen = {gh["label"]: gh for gh in g.nx.graph["ghosts"]}
    assert set(frozen) == {"0.weight", "0.bias"}
    # layer 0 makes no node at all (nothing requires grad); its output enters the graph at layer 2
    assert {g.nx.nodes[t]["call"] for t in frozen["0.weight"]["targets"]} == {"2"}


def test_capture_leaves_no_function_mode_behind_even_on_exception() -> None:
    model = Detaches()
    with gv.capture(model):
        model(torch.randn(3, 4))
    assert torch._C._len_torch_function_stack() == 0
    with pytest.raises(RuntimeError), gv.capture(model):
        model(torch.randn(3, 5))
    assert torch._C._len_torch_function_stack() == 0


def test_observing_keeps_no_activation_alive() -> None:
    model = Detaches()
    with gv.capture(model) as cap:
        x = torch.randn(3, 4)
        h = model.enc(x).detach()
        ref = weakref.ref(h)
        del h
    gc.collect()
    assert ref() is None and len(cap.ghosts) == 1


def test_without_ghosts_and_under_watch_nothing_is_observed() -> None:
    model = Detaches()
    with gv.capture(model, ghosts=False) as cap:
        model(torch.randn(3, 4))
    assert cap.ghosts == []
    watching = gv.watch(model)
    try:
        model(torch.randn(3, 4))
        assert watching.ghosts == [] and torch._C._len_torch_function_stack() == 0
    finally:
        gv.unwatch(model)

"""A loss already NaN/Inf: the stop says the forward pass made it, and names the op and module as
``gv.find_nonfinite`` does (its watch of every op is the truth here; PyTorch's loss value says it is NaN)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.tracing.places import source_line
from tests.unit.test_breakpoints import page_stops, run_to_cli  # noqa: F401 (run_to_cli: a fixture)


class Block(nn.Module):
    def __init__(self, broken: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.broken = broken

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if self.broken:
            h = torch.log(h - h) * 0.0  # log(0) = -inf, then -inf * 0 = NaN
        return torch.tanh(h)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(False), Block(True), Block(False))
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x)).sum()


def test_a_forward_born_nan_is_named_where_find_nonfinite_names_it() -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4)
    with gv.capture(model) as cap:
        loss = model(x)
    assert torch.isnan(loss)  # PyTorch: the forward made it
    truth = gv.find_nonfinite(lambda: model(x).backward(), model=model)
    assert truth is not None and truth.phase == "forward"
    rec = gv.record_backward(loss, model=model, capture=cap)
    stop = rec.find("nonfinite")
    assert stop.hit and "made in the forward pass" in stop.text and "born at step" not in stop.text
    assert rec.forward is not None
    assert (rec.forward.op, rec.forward.module, rec.forward.cause, rec.forward.kind) == (
        truth.op, truth.module, truth.cause, truth.kind)
    assert rec.forward.site == truth.site and truth.line  # the user's line too, by the same rule
    assert f"{truth.summary().splitlines()[0]}: {truth.cause}" in stop.text
    armed = gv.record_backward(loss, model=model, capture=cap, until="nonfinite")
    assert armed.find("nonfinite").text == stop.text


class LogOfNegative(nn.Module):
    """A forward that makes NaN itself: the log of values that are all negative."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x) - 100.0
        return torch.log(h)  # the line the origin must name


class WithLog(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = LogOfNegative()
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.inner(x)).sum()


def _log_line() -> str:
    lines, first = inspect.getsourcelines(LogOfNegative.forward)
    offset = next(i for i, text in enumerate(lines) if "torch.log(h)" in text)
    return source_line(str(inspect.getsourcefile(LogOfNegative)), first + offset)  # as every answer words a place


def test_the_recording_names_the_source_line_find_nonfinite_names() -> None:
    torch.manual_seed(0)
    model, x = WithLog(), torch.randn(3, 4)
    with gv.capture(model) as cap:
        loss = model(x)
    assert torch.isnan(loss)  # PyTorch: the forward made it
    truth = gv.find_nonfinite(lambda: model(x).backward(), model=model)
    assert truth is not None and truth.phase == "forward" and truth.line == _log_line()
    rec = gv.record_backward(loss, model=model, capture=cap)
    assert rec.forward is not None and rec.forward.site == truth.site  # op, module, its type, the line
    assert (rec.forward.kind, rec.forward.cause) == (truth.kind, truth.cause) == ("NaN", "log of a negative")
    stop = rec.find("nonfinite")
    said = truth.summary().splitlines()[0]  # "NaN born in forward aten.log in inner (LogOfNegative) at file:line"
    assert said in stop.text and _log_line() in stop.text and "born at step" not in stop.text
    armed = gv.record_backward(loss, model=model, capture=cap, until="nonfinite")
    assert armed.forward is not None and armed.forward.site == truth.site
    assert armed.find("nonfinite").text == stop.text


def test_without_a_capture_the_stop_says_how_to_name_the_line() -> None:
    torch.manual_seed(0)
    model = WithLog()
    loss = model(torch.randn(3, 4))  # no capture: nothing saw the forward's lines
    rec = gv.record_backward(loss, model=model)
    assert rec.forward is not None and rec.forward.line == ""
    text = rec.find("nonfinite").text
    assert "at (unknown line)" in text and "with gv.capture(model)" in text and "gv.find_nonfinite(fn)" in text


def test_a_parameter_already_nan_is_named() -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4)
    model.blocks[1].broken = False
    with torch.no_grad():
        model.blocks[2].fc.weight[0, 0] = float("nan")
    with gv.capture(model) as cap:
        loss = model(x)
    rec = gv.record_backward(loss, model=model, capture=cap)
    stop = rec.find("nonfinite")
    assert "made in the forward pass" in stop.text and "blocks.2.fc.weight already held NaN" in stop.text
    truth = gv.find_nonfinite(lambda: model(x).backward(), model=model)
    assert truth is not None and truth.cause == rec.forward.cause == "already non-finite"  # type: ignore[union-attr]


@pytest.mark.parametrize("model_type", [Net, WithLog])
def test_the_page_says_the_same(request: pytest.FixtureRequest, model_type: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model = model_type()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4))
    rec = gv.record_backward(loss, model=model, capture=cap)
    got = page_stops(request.getfixturevalue("run_to_cli"), rec, [("nonfinite", "", 0.0)])["stops"][0]
    want = rec.find("nonfinite")
    assert (got["index"], got["text"]) == (want.index, want.text)
    assert rec.forward is not None and rec.forward.line and rec.forward.line in got["text"]

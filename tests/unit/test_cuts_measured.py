"""Cuts found by one rule during gv.capture: an op with an input that requires grad and an output autograd does
not follow, whose output depends on that input's values (measured), whatever the op is called."""

from __future__ import annotations

import pathlib

import torch
from torch import nn

import gradviz_nb as gv

SOURCES = pathlib.Path(gv.__file__).parent


class Binned(nn.Module):
    """fc1's output goes through an op named nowhere in gradviz_nb; fc2 reads the bins."""

    def __init__(self, cut: str) -> None:
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1)
        self.cut = cut
        self.register_buffer("edges", torch.tensor([-0.5, 0.0, 0.5]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.cut == "bucketize":
            h = torch.bucketize(h, self.edges).float()
        elif self.cut == "searchsorted":
            h = torch.searchsorted(self.edges, h.contiguous()).to(h.dtype)
        elif self.cut == "copy":
            h = h.new_tensor(h)  # a copy constructor: a float tensor with no history
        elif self.cut == "template":  # shape-only uses of h: no cut, fc1 keeps its gradient
            h = h + torch.zeros_like(h) + h.new_zeros(h.shape[-1]) * h.size(0)
        return self.head(torch.relu(self.fc2(h))).sum()


def _explain(cut: str) -> tuple[gv.why, list]:  # type: ignore[valid-type]
    torch.manual_seed(0)
    model = Binned(cut)
    with gv.capture(model) as cap:
        loss = model(torch.randn(6, 4))
    loss.backward()
    return gv.why(gv.trace(loss, model=model, capture=cap), "fc1.weight"), cap.evidence


def test_a_cut_through_an_op_the_code_never_names_is_found_with_op_line_and_input() -> None:
    for op in ("bucketize", "searchsorted"):
        assert op not in "".join(p.read_text() for p in SOURCES.rglob("*.py") if "bugzoo" not in p.parts)
    for cut, op in (("bucketize", "torch.bucketize(...)"), ("searchsorted", "torch.searchsorted(...)"),
                    ("copy", ".new_tensor()")):
        w, events = _explain(cut)
        assert Binned(cut).fc1.weight.requires_grad  # PyTorch's truth: fc1 gets no gradient through the cut
        assert w.status == "none" and w.kind == "left-graph", (cut, w)
        assert op in w.cause and "test_cuts_measured.py" in w.cause, (cut, w.cause)
        event = next(e for e in events if e.op == op)
        assert event.cut == ["fc1.weight", "fc1.bias"] and "tensor [6, 4]" in event.arg and event.value


def test_pytorch_agrees_the_planted_cuts_stop_the_gradient() -> None:
    for cut in ("bucketize", "searchsorted", "copy"):
        model = Binned(cut)
        model(torch.randn(6, 4)).backward()
        assert model.fc1.weight.grad is None and model.fc2.weight.grad is not None


def test_shape_only_uses_are_measured_as_no_cut() -> None:
    w, events = _explain("template")
    assert w.status == "ok"
    assert not [e for e in events if e.kind == "left-graph"], [e.op for e in events]


def test_measuring_a_cut_leaves_the_rng_as_it_was() -> None:
    model = Binned("bucketize")
    x = torch.randn(6, 4)
    torch.manual_seed(3)
    model(x)
    plain = torch.get_rng_state()
    torch.manual_seed(3)
    with gv.capture(model):
        model(x)
    assert torch.equal(torch.get_rng_state(), plain)


def test_no_cut_is_recorded_with_grad_mode_off() -> None:
    model = Binned("bucketize")
    with gv.capture(model) as cap, torch.no_grad():
        model(torch.randn(6, 4))
    assert not [e for e in cap.evidence if e.kind == "left-graph"]


def test_a_question_about_a_parameter_itself_is_measured_not_assumed_a_cut() -> None:
    # Library code asks type questions of the parameters themselves (accelerate asks
    # torch._has_compatible_shallow_copy_type(param, ...) while a Trainer prepares the model): a Python bool
    # from a parameter, the same whatever its values. Measured as no cut, so the real cause is the one named.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    with gv.capture(model) as cap:
        assert torch._has_compatible_shallow_copy_type(model[0].weight, torch.zeros(2))
        h = model[0](torch.randn(6, 4)).detach()  # the real cut
        loss = model[1](h).sum()
    assert not any(e.op.startswith("torch._has_compatible") for e in cap.evidence)
    w = gv.why(gv.trace(loss, model=model, capture=cap), "0.weight")
    assert (w.status, w.kind) == ("none", "detached"), w

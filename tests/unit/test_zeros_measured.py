"""Zeros and shrinks found in the recorded backward: the first node that received a non-zero gradient and sent
zero (or the edge where a hook changed it), with its op, line, module and factor, whatever the op is."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import gradviz_nb as gv


class Zeroed(nn.Module):
    """fc1's gradient is zeroed (or shrunk) on its way back, by ``mode``."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1)
        self.mode, self.scale, self.drop = mode, 0.0, nn.Dropout(1.0)
        if mode == "forward_pre_hook":
            self.fc2.register_forward_pre_hook(lambda m, inp: (inp[0] * 0,))
        elif mode == "backward_pre_hook":
            self.fc2.register_full_backward_pre_hook(lambda m, grad_out: (grad_out[0] * 0,))
        elif mode == "full_backward_hook":
            self.fc2.register_full_backward_hook(lambda m, grad_in, grad_out: (grad_in[0] * 0,))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.mode == "constant_zero":
            h = h * self.scale  # MUL-ZERO
        elif self.mode == "dropout_everything":
            h = self.drop(h)
        elif self.mode == "half_underflow":
            return self.head(self.fc2(h.half().float())).sum() * 1e-12  # UNDERFLOW
        elif self.mode == "tensor_hook":
            h.register_hook(lambda g: g * 0)
        elif self.mode == "shrunk":
            h = h * 1e-9  # SHRUNK
        return self.head(self.fc2(h)).sum()


def _line(marker: str) -> str:
    import inspect

    lines, first = inspect.getsourcelines(Zeroed.forward)
    return f":{first + next(i for i, text in enumerate(lines) if marker in text)}"


def _truth(mode: str, x: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(0)
    model = Zeroed(mode)
    model(x).backward()
    assert model.fc1.weight.grad is not None
    return model.fc1.weight.grad


X = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
CASES = [
    ("constant_zero", "zero-derivative", "a multiplication", "MUL-ZERO"),
    ("dropout_everything", "zero-derivative", "'drop'", ""),
    ("half_underflow", "zero-derivative", "float16", "UNDERFLOW"),
    ("forward_pre_hook", "hook-zeroed", "forward hook", ""),
    ("backward_pre_hook", "hook-zeroed", "backward hook", ""),
    ("full_backward_hook", "hook-zeroed", "backward hook", ""),
    ("tensor_hook", "hook-zeroed", "hook", ""),
]


@pytest.mark.parametrize(("mode", "kind", "words", "marker"), CASES, ids=[c[0] for c in CASES])
def test_the_node_that_sent_zero_is_named_with_its_line_and_the_hook_fix_is_proven(mode: str, kind: str, words: str,
                                                                                 marker: str) -> None:
    assert not _truth(mode, X).any()  # PyTorch's truth: fc1's gradient is exactly zero
    torch.manual_seed(0)
    model = Zeroed(mode)
    w = gv.why(model, "fc1.weight", fn=lambda: model(X))
    assert (w.status, w.kind) == ("zero", kind), w
    assert words in w.cause, w.cause
    if marker:
        assert _line(marker) in w.cause, (w.cause, _line(marker))
    # the answer names ops and modules, never the graph's internal node ids ("node n12")
    assert w.node and not re.search(rf"\b{re.escape(w.node)}\b|\bnode n\d+", f"{w.cause} {w.evidence}"), w
    if kind == "zero-derivative" or mode == "tensor_hook":
        assert w.node and ("factor 0" in w.evidence or "returned norm 0" in w.evidence), w.evidence
    if kind == "hook-zeroed":
        proof = w.prove()
        assert proof.proven, proof
        torch.manual_seed(0)
        clean = Zeroed("none")
        clean.load_state_dict(model.state_dict())
        clean(X).backward()
        assert clean.fc1.weight.grad is not None
        assert proof.after == pytest.approx(float(clean.fc1.weight.grad.double().norm()), rel=1e-6)


def test_a_shrink_is_named_where_most_of_the_norm_was_lost_with_its_factor() -> None:
    g = _truth("shrunk", X)
    torch.manual_seed(0)
    model = Zeroed("shrunk")
    w = gv.why(model, "fc1.weight", fn=lambda: model(X))
    assert w.status == "tiny" and 0 < float(g.norm()) < 1e-6, w
    assert _line("SHRUNK") in w.cause and "1e-09" in w.cause, w.cause


def test_why_of_a_live_loss_records_its_backward_and_leaves_grad_alone() -> None:
    torch.manual_seed(0)
    model = Zeroed("constant_zero")
    with gv.capture(model) as cap:
        loss = model(X)
    loss.backward(retain_graph=True)
    grad = model.fc1.weight.grad
    assert grad is not None and not grad.any()
    w = gv.why(loss, "fc1.weight", capture=cap)
    assert (w.status, w.kind) == ("zero", "zero-derivative") and "factor 0" in w.evidence, w
    assert model.fc1.weight.grad is grad and not grad.any()

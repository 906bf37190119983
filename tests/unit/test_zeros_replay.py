"""The doctor's zero gradients measured in the backward itself: the step's first backward replayed once and
recorded, the node that received non-zero and sent zero named with its op, line and module, for ops and hooks
no table names; a zero whose factor is a zero parameter stays information. Truth: PyTorch's own ``.grad``."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.tracing.places import source_line


def _line(fn: Callable[..., object], text: str) -> str:
    """The line of ``fn``'s source that holds ``text``, as findings write it (``tests/unit/x.py:12``)."""
    lines, first = inspect.getsourcelines(fn)
    hit = next(i for i, line in enumerate(lines) if text in line)
    return source_line(str(inspect.getsourcefile(fn)), first + hit)


class Net(nn.Module):
    """a -> relu -> (edit) -> c -> tanh -> b; ``edit`` is the planted zero."""

    def __init__(self, edit: Callable[[torch.Tensor], torch.Tensor] = lambda h: h) -> None:
        super().__init__()
        self.a, self.c, self.b = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)
        self.edit = edit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.c(self.edit(self.a(x).relu())).tanh())


def _where_all_false(h: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.zeros_like(h, dtype=torch.bool), h, 0.0) + 1


def _times_zeros(h: torch.Tensor) -> torch.Tensor:
    return h * torch.zeros_like(h)


def _run(net: Net, hooks: Callable[[Net], None] = lambda n: None) -> tuple[gv.Diagnosis, dict[str, torch.Tensor]]:
    """The doctor's diagnosis, and PyTorch's own gradients of one plain step on an identical copy."""
    torch.manual_seed(0)
    x, y = torch.randn(5, 4), torch.randn(5, 2)
    twin = Net(net.edit)
    twin.load_state_dict(net.state_dict())
    hooks(net)
    hooks(twin)
    ((twin(x) - y) ** 2).mean().backward()
    truth = {n: p.grad.detach().clone() for n, p in twin.named_parameters() if p.grad is not None}
    opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        opt.step()

    return gv.doctor(step, net, opt), truth


def _finding(dx: gv.Diagnosis, name: str) -> gv.Finding:
    hit = [f for f in dx.findings if f.target == name or name.startswith(f.target + ".")]
    assert len(hit) == 1, dx.summary()
    return hit[0]


def test_where_with_a_constant_zero_branch_is_found_with_its_line() -> None:
    torch.manual_seed(1)
    dx, truth = _run(Net(_where_all_false))
    assert not truth["a.weight"].any() and truth["b.weight"].any()  # PyTorch: zero upstream of the where only
    f = _finding(dx, "a.weight")
    assert f.kind == "zero-derivative"
    assert _line(_where_all_false, "torch.where") in f.message
    assert dx.graph is not None and dx.graph.nx.nodes[f.node]["op"] == "WhereBackward0"
    assert not [g for g in dx.findings if g.target.startswith(("b", "c"))], dx.summary()


def test_times_zeros_like_names_the_multiplication_for_both_sides() -> None:
    """Upstream parameters: the mul received non-zero and sent zero. The next layer's weight: its layer saved an
    all-zero input for the backward, made by the same mul."""
    torch.manual_seed(1)
    dx, truth = _run(Net(_times_zeros))
    assert not truth["a.weight"].any() and not truth["c.weight"].any() and truth["c.bias"].any()
    line = _line(_times_zeros, "torch.zeros_like")
    for name in ("a.weight", "c.weight"):
        f = _finding(dx, name)
        assert f.kind == "zero-derivative" and line in f.message, f.message
    why = gv.why(dx, "c.weight")
    assert "saved for backward" in why.evidence and "all zeros" in why.evidence
    assert not [g for g in dx.findings if g.target in ("c.bias", "b", "b.weight", "b.bias")], dx.summary()


def _zeroing_pre_hook(net: Net) -> None:
    net.c.register_forward_pre_hook(lambda m, args: (args[0] * 0,))


def test_a_module_pre_hook_that_zeroes_its_input_is_a_hook() -> None:
    torch.manual_seed(1)
    dx, truth = _run(Net(), _zeroing_pre_hook)
    assert not truth["a.weight"].any() and not truth["c.weight"].any()
    line = _line(_zeroing_pre_hook, "args[0] * 0")
    for name in ("a.weight", "c.weight"):
        f = _finding(dx, name)
        assert f.kind == "hook-zeroed" and line in f.message and "'c'" in f.message, f.message


def _zeroing_backward_pre_hook(net: Net) -> None:
    net.c.register_full_backward_pre_hook(lambda m, g: tuple(None if t is None else t * 0 for t in g))


def test_a_full_backward_pre_hook_that_zeroes_is_measured() -> None:
    torch.manual_seed(1)
    dx, truth = _run(Net(), _zeroing_backward_pre_hook)
    assert not truth["a.weight"].any() and not truth["c.weight"].any() and truth["b.weight"].any()
    for name in ("a.weight", "c.weight"):
        f = _finding(dx, name)
        assert f.kind == "hook-zeroed" and "module 'c'" in f.message, f.message
        assert "received a gradient of norm" in f.evidence


class Scaled(nn.Module):
    """A hand-written adapter whose up-projection starts at zero and is used through a product (``up * s``):
    no node saves ``up`` itself, so only the values upstream of the zero say it is the parameter's."""

    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(4, 2)
        self.down = nn.Parameter(torch.randn(4, 3))
        self.up = nn.Parameter(torch.zeros(3, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.down) @ (self.up * 0.5)


def test_a_zero_initialised_factor_upstream_is_expected_not_a_finding() -> None:
    torch.manual_seed(0)
    model = Scaled()
    x, y = torch.randn(5, 4), torch.randn(5, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()

    dx = gv.doctor(step, model, opt)
    assert model.down.grad is None or not model.down.grad.any()  # restored; the truth is the replay's own
    assert dx.ok, dx.summary()
    w = gv.why(dx, "down")
    assert w.kind is None and "up" in w.cause and "expected" in w.cause, w


def _zero_head(net: Net) -> None:
    with torch.no_grad():
        net.b.weight.zero_()


@pytest.mark.parametrize(("edit", "prepare", "extra"), [
    (lambda h: h, lambda n: None, 0), (_times_zeros, lambda n: None, 1), (lambda h: h, _zero_head, 0)],
    ids=["healthy", "zero", "expected-zero"])
def test_the_replay_costs_one_forward_and_one_backward_only_when_a_zero_needs_it(
        edit: Callable[..., object], prepare: Callable[[Net], None], extra: int) -> None:
    """A zero-initialised last layer (LoRA's B at init) leaves every gradient before it exactly zero: the step's
    own graph measures that expected, so nothing is replayed."""
    torch.manual_seed(1)
    net = Net(edit)  # type: ignore[arg-type]
    prepare(net)
    forwards: list[int] = []
    backwards: list[int] = []
    net.register_forward_hook(lambda *a: forwards.append(1))
    net.b.register_full_backward_hook(lambda *a: backwards.append(1))
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    dx, truth = _run(net)
    assert dx.ok == (extra == 0), dx.summary()
    assert len(forwards) == 2 + extra and len(backwards) == 2 + extra, dx.summary()
    assert all(torch.equal(p, before[n]) for n, p in net.named_parameters())  # the replay was undone too
    assert all(p.grad is None for p in net.parameters())
    if prepare is _zero_head:
        assert not truth["a.weight"].any()  # PyTorch: zero, and expected

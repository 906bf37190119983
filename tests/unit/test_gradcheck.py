"""gv.gradcheck against PyTorch's truth: torch.autograd.gradcheck's verdict on the same function (and on
each input alone), and the custom Function planted with a wrong backward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradviz_nb as gv
from gradviz_nb.widgets import page


def make_mul(factor_x: float = 1.0, factor_w: float = 1.0, name: str = "Mul") -> type[torch.autograd.Function]:
    """``x * w`` with a hand-written backward; a factor != 1 plants a wrong gradient on that input."""

    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return x * w

    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return factor_x * g * w, factor_w * (g * x).sum_to_size(w.shape)

    methods = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (torch.autograd.Function,), methods)


def torch_says_ok(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> bool:
    """The truth: torch.autograd.gradcheck on float64 copies (with the same requires_grad)."""
    xs = tuple(t.detach().double().requires_grad_(t.requires_grad) for t in inputs)
    return bool(torch.autograd.gradcheck(fn, xs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False))


def op_nodes(res: gv.GradCheck, op: str) -> list[str]:
    return [n for n, d in res.graph.nx.nodes(data=True) if d["op"] == op]


def _inputs(*shapes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(s, generator=g).requires_grad_() for s in shapes)


def test_correct_custom_function_is_ok() -> None:
    mul = make_mul()
    x, w = _inputs((3, 4), (4,))
    fn = mul.apply
    assert torch_says_ok(fn, (x, w))
    res = gv.gradcheck(fn, (x, w))
    assert res.ok and res.wrong == []
    assert [(i.name, i.ok) for i in res.inputs] == [("inputs[0]", True), ("inputs[1]", True)]
    assert res.compared == 3  # x, w and the output
    assert "agree" in res.summary() and repr(res) == "<GradCheck ok>"


def _mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = F.layer_norm(torch.tanh(F.linear(x, w1, b1)), (w1.shape[0],))
    return F.softmax(F.linear(h.exp(), w2), dim=-1)


def test_mlp_of_builtin_ops_is_ok() -> None:
    inputs = _inputs((5, 4), (6, 4), (6,), (3, 6))
    assert torch_says_ok(_mlp, inputs)
    res = gv.gradcheck(_mlp, inputs)
    assert res.ok, res.summary()
    assert res.compared >= 10  # every intermediate tensor was compared, not just the inputs
    assert all(i.ok for i in res.inputs) and len(res.inputs) == 4


def test_module_model_is_ok_and_parameters_named() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.LayerNorm(6), nn.Linear(6, 3), nn.Softmax(-1)).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    res = gv.gradcheck(model, (x,), model=model)
    assert res.ok, res.summary()
    assert {"0.weight", "3.bias"} <= set(res.graph.leaves())
    assert all(p.grad is None for p in model.parameters())  # autograd.grad: parameters' .grad untouched


def test_wrong_factor_two_named_with_its_input() -> None:
    bad = make_mul(factor_w=2.0, name="BadMul")
    x, w = _inputs((3, 4), (4,))
    fn = bad.apply
    assert not torch_says_ok(fn, (x, w))  # truth: PyTorch's gradcheck fails on it ...
    assert torch_says_ok(fn, (x, w.detach()))  # ... because of w alone: x's gradient is right
    assert not torch_says_ok(fn, (x.detach(), w))
    res = gv.gradcheck(fn, (x, w))
    assert not res.ok
    [wrong] = res.wrong
    assert wrong.node == op_nodes(res, "BadMulBackward")[0]
    assert (wrong.op, wrong.input, wrong.source) == ("BadMulBackward", 1, "inputs[1]")
    assert wrong.analytic / wrong.numeric == pytest.approx(2.0, rel=1e-5)  # the planted factor
    assert wrong.rel_error == pytest.approx(1.0, rel=1e-5)
    assert [(i.name, i.ok) for i in res.inputs] == [("inputs[0]", True), ("inputs[1]", False)]
    assert res.inputs[1].rel_error == pytest.approx(1.0, rel=1e-5)
    assert "BadMulBackward" in res.summary() and "input 1 (inputs[1])" in res.summary()


def test_wrong_function_in_the_middle_of_a_chain() -> None:
    bad = make_mul(factor_x=0.5, name="HalfMul")

    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ w1)
        y = bad.apply(h, w2) + h  # h is read by the bad Function and by a correct add
        return F.layer_norm(y.exp(), (y.shape[-1],)).sum(0)

    inputs = _inputs((5, 4), (4, 3), (3,))
    assert not torch_says_ok(fn, inputs)
    res = gv.gradcheck(fn, inputs)
    [wrong] = res.wrong
    assert (wrong.op, wrong.input) == ("HalfMulBackward", 0)
    assert wrong.source.startswith("TanhBackward0")  # the tensor the wrong gradient goes to
    assert wrong.analytic / wrong.numeric == pytest.approx(0.5, rel=1e-5)
    blamed = {w.op for w in res.wrong}
    assert not blamed & {"TanhBackward0", "MmBackward0", "AddBackward0", "ExpBackward0"}
    # upstream inputs inherit the error (PyTorch's per-input truth agrees), yet only the Function is named
    assert not any(i.ok for i in res.inputs[:2]) and res.inputs[2].ok
    assert torch_says_ok(fn, (inputs[0].detach(), inputs[1].detach(), inputs[2]))


def test_symmetrised_gradient_is_a_convention_not_a_bug() -> None:
    # cholesky reads one triangle, yet its backward returns a symmetric gradient: shifting its input off
    # the symmetric matrices disagrees with it, but no leaf's gradient is wrong (PyTorch's gradcheck passes)
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.cholesky(x @ x.mT + torch.eye(4, dtype=x.dtype))

    (x,) = _inputs((4, 4))
    assert torch_says_ok(fn, (x,))
    res = gv.gradcheck(fn, (x,))
    assert res.ok and res.wrong == []
    assert res.conventions and "not named" in res.summary()


def test_two_wrong_functions_in_a_row_both_named() -> None:
    # the lower one's wrong gradient flows into the upper one: each is still judged on its own backward
    a, b, c = make_mul(factor_x=3.0, name="Triple"), make_mul(factor_x=2.0, name="Double"), make_mul(name="Right")

    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
        return c.apply(b.apply(a.apply(x.tanh(), w1).sin(), w2), w3).exp()

    inputs = _inputs((4, 3), (3,), (3,), (3,))
    assert not torch_says_ok(fn, inputs)
    res = gv.gradcheck(fn, inputs)
    ratios = {(w.op, w.input): w.analytic / w.numeric for w in res.wrong}
    assert ratios == pytest.approx({("TripleBackward", 0): 3.0, ("DoubleBackward", 0): 2.0}, rel=1e-5)


def test_correct_function_beside_a_wrong_one_is_not_blamed() -> None:
    bad, good = make_mul(factor_x=2.0, name="Bad"), make_mul(name="Good")
    inputs = _inputs((4, 3), (3,))

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return bad.apply(x, w) + good.apply(x, w)  # x read by two custom Functions

    assert torch_says_ok(good.apply, inputs) and not torch_says_ok(fn, inputs)
    [wrong] = gv.gradcheck(fn, inputs).wrong
    assert (wrong.op, wrong.input, wrong.source) == ("BadBackward", 0, "inputs[0]")
    assert wrong.analytic / wrong.numeric == pytest.approx(2.0, rel=1e-5)


def test_backward_returning_none_for_a_used_input() -> None:
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        (w,) = ctx.saved_tensors
        return g * w, None

    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(w)
        return x * w

    forgot = type("Forgot", (torch.autograd.Function,),
                  {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    x, w = _inputs((4,), (4,))
    fn = lambda a, b: forgot.apply(a, b).sin()  # noqa: E731
    assert not torch_says_ok(fn, (x, w))
    [wrong] = gv.gradcheck(fn, (x, w)).wrong
    assert (wrong.op, wrong.input, wrong.analytic) == ("ForgotBackward", 1, 0.0) and wrong.numeric != 0


def test_module_of_the_wrong_node() -> None:
    bad = make_mul(factor_w=3.0, name="Scale")

    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.g = nn.Parameter(torch.randn(4))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return bad.apply(h, self.g)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), Gate(), nn.Tanh()).double()
    x = torch.randn(2, 3, dtype=torch.float64)
    res = gv.gradcheck(model, (x,), model=model)
    [wrong] = res.wrong
    assert (wrong.op, wrong.module, wrong.input, wrong.source) == ("ScaleBackward", "1", 1, "1.g")
    assert wrong.analytic / wrong.numeric == pytest.approx(3.0, rel=1e-5)
    assert res.inputs[0].ok  # x's gradient does not go through the wrong slot


def test_user_inputs_and_rng_untouched() -> None:
    bad = make_mul(factor_w=2.0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4)  # no grad: a constant for the check
    before = (x.detach().clone(), w.clone(), x._version, w._version)
    rng = torch.get_rng_state()
    res = gv.gradcheck(lambda a, b: bad.apply(a, b), (x, w))
    assert res.ok and [i.name for i in res.inputs] == ["inputs[0]"]  # w's wrong gradient is never asked for
    assert torch.equal(x, before[0]) and torch.equal(w, before[1])
    assert (x._version, w._version, x.dtype, w.dtype) == (before[2], before[3], torch.float32, torch.float32)
    assert (x.requires_grad, w.requires_grad, x.grad, w.grad) == (True, False, None, None)
    assert torch.equal(torch.get_rng_state(), rng)


def test_dropout_inside_fn_is_rerunnable() -> None:
    x, w = _inputs((6, 5), (5, 5))

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.dropout(a @ b, p=0.5, training=True).tanh()

    def seeded(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(0)
        return fn(a, b)

    with torch.random.fork_rng():
        assert torch_says_ok(seeded, (x, w))
    assert gv.gradcheck(fn, (x, w)).ok


def test_overlay_flags_the_wrong_node() -> None:
    bad = make_mul(factor_w=2.0, name="BadMul")
    res = gv.gradcheck(lambda a, b: bad.apply(a, b).exp(), _inputs((3,), (3,)))
    ov = page.overlay(res)
    mem = page.overlay(gv.memory_held(res.graph))
    assert set(ov) == set(mem)
    node = op_nodes(res, "BadMulBackward")[0]
    assert ov["marks"] == {node: "flag"} and ov["values"][node] == pytest.approx(1.0, rel=1e-5)
    assert any("BadMulBackward" in note for note in res.graph.notes)
    fine = gv.gradcheck(lambda a, b: make_mul().apply(a, b), _inputs((3,), (3,)))
    assert page.overlay(fine)["marks"] == {}


@pytest.mark.parametrize(
    ("fn", "inputs", "message"),
    [
        ("not a function", (torch.randn(2),), "function"),
        (torch.sin, (3.0, "a"), "no tensor"),
        (torch.sin, {"x": torch.randn(2)}, "tuple/list"),
        (lambda x, i: x[i], (torch.randn(3), torch.tensor([0, 2])), "torch.int64"),
        (lambda x: x.detach() * 2, (torch.randn(3, requires_grad=True),), "no grad_fn"),
        (lambda x: (x.sin(), torch.ones(2)), (torch.randn(3),), "output 1"),
    ],
)
def test_bad_input_raises(fn: Any, inputs: Any, message: str) -> None:
    with pytest.raises(gv.GradvizError, match=message):
        gv.gradcheck(fn, inputs)


def test_float32_model_refused() -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(gv.GradvizError, match="double"):
        gv.gradcheck(model, (torch.randn(1, 2),), model=model)


def _kinked(x: torch.Tensor) -> torch.Tensor:
    """clamp, clamp_min, relu and maximum with inputs exactly on their bounds (ties), then a smooth tail."""
    return (torch.clamp(x, -1.0, 1.0) ** 2 + torch.clamp_min(x, 0.0) + torch.relu(x) * 3
            + torch.maximum(x, torch.zeros_like(x))).sum()


KINK_X = torch.tensor([-1.0, 1.0, 0.0, 0.3, -2.0, 0.0], dtype=torch.float64, requires_grad=True)


def test_inputs_on_a_bound_are_a_kink_not_a_wrong_backward() -> None:
    """At a tie the central difference is neither one-sided derivative; torch 2.13 and 2.14+ pick different
    ones (clamp passes 1, then 0). Both are right: no node is named, on either torch."""
    assert not torch_says_ok(_kinked, (KINK_X,))  # torch's own check trips over the kinks
    res = gv.gradcheck(_kinked, KINK_X)
    assert res.ok and not res.wrong, res.summary()
    assert res.kinks == ["inputs[0]"] and res.inputs[0].kinks == 4, res.summary()  # the elements -1, 1, 0, 0
    assert "not judged (at a kink" in res.summary()
    smooth = KINK_X + 0.05  # off the bounds: nothing is a kink
    res = gv.gradcheck(_kinked, smooth)
    assert res.ok and not res.kinks and res.inputs[0].kinks == 0 and torch_says_ok(_kinked, (smooth,))


def test_a_wrong_backward_at_a_kink_is_still_wrong() -> None:
    """A kink excuses only a value between the one-sided derivatives: a doubled gradient there is named."""
    double = make_mul(factor_x=2.0, name="DoubledMul")
    w = torch.ones(6, dtype=torch.float64)
    fn = lambda x: double.apply(torch.clamp_min(x, 0.0), w).sum()  # noqa: E731
    assert not torch_says_ok(fn, (KINK_X,))
    res = gv.gradcheck(fn, KINK_X)
    assert not res.ok and not res.inputs[0].ok and [r.op for r in res.wrong] == ["DoubledMulBackward"], res.summary()

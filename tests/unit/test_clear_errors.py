"""Every raw error a new user met becomes one GradvizError sentence, and every silent wrong a refusal or a true
answer (each case below raised a raw exception or answered wrongly before)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))


def _one_sentence(err: BaseException) -> None:
    assert isinstance(err, gv.GradvizError) and "\n" not in str(err), repr(err)


@pytest.mark.parametrize("action", ["what_if", "checkpoint_what_if", "save_html"])
def test_a_closed_widget_says_so(action: str, tmp_path: Any) -> None:
    m = _mlp()
    w = gv.GraphWidget(m(torch.randn(2, 3)).sum())
    w.close()
    call = {"what_if": lambda: w.what_if(), "checkpoint_what_if": lambda: w.checkpoint_what_if(),
            "save_html": lambda: w.save_html(tmp_path / "x.html")}[action]
    with pytest.raises(gv.GradvizError, match="closed") as err:
        call()
    _one_sentence(err.value)
    assert repr(w) == "<GraphWidget: closed>"


def test_closing_widgets_leaves_no_ipywidgets_layout_registered() -> None:
    from ipywidgets.widgets.widget import _instances

    loss = _mlp()(torch.randn(2, 3)).sum()
    before = len(_instances)
    for _ in range(30):
        gv.GraphWidget(loss).close()
    assert len(_instances) == before


def test_what_if_with_a_number_is_refused() -> None:
    g = gv.trace(_mlp()(torch.randn(2, 3)).sum())
    for bad in ({"detach": 5}, {"freeze": 7}, {"freeze": "0.weight"}):
        with pytest.raises(gv.GradvizError, match="must be a list") as err:
            g.what_if(**bad)
        _one_sentence(err.value)


def test_flow_param_and_module_name_what_exists() -> None:
    m = _mlp()
    m(torch.randn(2, 3)).sum().backward()
    flow = gv.gradient_flow(m)
    with pytest.raises(gv.GradvizError, match=r"did you mean '0\.weight'"):
        flow.param("0.weigth")
    with pytest.raises(gv.GradvizError, match="no module"):
        flow.module("zzz")
    assert flow.param("0.weight").names == ("0.weight",)


def test_why_on_a_diagnosis_refuses_a_parameter_that_does_not_exist() -> None:
    m = _mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(2, 3)

    def step() -> None:
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()

    dx = gv.doctor(step, m, opt)
    with pytest.raises(gv.GradvizError, match=r"no parameter named 'zz\.weight'"):
        gv.why(dx, "zz.weight")
    assert gv.why(dx, "0.weight").status == "ok"


def _calls_backward(m: nn.Module) -> Any:
    x = torch.randn(2, 3)

    def fn() -> torch.Tensor:
        loss = m(x).sum()
        loss.backward()
        return loss

    return fn


def test_an_fn_that_calls_backward_itself_is_refused() -> None:
    m = _mlp()
    m[0].weight.requires_grad_(False)
    with pytest.raises(gv.GradvizError, match="fn called backward"):
        gv.why(m, "0.weight", fn=_calls_backward(m))
    with pytest.raises(gv.GradvizError, match="fn called backward"):
        gv.GraphWidget.from_fn(_calls_backward(m), model=m)
    assert all(p.grad is None for p in m.parameters())  # the sandbox put everything back


def test_why_on_a_meta_or_compiled_model_says_what_to_do() -> None:
    meta = nn.Linear(3, 1, device="meta")
    with pytest.raises(gv.GradvizError, match="meta"):
        gv.why(meta, "weight", fn=lambda: meta(torch.randn(2, 3, device="meta")).sum())
    m = _mlp()
    compiled = torch.compile(m, backend="eager")
    with pytest.raises(gv.GradvizError, match=r"before torch\.compile") as err:
        gv.why(compiled, "0.weight", fn=lambda: compiled(torch.randn(2, 3)).sum())
    _one_sentence(err.value)


class Complex(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, dtype=torch.complex64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.w * x).abs().sum()


def test_doctor_on_a_complex_model_with_adam() -> None:
    """Adam steps a complex parameter through a view made under no_grad; the ghost observer asked that view
    whether it was a leaf, which torch refuses (a raw RuntimeError out of the doctor)."""
    torch.manual_seed(0)
    c = Complex()
    x = torch.randn(3, dtype=torch.complex64)
    opt = torch.optim.Adam(c.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        c(x).backward()
        opt.step()

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no complex value cast to real on the way
        dx = gv.doctor(step, c, opt)
    assert dx.steps >= 1


def test_explain_without_a_step_says_what_it_takes() -> None:
    m = _mlp()
    rec = gv.record_backward(m(torch.randn(2, 3)).sum(), model=m)
    with pytest.raises(gv.GradvizError, match="must be one of this recording's steps"):
        rec.explain(None)  # type: ignore[arg-type]
    assert isinstance(rec.explain(rec.steps[0]), list)

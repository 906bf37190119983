"""Overlays as the page gets them (``gradviz_nb/widgets/page/convert.py``): registered converters, the
error texts built from that registry, and ``Overlay.detail`` (rows per element) on the gradient-flow
overlay: each module box lists its parameters and their gradient norms."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.demo_models import MLP
from gradviz_nb.widgets import page
from gradviz_nb.widgets.page import contract, convert
from gradviz_nb.widgets.page.contract import Overlay
from gradviz_nb.widgets.page.traits import check_record


def _flow(freeze: str = "") -> tuple[gv.AutogradGraph, gv.GradientFlow]:
    torch.manual_seed(0)
    model = MLP()
    if freeze:
        model.get_parameter(freeze).requires_grad_(False)
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).pow(2).mean()
    g = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    return g, gv.gradient_flow(model, graph=g, capture=cap)


def test_flow_detail_lists_each_boxs_parameters_with_their_measured_norms() -> None:
    g, flow = _flow(freeze="fc2.bias")
    ov = page.overlay(flow, graph=g)
    check_record("overlay", ov, contract.Overlay)
    detail = ov["detail"]
    boxes = {c["id"]: c["path"] for c in g.calls}
    assert set(detail) == {f"call:{c}" for c, path in boxes.items() if any(p.module == path for p in flow.params)}
    for call, path in boxes.items():
        rows = dict(detail.get(f"call:{call}", []))
        for p in (p for p in flow.params if p.module == path):
            short = p.name[len(path) + 1:]
            grad = f"grad norm {p.norm:.3g}" if p.has_grad else "no gradient"
            assert rows[short] == f"{grad} · weight norm {p.weight_norm:.3g}", (call, short)
    fc2 = detail[f"call:{next(c for c, path in boxes.items() if path == 'fc2')}"]
    assert fc2[-1][0] == "bias" and fc2[-1][1].startswith("no gradient")  # no gradient last, the largest first
    norms = [float(t.split()[2]) for _, t in fc2 if t.startswith("grad norm ")]
    assert norms == sorted(norms, reverse=True) and all(math.isfinite(n) for n in norms)
    w = gv.GraphWidget(g, overlay=flow)
    assert w.overlay["detail"] == ov["detail"]  # the trait keeps the rows


def test_flow_detail_names_each_number_a_zero_weight_is_never_shown_as_its_gradient_norm() -> None:
    """A LoRA-style zero-initialised weight with a non-zero gradient: the row says "grad norm" for the
    gradient (what PyTorch's .grad holds) and "weight all zero" for the weight, never "weight 0.098"."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    with torch.no_grad():
        model[1].weight.zero_()
    with gv.capture(model) as cap:
        loss = model(torch.randn(5, 4)).pow(2).sum()
    g = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    ov = page.overlay(gv.gradient_flow(model, graph=g, capture=cap), graph=g)
    call = next(c["id"] for c in g.calls if c["path"] == "1")
    rows = dict(ov["detail"][f"call:{call}"])
    truth = model[1].weight.grad
    assert truth is not None and float(truth.norm()) > 0
    assert rows["weight"] == f"grad norm {float(truth.norm()):.3g} · weight all zero"
    assert not rows["weight"].startswith(f"{float(truth.norm()):.3g}")


def test_overlay_detail_is_checked_against_the_contract() -> None:
    g, flow = _flow()
    good = page.overlay(flow, graph=g)
    w = gv.GraphWidget(g)
    with pytest.raises(gv.GradvizError, match=r"overlay\.detail\["):
        w.overlay = {**good, "detail": {"n1": [("only one",)]}}
    with pytest.raises(gv.GradvizError, match=r"overlay\.detail"):
        w.overlay = {**good, "detail": {"n1": "text"}}
    w.overlay = {**good, "detail": {}}
    assert w.overlay["detail"] == {}


@dataclass
class Heat:
    """A made-up result type: what a new overlay source is, to the registry."""

    node: str
    value: float


def test_a_registered_source_is_converted_by_traits_and_named_in_errors() -> None:
    g, _ = _flow()
    leaf = g.find("fc1.weight")

    def heat(source: Heat, graph: gv.AutogradGraph | None = None, encoding: convert.Encoding | None = None) -> Overlay:
        return {"title": "heat", "values": {source.node: source.value}, "scale": "linear", "encoding": "color",
                "marks": {}, "unit": "", "detail": {source.node: [("measured", str(source.value))]}}
    with pytest.raises(gv.GradvizError, match="got Heat") as before:
        page.overlay(Heat(leaf, 1.0))
    assert "a MemoryReport, a GradientFlow, a GradCheck, a Diagnosis (gv.memory_held" in str(before.value)
    convert.overlay_source(Heat, "heat.measure")(heat)
    try:
        assert convert.is_overlay_source(Heat(leaf, 2.0)) and not convert.is_overlay_source(3)
        assert gv.GraphWidget(g, overlay=Heat(leaf, 2.0)).overlay["detail"] == {leaf: [("measured", "2.0")]}
        with pytest.raises(gv.GradvizError, match=r"a Heat \(.*heat\.measure\)"):
            page.overlay(3)
    finally:
        del convert.MADE_BY[Heat]


def test_drawable_sources_are_registered_and_named_in_errors() -> None:
    from gradviz_nb.widgets.page import state

    with pytest.raises(gv.GradvizError, match="nothing to draw from int") as err:
        page.build(3)
    for cls, words in state.MADE_BY.items():
        assert words in str(err.value) and state.source.dispatch(cls) is not state.source.dispatch(object)
    g, flow = _flow()
    with pytest.raises(gv.GradvizError, match="GradientFlow holds no graph"):
        page.build(flow)
    assert page.build(g).graph is g

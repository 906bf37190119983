"""How the Dashboard frames a wrapped model: the module prefix every name shares is computed once (charts and
graph payload alike), chart tooltips open below the pointer (never over the graph above the charts), and the
text under the charts says "no gradient" where none arrived, never "nan"."""

from __future__ import annotations

import torch
from bokeh.models import HoverTool
from torch import nn

import gradviz_nb as gv
from gradviz_nb.tracing import Capture
from gradviz_nb.widgets import page
from gradviz_nb.widgets.flow_charts import TOOLTIP_WIDTH, chart_layers, short_names, tooltip_template
from gradviz_nb.widgets.names import MIN_PREFIX_PARTS, common_parts, graph_prefix


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.cut = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))) + self.cut(x).detach()


class Wrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = Net()


class Outer(nn.Module):
    """As peft wraps a model: the wrappers' own forward is bypassed, so every call sits under ``wrapper.net``."""

    def __init__(self) -> None:
        super().__init__()
        self.wrapper = Wrapper()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wrapper.net(x)


def _traced(model: nn.Module) -> tuple[gv.AutogradGraph, torch.Tensor, Capture]:
    torch.manual_seed(0)
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).pow(2).mean()
    return gv.trace(loss, model=model, capture=cap), loss, cap


def test_prefix_is_the_parts_every_name_shares_when_there_are_enough() -> None:
    assert common_parts(["a.b.c", "a.b.d.e", ""]) == ["a", "b"]
    assert common_parts(["a.b.c"]) == []  # one name: nothing is "shared"
    assert graph_prefix(["a.b", "a.b.c", "a.b.d"]) == "a.b."  # the wrapper itself keeps its full name on the page
    assert graph_prefix(["a.x", "a.y"]) == ""  # one part saves too little
    assert MIN_PREFIX_PARTS == 2
    # the charts' rule is the same one, with each label keeping at least its last part
    assert short_names(["a.b.c", "a.b.d"]) == ("a.b.", ["c", "d"])
    assert short_names(["a.b", "a.b.c"]) == ("a.", ["b", "b.c"])


def test_graph_payload_carries_the_prefix_of_a_wrapped_model_only() -> None:
    g, _, _ = _traced(Outer())
    paths = [c["path"] for c in g.calls]
    assert paths and all(p.startswith("wrapper.net") for p in paths)  # what the capture really recorded
    assert page.graph(g)["meta"]["prefix"] == "wrapper.net."
    plain, _, _ = _traced(Net())
    assert page.graph(plain)["meta"]["prefix"] == ""
    # a lazy (big graph) payload says the same
    assert page.lazy.LazyGraph(g).skeleton()["meta"]["prefix"] == "wrapper.net."


def test_dashboard_tooltips_open_below_and_its_text_never_says_nan() -> None:
    model = Outer()
    _, loss, cap = _traced(model)
    loss.backward()
    assert model.wrapper.net.cut.weight.grad is None  # the detach really cut it
    dash = gv.Dashboard(model, loss, capture=cap)
    assert dash.graph.graph_data["meta"]["prefix"] == "wrapper.net."
    doc = dash.source.document
    assert doc is not None
    hovers = list(doc.select({"type": HoverTool}))
    assert len(hovers) >= 2  # the bars' and the histogram's
    assert {h.attachment for h in hovers} == {"below"}
    # bounded and wrapping: a flag's long reason wraps inside TOOLTIP_WIDTH instead of running off the chart
    assert all(isinstance(h.tooltips, str) and f"max-width: {TOOLTIP_WIDTH}px" in h.tooltips
               and "white-space: normal" in h.tooltips for h in hovers), [h.tooltips for h in hovers]
    # the charts strip the same parts of the names as the graph
    assert short_names([m.path for m in chart_layers(dash.flow)])[0] == "wrapper.net."
    dash.select("wrapper.net.cut")
    text = dash.info.value
    assert "wrapper.net.cut (Linear): no gradient, 0/2 params with grad" in text, text
    assert "nan" not in text.lower() and "infinity" not in text.lower()


def test_monitor_chart_tooltips_open_below() -> None:
    model = Net()
    monitor = gv.GradientMonitor(model, every=1)
    model(torch.randn(3, 4)).pow(2).mean().backward()
    monitor.step()
    layout = monitor.chart(widget=False)
    hovers = list(layout.select({"type": HoverTool}))
    monitor.close()
    assert len(hovers) >= 4 and {h.attachment for h in hovers} == {"below"}
    assert all(isinstance(h.tooltips, str) and f"max-width: {TOOLTIP_WIDTH}px" in h.tooltips for h in hovers)


def test_tooltip_template_keeps_every_field_and_escapes_its_labels() -> None:
    text = tooltip_template([("layer", "@layer"), ("a<b", "@x{0.00}"), ("why", "@flags")])
    assert "@layer" in text and "@x{0.00}" in text and "@flags" in text  # Bokeh fills (and escapes) them
    assert "a&lt;b" in text and "a<b" not in text
    assert text.count("overflow-wrap: anywhere") == 3

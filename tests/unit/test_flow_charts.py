"""The Bokeh charts' data and encodings: zero and None gradients drawn as such, one distinct
encoding per verdict with its word beside the row, short layer names, colour scales that never collapse,
flagged steps on the monitor chart, stretching figures, and the light/dark theme switch."""

from __future__ import annotations

import math

import torch
from bokeh.models import ColumnDataSource, CustomJS, Plot
from bokeh.models.annotations import ColorBar, Legend
from torch import nn

import gradviz_nb as gv
from gradviz_nb.probes.flow import Flag, layer_histograms
from gradviz_nb.widgets.chart_theme import THEMES, follow_page_theme
from gradviz_nb.widgets.flow_charts import (
    STATES,
    TIPS,
    VERDICTS,
    _log_mapper_range,
    flow_charts,
    layer_numbers,
    layer_rows,
    monitor_flag_rows,
    monitor_rows,
    norm_bars,
    short_names,
)


class ThreeWays(nn.Module):
    """``used`` gets a real gradient, ``zeroed`` an exactly-zero one (times 0), ``cut`` none (detached)."""

    def __init__(self) -> None:
        super().__init__()
        self.used, self.zeroed, self.cut = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x) + 0 * self.zeroed(x) + self.cut(x).detach()


def _three_ways() -> tuple[ThreeWays, gv.probes.flow.GradientFlow]:  # type: ignore[name-defined]
    torch.manual_seed(0)
    model = ThreeWays()
    model(torch.randn(5, 4)).pow(2).sum().backward()
    return model, gv.gradient_flow(model)


def test_zero_and_none_gradients_are_markers_not_bars() -> None:
    model, flow = _three_ways()
    assert model.zeroed.weight.grad is not None and not model.zeroed.weight.grad.any()  # what torch really did
    assert model.cut.weight.grad is None
    rows = layer_rows(flow)
    i = {layer: n for n, layer in enumerate(rows["layer"])}
    used, zeroed, cut = i["used"], i["zeroed"], i["cut"]
    assert [rows["state"][n] for n in (used, zeroed, cut)] == ["grad", "zero", "none"]
    # a real bar only for the real gradient; on the log axis 0 and None are a marker on the floor
    assert rows["right"][used] == flow.module("used").norm > rows["left"][used]
    for n, marker in ((zeroed, "circle"), (cut, "x")):
        assert rows["right"][n] == rows["left"][n], "no bar for a zero / missing gradient"
        assert rows["marker"][n] == marker and rows["marker_alpha"][n] == 1.0
    assert rows["marker_alpha"][used] == 0.0
    assert rows["note"][zeroed].startswith("exactly 0") and rows["norm_text"][zeroed] == "0 (exactly)"
    assert rows["note"][cut] == "no gradient (None)" and rows["norm_text"][cut] == "no gradient (None)"
    assert rows["note"][used] == ""
    # the figure carries the same rows, and its legend names both states
    fig = norm_bars(flow)
    data = fig.renderers[0].data_source.data
    assert data["state"] == rows["state"] and data["marker"] == rows["marker"]
    labels = [item.label.value for item in fig.select_one({"type": Legend}).items]
    assert "exactly 0" in labels and "no gradient (None)" in labels


def test_no_gradient_and_a_zero_weight_read_as_words_never_nan_or_infinity() -> None:
    # Seen in review: the Dashboard's text said "L2 norm nan, zeros nan%" for a layer with no gradient, and the
    # tooltip "grad/weight: Infinity" for a weight that is exactly zero (LoRA B at initialisation).
    torch.manual_seed(0)
    model = ThreeWays()
    nn.init.zeros_(model.used.weight), nn.init.zeros_(model.used.bias)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    flow = gv.gradient_flow(model)
    assert math.isinf(flow.module("used").ratio) and flow.module("cut").n_with_grad == 0  # what the numbers are
    rows = layer_rows(flow)
    i = {layer: n for n, layer in enumerate(rows["layer"])}
    assert rows["ratio_text"][i["used"]] == "no ratio: the weight is exactly zero"
    assert {rows[k][i["cut"]] for k in ("max_abs_text", "mean_text", "zero_frac_text", "ratio_text")} == {
        "no gradient"}
    assert rows["zero_frac_text"][i["zeroed"]] == "100.00%"
    texts = [str(v) for k, col in rows.items() if k.endswith("_text") for v in col]
    assert not any("nan" in t.lower() or "inf" in t.lower() for t in texts), texts
    assert layer_numbers(flow.module("cut")) == "no gradient"
    assert layer_numbers(flow.module("zeroed")).startswith("L2 norm 0, max |g| 0, zeros 100.00%")
    tips = dict(TIPS)
    assert all(v.endswith("_text") or v in ("@layer", "@verdict", "@nonfinite", "@params", "@flags")
               for v in tips.values()), tips


def test_each_verdict_has_its_own_colour_hatch_and_word() -> None:
    flagged = {k: v for k, v in VERDICTS.items() if k not in ("ok", "no-grad")}
    assert len({c for c, _, _ in VERDICTS.values()}) == len(VERDICTS)
    assert len({h for _, h, _ in flagged.values()}) == len(flagged) and " " not in {h for _, h, _ in flagged.values()}
    assert len({w for _, _, w in VERDICTS.values()}) == len(VERDICTS)
    assert len({m for m, _ in STATES.values()}) == len(STATES)
    # a flag on a layer reaches its row: colour, hatch, the word beside it, the reason on hover
    _, flow = _three_ways()
    flow.flags.append(Flag("vanishing", "used", "falls steadily with depth (made up for this test)"))
    flow.flags.append(Flag("exploding", "zeroed", "made up"))
    rows = layer_rows(flow)
    v, e = rows["layer"].index("used"), rows["layer"].index("zeroed")
    assert (rows["color"][v], rows["hatch"][v], rows["note"][v]) == (VERDICTS["vanishing"][0], ".", "vanishing")
    assert "falls steadily with depth" in rows["flags"][v]
    assert rows["note"][e] == "exactly 0 · exploding" and rows["hatch"][e] == "x"


def test_short_names_strip_the_common_prefix() -> None:
    names = ["base_model.model.h.0.attn.c_attn", "base_model.model.h.0.mlp", "base_model.model.h.1.mlp"]
    prefix, labels = short_names(names)
    assert prefix == "base_model.model.h." and labels == ["0.attn.c_attn", "0.mlp", "1.mlp"]
    assert short_names(["", "fc1", "fc2"]) == ("", ["(top level)", "fc1", "fc2"])
    assert short_names(["a.b", "a"]) == ("", ["a.b", "a"])  # a name that is the prefix itself keeps it
    assert short_names(["only.one.layer"]) == ("", ["only.one.layer"])
    long = ["m." + "x" * 50 + ".q", "m." + "y" * 50 + ".q"]
    _, labels = short_names(long)
    assert all(len(x) <= 34 and x.startswith("…") for x in labels) and len(set(labels)) == 2
    tail = ".tail_is_long_enough_to_clip"
    _, same_tail = short_names(["m." + "x" * 50 + tail, "m." + "y" * 50 + tail])
    assert len(set(same_tail)) == 2  # clipping would merge them: full names kept


def test_colour_scales_never_collapse_to_one_value() -> None:
    low, high = _log_mapper_range([0.09802, 0.09802, math.nan])
    assert low < 0.09802 < high
    assert _log_mapper_range([0.01, 1.0]) == (0.01, 1.0)
    assert _log_mapper_range([math.nan]) == (1e-6, 1.0)


def test_histogram_has_a_colour_bar_and_rows_level_with_the_bars() -> None:
    model, flow = _three_ways()
    layout, _ = flow_charts(flow, layer_histograms(model))
    bars, heat = layout.children
    assert heat.select_one({"type": ColorBar}) is not None
    assert heat.y_range is bars.y_range and (heat.height, heat.min_border_top, heat.min_border_bottom) == (
        bars.height, bars.min_border_top, bars.min_border_bottom)
    assert bars.sizing_mode == "stretch_width" and layout.sizing_mode == "stretch_width"
    assert any("flex-wrap: wrap" in str(s) for s in layout.stylesheets)  # narrow cells: histogram goes below
    zero_row = [f for f, lab in zip(heat.renderers[0].data_source.data["frac"],
                                    heat.renderers[0].data_source.data["layer"], strict=True) if lab == "zeroed"]
    assert zero_row == [1.0]  # every element of the zeroed layer in the exact-zero column


def _stale_monitor(forget_at: int = 4) -> gv.GradientMonitor:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    mon = gv.GradientMonitor(model, live_interval=0.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(7):
        model(torch.randn(6, 4)).pow(2).mean().backward()
        mon.step()
        opt.step()
        if step != forget_at:
            opt.zero_grad()
    return mon


def test_monitor_marks_the_stale_step() -> None:
    mon = _stale_monitor()
    stale = [s for s, f in mon.flags() if f.kind == "stale-grad"]
    assert stale == [6]  # zero_grad skipped after step 5: step 6 adds onto it
    layout = mon.chart(widget=False)
    heat_fig, lines_fig = layout.children
    cells, model = monitor_flag_rows(mon)
    # every parameter was stale: the whole step is marked, on both charts, with its reason
    assert model["step"] == [6] and model["kind"] == ["stale-grad"] and cells["step"] == []
    for fig in (heat_fig, lines_fig):
        band = fig.select_one({"name": "flag_steps"})
        assert band.data_source.data["step"] == [6] and "zero_grad" in band.data_source.data["reason"][0]
        # the dashed band says what it is, on the chart: its kind's words at its foot
        words = fig.select_one({"name": "flag_step_labels"})
        assert words.source is band.data_source and words.text == "label"
        assert band.data_source.data["label"] == ["stale gradient (every layer)"]
    # no marker on a layer: no legend for markers (an empty one drew a stray square)
    assert heat_fig.select_one({"name": "flag_legend"}).visible is False
    healthy = _stale_monitor(forget_at=-1)
    assert monitor_flag_rows(healthy)[1]["step"] == [] and monitor_flag_rows(healthy)[0]["step"] == []
    mon.close()
    healthy.close()


def test_monitor_layer_flags_and_missing_cells() -> None:
    torch.manual_seed(0)
    model = ThreeWays()
    mon = gv.GradientMonitor(model, live_interval=0.0)
    layout = mon.chart(widget=False)
    for _ in range(4):
        model(torch.randn(5, 4)).pow(2).sum().backward()
        mon.step()
        model.zero_grad()
    heat, lines = monitor_rows(mon)
    state = {(lab, s): st for lab, s, st in zip(heat["layer"], heat["step"], heat["state"], strict=True)}
    assert state[("used", 4)] == "grad" and state[("zeroed", 4)] == "zero" and state[("cut", 4)] == "none"
    hatch = dict(zip(heat["state"], heat["hatch"], strict=False))
    assert hatch["none"] != hatch["zero"] and " " not in (hatch["none"], hatch["zero"])
    cells, _ = monitor_flag_rows(mon)
    assert {"zeroed", "cut"} <= {layer for layer, kind in zip(cells["layer"], cells["kind"], strict=True)
                                 if kind == "no-grad"}
    assert "used" not in cells["layer"]
    marks = layout.children[0].select_one({"name": "flag_marks"}).data_source
    assert marks.data["kind"] == cells["kind"]  # the live chart got the same marks
    # made before any flag (hidden then), the markers' legend shows once the live chart has markers
    assert layout.children[0].select_one({"name": "flag_legend"}).visible is True
    assert set(lines) == {"step", "y0", "y1", "y2"}
    mon.close()


def test_charts_follow_the_page_theme() -> None:
    _, flow = _three_ways()
    fig = norm_bars(flow, ColumnDataSource(layer_rows(flow)))
    fig.background_fill_color = "#123456"
    callback = follow_page_theme(fig)
    assert isinstance(callback, CustomJS) and "data-jp-theme-light" in callback.code
    assert fig.background_fill_color == THEMES["light"]["frame"]  # styled light in Python
    models, styles = callback.args["models"], callback.args["styles"]
    plot = models.index(fig)
    assert styles[plot]["background_fill_color"] == [THEMES["light"]["frame"], THEMES["dark"]["frame"]]
    assert {type(m).__name__ for m in models} >= {"figure", "Title", "LogAxis", "CategoricalAxis", "Grid",
                                                  "Legend"}
    assert all(any(pair[0] != pair[1] for pair in s.values()) for s in styles)  # each model changes with the theme
    assert sum(isinstance(m, Plot) for m in models) == 1


def test_widget_registers_the_theme_switch_and_stretches() -> None:
    from gradviz_nb.widgets.flow_charts import as_widget

    _, flow = _three_ways()
    layout, _ = flow_charts(flow)
    widget = as_widget(layout)
    callbacks = layout.document.callbacks.js_event_callbacks["document_ready"]
    assert len(callbacks) == 1 and "MutationObserver" in callbacks[0].code
    assert widget.layout.width == "100%"

"""Bokeh charts of gradient flow: per-layer norms, per-layer histograms, and the monitor's history.

Figures are plain Bokeh layouts (usable with ``bokeh.io.show`` or ``bokeh.embed``). In a notebook they
are wrapped in jupyter_bokeh's ``BokehModel`` widget (:func:`as_widget`), which keeps the Bokeh
document in sync both ways: Python edits to a ``ColumnDataSource`` reach the page (live monitor
updates, selection from the graph), and a tap in the page reaches Python (selection to the graph).

BokehJS is loaded INLINE, never from a CDN (offline machines and firewalled companies): the
``BokehModel`` view needs ``window.Bokeh`` before it renders, so :func:`load_bokehjs` publishes the
inline bundle once per kernel (``force=True`` again, e.g. after reloading the page).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bokeh.layouts import column, row
from bokeh.models import (
    ColumnDataSource,
    FactorRange,
    HoverTool,
    LogColorMapper,
    Range1d,
    TapTool,
)
from bokeh.palettes import Category20_20, Viridis256
from bokeh.plotting import figure
from bokeh.transform import linear_cmap

from gradviz_nb.probes.flow import HIST_RANGE, GradientFlow, ModuleStats

if TYPE_CHECKING:
    from bokeh.models import LayoutDOM

    from gradviz_nb.probes.monitor import GradientMonitor

__all__ = ["as_widget", "flow_charts", "load_bokehjs", "monitor_chart", "norm_bars"]

# One colour per verdict, the same in every chart: vanishing and exploding must never look alike.
COLORS = {"ok": "#4c78a8", "vanishing": "#f58518", "exploding": "#e45756", "nan": "#b279a2",
          "no-grad": "#9d9d9d", "dead-adapter": "#9d9d9d"}
VERDICT_TEXT = {"ok": "no flag", "vanishing": "vanishing", "exploding": "exploding", "nan": "NaN/Inf",
                "no-grad": "no gradient", "dead-adapter": "dead adapter"}
ROW_PX = 16  # pixels per layer row
_BOKEHJS_LOADED = False


def load_bokehjs(force: bool = False) -> None:
    """Publish BokehJS (inline, no CDN) to the notebook page, once per kernel unless ``force``."""
    global _BOKEHJS_LOADED
    if _BOKEHJS_LOADED and not force:
        return
    from bokeh.io import output_notebook
    from bokeh.resources import INLINE

    output_notebook(INLINE, hide_banner=True)
    _BOKEHJS_LOADED = True


def as_widget(layout: LayoutDOM) -> Any:
    """``jupyter_bokeh.BokehModel`` of ``layout`` (loads BokehJS inline first)."""
    from jupyter_bokeh import BokehModel

    load_bokehjs()
    return BokehModel(layout)


def _fmt(x: float) -> str:
    return "none" if math.isnan(x) else f"{x:.6g}"


def chart_layers(flow: GradientFlow) -> list[ModuleStats]:
    """The layers the charts show: those with at least one trainable parameter, in model order."""
    trainable = {p.module for p in flow.params if p.requires_grad}
    return [m for m in flow.layers if m.path in trainable]


def layer_rows(flow: GradientFlow) -> dict[str, list[Any]]:
    """One row per layer (model order): numbers, colour, flags; the data behind :func:`norm_bars`."""
    layers = chart_layers(flow)
    positive = [m.norm for m in layers if m.n_with_grad and math.isfinite(m.norm) and m.norm > 0]
    floor = min(positive) / 10 if positive else 1e-12
    data: dict[str, list[Any]] = {k: [] for k in ("layer", "norm", "right", "left", "max_abs", "mean", "zero_frac",
                                                 "ratio", "nonfinite", "params", "color", "flags", "norm_text",
                                                 "verdict")}
    for m in layers:
        flags = flow.flags_for(m.path) if m.path else [f for f in flow.flags if "." not in f.target]
        own = [f for f in flags if f.kind != "stale-grad"
               and (f.target == m.path or any(p.rpartition(".")[0] == m.path for p in f.params))]
        verdict = _verdict(m, {f.kind for f in own})
        ok = m.n_with_grad and math.isfinite(m.norm) and m.norm > 0
        data["layer"].append(m.path or "(top level)")
        data["norm"].append(m.norm)
        data["right"].append(m.norm if ok else floor)
        data["left"].append(floor / 10)
        data["max_abs"].append(m.max_abs)
        data["mean"].append(m.mean)
        data["zero_frac"].append(m.zero_frac)
        data["ratio"].append(m.ratio)
        data["nonfinite"].append(m.nonfinite)
        data["params"].append(f"{m.n_with_grad}/{m.n_params} with grad")
        data["color"].append(COLORS[verdict])
        data["verdict"].append(VERDICT_TEXT[verdict])
        data["flags"].append("; ".join(f"[{f.kind}] {f.reason}" for f in own) or "-")
        data["norm_text"].append(_fmt(m.norm) if m.n_with_grad else "no gradient")
    return data


def _verdict(m: ModuleStats, kinds: set[str]) -> str:
    """The one verdict a layer's bar shows, worst first."""
    if m.n_with_grad == 0:
        return "no-grad"
    if m.nonfinite or "nan" in kinds:
        return "nan"
    return next((k for k in ("exploding", "vanishing", "dead-adapter", "no-grad") if k in kinds), "ok")


TIPS = [("layer", "@layer"), ("verdict", "@verdict"),
        ("L2 norm", "@norm_text"), ("max |g|", "@max_abs{%0.6g}"), ("mean", "@mean{%0.6g}"),
        ("zeros", "@zero_frac{0.00%}"), ("grad/weight", "@ratio{%0.4g}"), ("NaN/Inf", "@nonfinite"),
        ("params", "@params"), ("flags", "@flags")]
SELECTION_STYLE: dict[str, Any] = dict(selection_fill_alpha=1.0, nonselection_fill_alpha=0.35,
                                       selection_line_color="black", selection_line_width=2)
FORMATS: dict[str, Any] = {"@max_abs": "printf", "@mean": "printf", "@ratio": "printf"}


def norm_bars(flow: GradientFlow, source: ColumnDataSource | None = None, width: int = 340) -> Any:
    """Horizontal bars: gradient L2 norm per layer on a log axis, in model order (top to bottom).

    Flagged layers are red, NaN/Inf purple, layers without gradient grey. Hover: exact numbers.
    Click a bar to select the layer (``source.selected.indices``).
    """
    source = source or ColumnDataSource(layer_rows(flow))
    layers = list(source.data["layer"])
    fig = figure(title="gradient L2 norm per layer", y_range=FactorRange(factors=layers[::-1]), x_axis_type="log",
                 width=width, height=60 + ROW_PX * max(len(layers), 3),
                 tools=[TapTool(mode="replace"), "reset", "xwheel_zoom", "xpan"],
                 toolbar_location="above", name="norm_bars")
    bars = fig.hbar(y="layer", left="left", right="right", height=0.8, fill_color="color", line_color=None,
                    source=source, legend_field="verdict", **SELECTION_STYLE)
    legend = fig.legend[0]  # the verdicts by name, under the plot so no bar hides behind it
    legend.orientation, legend.label_text_font_size, legend.click_policy = "horizontal", "9px", "none"
    fig.add_layout(legend, "below")
    fig.add_tools(HoverTool(renderers=[bars], tooltips=TIPS, formatters=FORMATS))
    fig.xaxis.axis_label = "‖grad‖₂ (log)"
    fig.yaxis.major_label_text_font_size = "9px"
    return fig


def histogram_rows(edges: Sequence[float], hists: dict[str, list[float]], layers: Sequence[str]) -> dict[str, Any]:
    """Rects for the per-layer histogram heatmap (one row per layer, one column per log10 |g| bin)."""
    step = edges[1] - edges[0]
    data: dict[str, list[Any]] = {"layer": [], "x": [], "frac": [], "bin": []}
    for layer in layers:
        fracs = hists.get(layer if layer != "(top level)" else "", [])
        for i, frac in enumerate(fracs):
            if frac <= 0:
                continue
            data["layer"].append(layer)
            data["x"].append(edges[0] - step if i == 0 else edges[i - 1] + step / 2)
            data["frac"].append(frac)
            data["bin"].append("exactly 0" if i == 0 else f"1e{edges[i - 1]:.1f} .. 1e{edges[i]:.1f}")
    return data


def histogram_heatmap(edges: Sequence[float], hists: dict[str, list[float]], y_range: FactorRange,
                      width: int = 220) -> Any:
    """Per-layer gradient histograms as a heatmap: x is log10 |g|, shade is the fraction of elements."""
    layers = [str(f) for f in y_range.factors][::-1]
    step = edges[1] - edges[0]
    source = ColumnDataSource(histogram_rows(edges, hists, layers))
    fig = figure(title="histogram of log10 |grad|", y_range=y_range, width=width,
                 height=60 + ROW_PX * max(len(layers), 3), tools="reset", toolbar_location="above",
                 x_range=Range1d(start=HIST_RANGE[0] - 2 * step, end=HIST_RANGE[1]), name="histograms")
    cells = fig.rect(x="x", y="layer", width=step, height=0.9, source=source, line_color=None,
                     fill_color=linear_cmap("frac", Viridis256[::-1][40:], 0, 1))
    fig.add_tools(HoverTool(renderers=[cells], tooltips=[("layer", "@layer"), ("|g| in", "@bin"),
                                                          ("fraction", "@frac{0.000%}")]))
    fig.yaxis.visible = False
    fig.xaxis.axis_label = "log10 |grad|  (left column: exact zeros)"
    return fig


def flow_charts(flow: GradientFlow, hists: tuple[list[float], dict[str, list[float]]] | None = None
                ) -> tuple[Any, ColumnDataSource]:
    """Norm bars and (when ``hists`` from :func:`layer_histograms`) histograms side by side.

    Returns ``(layout, bar_source)``; the bar source's ``selected.indices`` is the selected layer.
    """
    source = ColumnDataSource(layer_rows(flow))
    bars = norm_bars(flow, source)
    if hists is None:
        return bars, source
    heat = histogram_heatmap(hists[0], hists[1], bars.y_range)
    return row(bars, heat), source


# ------------------------------------------------------------------------------------------------
# monitor
# ------------------------------------------------------------------------------------------------


def monitor_rows(mon: GradientMonitor) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """(heatmap rects, lines) data of a monitor's history."""
    steps = mon.steps
    norms = mon.reduced("norm").tolist()
    widths = [b - a for a, b in itertools.pairwise(steps)] + [mon.every * mon.stride] * bool(steps)
    heat: dict[str, list[Any]] = {"step": [], "x": [], "w": [], "layer": [], "norm": [], "norm_text": []}
    for r, (s, w) in enumerate(zip(steps, widths, strict=True)):
        for c, layer in enumerate(mon.layers):
            v = norms[r][c]
            heat["step"].append(s)
            heat["x"].append(s + w / 2 - 0.5)
            heat["w"].append(w)
            heat["layer"].append(layer or "(top level)")
            heat["norm"].append(v if math.isfinite(v) and v > 0 else math.nan)
            heat["norm_text"].append(_fmt(v))
    lines: dict[str, list[Any]] = {"xs": [], "ys": [], "layer": [], "color": []}
    for c, layer in enumerate(mon.layers):
        ys = [norms[r][c] if math.isfinite(norms[r][c]) and norms[r][c] > 0 else math.nan for r in range(len(steps))]
        lines["xs"].append(list(steps))
        lines["ys"].append(ys)
        lines["layer"].append(layer or "(top level)")
        lines["color"].append(Category20_20[c % 20])
    return heat, lines


def monitor_chart(mon: GradientMonitor, widget: bool = True, width: int = 760) -> Any:
    """Layers x steps heatmap of gradient norms and norm lines over steps; live while training.

    With ``widget`` (default) a ``BokehModel`` the monitor updates in place from :meth:`step`
    (at most every ``live_interval`` seconds); otherwise the Bokeh layout.
    """
    heat, lines = monitor_rows(mon)
    heat_src, line_src = ColumnDataSource(heat), ColumnDataSource(lines)
    layers = [layer or "(top level)" for layer in mon.layers]
    finite = [v for v in heat["norm"] if not math.isnan(v)]
    mapper = LogColorMapper(palette=Viridis256, low=min(finite, default=1e-6), high=max(finite, default=1.0),
                            nan_color="#dddddd")
    hm = figure(title="gradient L2 norm per layer over steps", y_range=FactorRange(factors=layers[::-1]),
                width=width, height=60 + ROW_PX * max(len(layers), 3), tools="reset,xwheel_zoom,xpan",
                toolbar_location="above", name="monitor_heatmap")
    rects = hm.rect(x="x", y="layer", width="w", height=0.95, source=heat_src, line_color=None,
                    fill_color={"field": "norm", "transform": mapper})
    hm.add_tools(HoverTool(renderers=[rects], tooltips=[("layer", "@layer"), ("step", "@step"),
                                                        ("L2 norm", "@norm_text")]))
    hm.yaxis.major_label_text_font_size = "9px"
    ln = figure(title="gradient L2 norm over steps", y_axis_type="log", width=width, height=260,
                tools="reset,xwheel_zoom,xpan", toolbar_location="above", name="monitor_lines")
    ml = ln.multi_line(xs="xs", ys="ys", line_color="color", line_width=1.5, source=line_src)
    ln.add_tools(HoverTool(renderers=[ml], tooltips=[("layer", "@layer"), ("step", "$x{0}"),
                                                     ("L2 norm", "$y{%0.6g}")],
                           formatters={"$y": "printf"}))
    ln.xaxis.axis_label = "training step"
    layout = column(hm, ln)

    def update(m: GradientMonitor) -> None:
        h, ls = monitor_rows(m)
        values = [v for v in h["norm"] if not math.isnan(v)]
        if values:
            mapper.update(low=min(values), high=max(values))
        heat_src.data = h
        line_src.data = ls

    mon.on_record(update)
    return as_widget(layout) if widget else layout

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

import html
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bokeh.document import Document
from bokeh.layouts import column, row
from bokeh.models import (
    CategoricalAxis,
    ColumnDataSource,
    CustomJSTickFormatter,
    FactorRange,
    FixedTicker,
    HoverTool,
    LinearColorMapper,
    LogColorMapper,
    Range1d,
    TapTool,
)
from bokeh.models.annotations import ColorBar, LabelSet, Legend, LegendItem, Title
from bokeh.models.glyphs import Line
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from gradviz_nb.errors import GradvizError
from gradviz_nb.kinds import KINDS
from gradviz_nb.probes.flow import HIST_RANGE, GradientFlow, ModuleStats
from gradviz_nb.widgets.chart_theme import THEMES, follow_page_theme
from gradviz_nb.widgets.names import common_parts

if TYPE_CHECKING:
    from bokeh.models import LayoutDOM

    from gradviz_nb.probes.monitor import GradientMonitor

__all__ = ["as_widget", "flow_charts", "load_bokehjs", "monitor_chart", "norm_bars", "short_names"]

# One encoding per verdict, the same in every chart: colour AND hatch AND a word beside the bar, so no
# verdict is told by colour alone (and vanishing never looks like exploding). Data colours are chosen to
# read on both the light and the dark chart background; chrome colours live in chart_theme.THEMES.
VERDICTS: dict[str, tuple[str, str, str]] = {  # verdict -> (fill colour, hatch pattern, label)
    "ok": ("#4c78a8", " ", "no flag"),
    "vanishing": ("#f58518", ".", "vanishing"),
    "exploding": ("#e45756", "x", "exploding"),
    "nan": ("#b279a2", "+", "NaN/Inf"),
    "dead-adapter": ("#9d755d", "/", "dead adapter"),
    "no-grad": ("#9d9d9d", " ", "no gradient"),
}
# A log axis cannot show 0 (nor a missing value): such layers get no bar but a marker on the axis' floor.
STATES: dict[str, tuple[str, str]] = {  # value state -> (marker, label)
    "zero": ("circle", "exactly 0"),
    "none": ("x", "no gradient (None)"),
    "nonfinite": ("square_x", "NaN/Inf"),
}
MISSING_COLOR = "#9d9d9d"
HATCH_COLOR = "#ffffff"
ROW_PX = 18  # pixels per layer row
NAME_CHARS = 34  # longest label on an axis; longer names keep their tail (full name on hover)
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
    """``jupyter_bokeh.BokehModel`` of ``layout`` (loads BokehJS inline first), stretching to the cell's
    width and following JupyterLab's light/dark theme live."""
    try:
        from jupyter_bokeh import BokehModel
    except ImportError as err:
        raise GradvizError("charts in a notebook need jupyter_bokeh: pip install gradviz_nb[charts]") from err

    load_bokehjs()
    doc = layout.document
    if doc is None:
        doc = Document()
        doc.add_root(layout)
    doc.js_on_event("document_ready", follow_page_theme(layout))
    widget = BokehModel(layout)
    widget.layout.width = "100%"  # the default shrink-wraps; stretch_width figures then collapse
    return widget


def short_names(names: Sequence[str]) -> tuple[str, list[str]]:
    """``(prefix, labels)``: the dotted prefix every name shares, and each name without it (at most
    :data:`NAME_CHARS` characters, keeping the tail). ``""`` (the model itself) reads "(top level)".

    >>> short_names(["base_model.model.h.0.attn", "base_model.model.h.1.mlp"])
    ('base_model.model.h.', ['0.attn', '1.mlp'])
    """
    keep = min((n.count(".") for n in names if n), default=0)  # every label keeps at least its last segment
    common = common_parts(names)[:keep]
    prefix = ".".join(common) + "." if common else ""
    labels = [n.removeprefix(prefix) if n else "(top level)" for n in names]
    clipped = [x if len(x) <= NAME_CHARS else "…" + x[-(NAME_CHARS - 1):] for x in labels]
    # clipping must not merge two layers into one row
    return prefix, clipped if len(set(clipped)) == len(clipped) else labels


def _subtitle(fig: Any, prefix: str) -> None:
    if prefix:
        shown = prefix if len(prefix) <= 60 else "…" + prefix[-59:]
        fig.add_layout(Title(text=f"layers under {shown}", text_font_size="11px", text_font_style="italic"),
                       "above")


TOOLTIP_WIDTH = 320
"""px: the widest a chart's tooltip grows; longer texts (a flag's reason) wrap inside it."""


def tooltip_template(rows: Sequence[tuple[str, str]]) -> str:
    """Bokeh tooltip rows (``(label, "@field")``) as one bounded HTML template: at most
    :data:`TOOLTIP_WIDTH` px wide, each value wrapping under its label instead of running off the chart, in
    a compact 11 px grid. Labels are ours (escaped here); Bokeh escapes every ``@field`` value it fills in."""
    cells = "".join(
        f"<span style='opacity: 0.7; white-space: nowrap'>{html.escape(label)}</span>"
        f"<span style='overflow-wrap: anywhere; min-width: 0'>{field}</span>" for label, field in rows)
    return (f"<div style='display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 1px 8px; "
            f"max-width: {TOOLTIP_WIDTH}px; white-space: normal; font-size: 11px; line-height: 1.35'>{cells}</div>")


def _hover(tooltips: Sequence[tuple[str, str]], **options: Any) -> HoverTool:
    """A HoverTool whose tooltip opens below the pointer (in the Dashboard the graph sits above the charts,
    and Bokeh's default, beside the pointer and centred on it, let a tall tooltip on a top row cover it), in
    a bounded, wrapping box (:func:`tooltip_template`): a flag's long reason never runs off the chart."""
    return HoverTool(attachment="below", tooltips=tooltip_template(tooltips), **options)


def _fmt(x: float) -> str:
    return "none" if math.isnan(x) else f"{x:.6g}"


def chart_layers(flow: GradientFlow) -> list[ModuleStats]:
    """The layers the charts show: those with at least one trainable parameter, in model order."""
    trainable = {p.module for p in flow.params if p.requires_grad}
    return [m for m in flow.layers if m.path in trainable]


def _state(m: ModuleStats) -> str:
    """What the layer's gradient is: ``grad`` (a positive finite norm), ``zero``, ``none`` or ``nonfinite``."""
    if m.n_with_grad == 0:
        return "none"
    if not math.isfinite(m.norm):
        return "nonfinite"
    return "zero" if m.norm == 0 else "grad"


def layer_rows(flow: GradientFlow) -> dict[str, list[Any]]:
    """One row per layer (model order): numbers, encodings, flags; the data behind :func:`norm_bars`.

    ``layer`` is the full path, ``label`` the row's name on the axis (:func:`short_names`). A layer with a
    positive finite norm gets a bar from the common ``left`` floor to ``right``; one whose gradient is
    exactly zero, None or NaN/Inf gets no bar (``right == left``) but a ``marker`` on the floor, and its
    state in ``note``, the text beside the row, with the verdict's label.
    """
    layers = chart_layers(flow)
    positive = [m.norm for m in layers if _state(m) == "grad"]
    floor = 10 ** math.floor(math.log10(min(positive)) - 1) if positive else 1e-12
    _, labels = short_names([m.path for m in layers])
    keys = ("layer", "label", "norm", "right", "left", "max_abs", "mean", "zero_frac", "ratio", "nonfinite",
            "params", "color", "hatch", "verdict", "flags", "norm_text", "state", "marker", "marker_alpha", "note",
            "max_abs_text", "mean_text", "zero_frac_text", "ratio_text")
    data: dict[str, list[Any]] = {k: [] for k in keys}
    for m, label in zip(layers, labels, strict=True):
        flags = flow.flags_for(m.path) if m.path else [f for f in flow.flags if "." not in f.target]
        own = [f for f in flags if f.kind != "stale-grad"
               and (f.target == m.path or any(p.rpartition(".")[0] == m.path for p in f.params))]
        verdict, state = _verdict(m, {f.kind for f in own}), _state(m)
        color, hatch, text = VERDICTS[verdict]
        marker, state_text = STATES.get(state, ("circle", ""))
        row = {"layer": m.path or "(top level)", "label": label, "norm": m.norm,
               "right": m.norm if state == "grad" else floor, "left": floor, "max_abs": m.max_abs, "mean": m.mean,
               "zero_frac": m.zero_frac, "ratio": m.ratio, "nonfinite": m.nonfinite,
               "params": f"{m.n_with_grad}/{m.n_params} with grad",
               "color": MISSING_COLOR if state == "none" else color, "hatch": hatch, "verdict": text,
               "flags": "; ".join(f"[{f.kind}] {f.reason}" for f in own) or "-",
               "norm_text": {"none": "no gradient (None)", "zero": "0 (exactly)"}.get(state, _fmt(m.norm)),
               "state": state, "marker": marker, "marker_alpha": 0.0 if state == "grad" else 1.0,
               "note": " · ".join(dict.fromkeys(t for t in (state_text, "" if verdict == "ok" else text)
                                                if t and not (state == "none" and verdict == "no-grad")))
               or ("no gradient (None)" if state == "none" else ""),
               **stat_texts(m, state)}
        for k in keys:
            data[k].append(row[k])
    return data


def stat_texts(m: ModuleStats, state: str) -> dict[str, str]:
    """A layer's numbers as a reader sees them: "no gradient" where there is none (never "nan" or "nan%"),
    and a grad/weight ratio over a zero weight (LoRA B at initialisation) said in words, not "Infinity"."""
    if state == "none":
        return dict.fromkeys(("max_abs_text", "mean_text", "zero_frac_text", "ratio_text"), "no gradient")
    if math.isinf(m.ratio):
        ratio = "no ratio: the weight is exactly zero"
    else:
        ratio = "n/a" if math.isnan(m.ratio) else f"{m.ratio:.4g}"
    return {"max_abs_text": _fmt(m.max_abs), "mean_text": _fmt(m.mean),
            "zero_frac_text": "n/a" if math.isnan(m.zero_frac) else f"{m.zero_frac:.2%}", "ratio_text": ratio}


def layer_numbers(m: ModuleStats) -> str:
    """One line of a layer's gradient numbers for text summaries: "no gradient" when none arrived."""
    if m.n_with_grad == 0:
        return "no gradient"
    t = stat_texts(m, "grad")
    return (f"L2 norm {_fmt(m.norm)}, max |g| {t['max_abs_text']}, zeros {t['zero_frac_text']}, "
            f"grad/weight {t['ratio_text']}")


def _verdict(m: ModuleStats, kinds: set[str]) -> str:
    """The one verdict a layer's bar shows, worst first."""
    if m.n_with_grad == 0:
        return "no-grad"
    if m.nonfinite or "nan" in kinds:
        return "nan"
    return next((k for k in ("exploding", "vanishing", "dead-adapter", "no-grad") if k in kinds), "ok")


TIPS = [("layer", "@layer"), ("verdict", "@verdict"),
        ("L2 norm", "@norm_text"), ("max |g|", "@max_abs_text"), ("mean", "@mean_text"),
        ("zeros", "@zero_frac_text"), ("grad/weight", "@ratio_text"), ("NaN/Inf", "@nonfinite"),
        ("params", "@params"), ("why", "@flags")]
SELECTION_STYLE: dict[str, Any] = dict(selection_fill_alpha=1.0, nonselection_fill_alpha=0.55,
                                       selection_line_color="#f2c200", selection_line_width=3)
NOTE_JS = "const d = source.data, i = d.label.indexOf(tick); return i < 0 ? '' : d.note[i];"


def _rows_height(n: int) -> int:
    return ROW_PX * max(n, 3)


def norm_bars(flow: GradientFlow, source: ColumnDataSource | None = None, min_width: int = 420) -> Any:
    """Horizontal bars: gradient L2 norm per layer on a log axis, in model order (top to bottom).

    Each verdict has its colour, hatch and word (right of the row, and in the legend); a gradient that is
    exactly zero, None or NaN/Inf is a marker on the axis' floor, not a bar. Hover: exact numbers and the
    reason. Click a bar to select the layer (``source.selected.indices``). Stretches to the cell's width.
    """
    source = source or ColumnDataSource(layer_rows(flow))
    data = source.data
    labels = list(data["label"])
    prefix, _ = short_names([m.path for m in chart_layers(flow)])
    fig = figure(title=Title(text="gradient L2 norm per layer", text_font_size="13px"),
                 y_range=FactorRange(factors=labels[::-1]), x_axis_type="log",
                 sizing_mode="stretch_width", min_width=min_width,
                 tools=[TapTool(mode="replace"), "reset", "xwheel_zoom", "xpan"], toolbar_location="right",
                 name="norm_bars")
    bars = fig.hbar(y="label", left="left", right="right", height=0.8, fill_color="color", line_color=None,
                    hatch_pattern="hatch", hatch_color=HATCH_COLOR, hatch_alpha=0.7, hatch_scale=7, source=source,
                    **SELECTION_STYLE)
    marks = fig.scatter(x="left", y="label", marker="marker", size=12, fill_alpha=0, line_color="color",
                        line_width=2.5, line_alpha="marker_alpha", source=source, name="norm_marks",
                        selection_line_alpha="marker_alpha", nonselection_line_alpha="marker_alpha",
                        selection_fill_alpha=0, nonselection_fill_alpha=0)
    # the row's verdict/state in words on a right-hand axis (a categorical axis takes a JS formatter too)
    note = CustomJSTickFormatter(args={"source": source}, code=NOTE_JS)
    fig.add_layout(CategoricalAxis(formatter=note,  # type: ignore[arg-type]
                                   major_label_text_font_size="11px", major_tick_out=0, major_tick_in=0,
                                   axis_line_alpha=0), "right")
    legend = _verdict_legend(data, bars, marks)
    fig.add_layout(legend, "below")
    # fixed borders (title and subtitle above; axis and legend below) so a histogram beside it lines up
    fig.min_border_top, fig.min_border_bottom = 56, 64 + 24 * math.ceil(len(legend.items) / 4)
    fig.height = fig.min_border_top + _rows_height(len(labels)) + fig.min_border_bottom
    fig.add_tools(_hover(renderers=[bars, marks], tooltips=TIPS))
    fig.xaxis.axis_label = "‖grad‖₂ (log scale)"
    fig.yaxis.major_label_text_font_size = "11px"
    _subtitle(fig, prefix)
    return fig


def _verdict_legend(data: dict[str, Any], bars: Any, marks: Any) -> Legend:
    """One entry per verdict and per bar-less state present, drawn from a row that has it."""
    items: list[LegendItem] = []
    for text in dict.fromkeys(data["verdict"]):
        i = next(i for i, v in enumerate(data["verdict"]) if v == text)
        if data["state"][i] == "grad" or text != "no gradient":
            items.append(LegendItem(label=text, renderers=[bars], index=i))
    for state, (_, text) in STATES.items():
        if state in data["state"]:
            items.append(LegendItem(label=text, renderers=[marks], index=data["state"].index(state)))
    return Legend(items=items, orientation="horizontal", ncols=min(len(items), 4), label_text_font_size="11px",
                  click_policy="none", glyph_width=18, spacing=8, margin=4, location="left")


def histogram_rows(edges: Sequence[float], hists: dict[str, list[float]], layers: Sequence[str],
                   labels: Sequence[str] | None = None) -> dict[str, Any]:
    """Rects for the per-layer histogram heatmap (one row per layer, one column per log10 |g| bin).

    ``layers`` are full paths (``"(top level)"`` for the model), ``labels`` their rows on the axis."""
    step = edges[1] - edges[0]
    data: dict[str, list[Any]] = {"layer": [], "label": [], "x": [], "frac": [], "bin": []}
    for layer, label in zip(layers, labels or layers, strict=True):
        fracs = hists.get(layer if layer != "(top level)" else "", [])
        for i, frac in enumerate(fracs):
            if frac <= 0:
                continue
            data["layer"].append(layer)
            data["label"].append(label)
            data["x"].append(edges[0] - step if i == 0 else edges[i - 1] + step / 2)
            data["frac"].append(frac)
            data["bin"].append("exactly 0" if i == 0 else f"1e{edges[i - 1]:.1f} .. 1e{edges[i]:.1f}")
    return data


def histogram_heatmap(edges: Sequence[float], hists: dict[str, list[float]], y_range: FactorRange,
                      layers: Sequence[str] | None = None, width: int = 540) -> Any:
    """Per-layer gradient histograms as a heatmap: x is log10 |g| (first column: exact zeros), shade is
    the fraction of the layer's elements, with its colour bar. Rows follow ``y_range`` (shared with the bars);
    ``layers`` are the full names of its factors, top row last (default: the factors themselves)."""
    labels = [str(f) for f in y_range.factors][::-1]
    step = edges[1] - edges[0]
    source = ColumnDataSource(histogram_rows(edges, hists, list(layers or labels), labels))
    mapper = LinearColorMapper(palette=THEMES["light"]["sequential"], low=0, high=1)
    fig = figure(title=Title(text="histogram of |grad| per layer", text_font_size="13px"), y_range=y_range, width=width,
                 height=150 + _rows_height(len(labels)), tools="reset", toolbar_location="right",
                 x_range=Range1d(start=HIST_RANGE[0] - 2 * step, end=HIST_RANGE[1]), name="histograms")
    cells = fig.rect(x="x", y="label", width=step, height=0.9, source=source, line_color=None,
                     fill_color={"field": "frac", "transform": mapper})
    fig.add_tools(_hover(renderers=[cells], tooltips=[("layer", "@layer"), ("|g| in", "@bin"),
                                                          ("fraction", "@frac{0.000%}")]))
    zero_x = HIST_RANGE[0] - step
    ticks = [zero_x, *range(math.ceil(HIST_RANGE[0] + 2), math.floor(HIST_RANGE[1]) + 1, 2)]
    fig.xaxis.ticker = FixedTicker(ticks=ticks)
    # ticks read as |grad| values (1e-4), so the exact-zero column's "0" cannot be mistaken for log10 = 0
    fig.xaxis.major_label_overrides = {zero_x: "0", **{t: f"1e{t:g}" for t in ticks[1:]}}
    fig.yaxis.major_label_text_font_size = "11px"  # its own names: in a narrow cell it wraps under the bars
    fig.xaxis.axis_label = "|grad| (log bins; first column: exactly 0)"
    fig.add_layout(ColorBar(color_mapper=mapper, title="fraction", width=10, title_text_font_size="11px",
                            major_label_text_font_size="10px", padding=4), "right")
    return fig


def flow_charts(flow: GradientFlow, hists: tuple[list[float], dict[str, list[float]]] | None = None
                ) -> tuple[Any, ColumnDataSource]:
    """Norm bars and (when ``hists`` from :func:`layer_histograms`) histograms side by side, stretching.

    Returns ``(layout, bar_source)``; the bar source's ``selected.indices`` is the selected layer.
    """
    source = ColumnDataSource(layer_rows(flow))
    bars = norm_bars(flow, source)
    if hists is None:
        return bars, source
    heat = histogram_heatmap(hists[0], hists[1], bars.y_range, layers=list(source.data["layer"]))
    # rows level with the bars: the same borders above (title, subtitle) and below (axis, legend)
    heat.min_border_top, heat.min_border_bottom, heat.height = bars.min_border_top, bars.min_border_bottom, bars.height
    # side by side when the cell is wide enough for both, the histogram under the bars when not
    return row(bars, heat, sizing_mode="stretch_width", stylesheets=[":host { flex-wrap: wrap; }"]), source


# ------------------------------------------------------------------------------------------------
# monitor
# ------------------------------------------------------------------------------------------------


FLAG_MARKERS = {"stale-grad": "star", "spike": "triangle", "no-grad": "x", "nan": "square_x",
                "not-in-optimizer": "diamond", "update-size": "hex", "clipping": "inverted_triangle"}


def _cell_state(norm: float, missing: float) -> str:
    if math.isnan(norm) or math.isinf(norm):
        return "none" if missing else "nonfinite"
    return ("none" if missing else "zero") if norm == 0 else "grad"


def monitor_rows(mon: GradientMonitor) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """(heatmap rects, lines) data of a monitor's history.

    Heatmap cells without a positive finite norm have ``norm`` NaN (the colour bar's "no value"), a
    ``state`` (``zero``, ``none``, ``nonfinite``) and a hatch. Lines: ``step`` and one column ``y<i>`` per
    layer (NaN where there is nothing to draw on a log axis).
    """
    steps = mon.steps
    norms = mon.reduced("norm").tolist()
    missing = mon.reduced("missing").tolist()
    widths = [b - a for a, b in itertools.pairwise(steps)] + [mon.every * mon.stride] * bool(steps)
    _, labels = short_names(mon.layers)
    heat: dict[str, list[Any]] = {k: [] for k in ("step", "x", "w", "layer", "label", "norm", "norm_text", "state",
                                                  "hatch")}
    for r, (s, w) in enumerate(zip(steps, widths, strict=True)):
        for c, (layer, label) in enumerate(zip(mon.layers, labels, strict=True)):
            v, state = norms[r][c], _cell_state(norms[r][c], missing[r][c])
            heat["step"].append(s)
            heat["x"].append(s + w / 2 - 0.5)
            heat["w"].append(w)
            heat["layer"].append(layer or "(top level)")
            heat["label"].append(label)
            heat["norm"].append(v if state == "grad" else math.nan)
            heat["norm_text"].append({"none": "no gradient (None)", "zero": "0 (exactly)"}.get(state, _fmt(v)))
            heat["state"].append(state)
            heat["hatch"].append({"none": "x", "zero": ".", "nonfinite": "+"}.get(state, " "))
    lines: dict[str, list[Any]] = {"step": list(steps)}
    for c in range(len(mon.layers)):
        lines[f"y{c}"] = [norms[r][c] if math.isfinite(norms[r][c]) and norms[r][c] > 0 else math.nan
                          for r in range(len(steps))]
    return heat, lines


def monitor_flag_rows(mon: GradientMonitor) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """(flags on a layer, flags on the whole model) of a monitor, for markers and step bands.

    A flag whose target is a layer, or a parameter or module under one, marks that layer's cell of its
    step; any other (the model: stale gradients everywhere, clipping) marks the whole step.
    """
    _, labels = short_names(mon.layers)
    label_of = dict(zip(mon.layers, labels, strict=True))
    norms = mon.reduced("norm").tolist()
    row_of = {s: r for r, s in enumerate(mon.steps)}
    cells: dict[str, list[Any]] = {k: [] for k in ("step", "label", "layer", "kind", "reason", "marker", "y")}
    model: dict[str, list[Any]] = {k: [] for k in ("step", "kind", "reason", "label")}
    for step, flag in mon.flags():
        # a flag on parameters marks each layer holding one; one on every layer (or the model) marks the step
        hit = {_layer_of(t, mon.layers) for t in (flag.params or (flag.target,))}
        if None in hit or len(hit) == len(mon.layers) > 1:
            model["step"].append(step)
            model["kind"].append(flag.kind)
            model["reason"].append(flag.reason)
            model["label"].append(f"{KINDS[flag.kind].label} (every layer)")
            continue
        r = row_of.get(step)
        for layer in sorted(hit, key=mon.layers.index):  # type: ignore[arg-type]
            assert layer is not None
            y = norms[r][mon.layers.index(layer)] if r is not None else math.nan
            cells["step"].append(step)
            cells["label"].append(label_of[layer])
            cells["layer"].append(layer or "(top level)")
            cells["kind"].append(flag.kind)
            cells["reason"].append(flag.reason)
            cells["marker"].append(FLAG_MARKERS.get(flag.kind, "circle"))
            cells["y"].append(y if math.isfinite(y) and y > 0 else math.nan)
    return cells, model


def _layer_of(target: str, layers: Sequence[str]) -> str | None:
    """The charted layer ``target`` (a layer, or a parameter or module under one) belongs to; None: the model."""
    if target in layers and (target or len(layers) == 1):
        return target
    under = [x for x in layers if x and target.startswith(x + ".")]
    return max(under, key=len) if under else None


def _log_mapper_range(values: Sequence[float]) -> tuple[float, float]:
    """Low and high of a log colour scale; never one value twice (a degenerate bar reads "a … a")."""
    finite = [v for v in values if not math.isnan(v)]
    low, high = min(finite, default=1e-6), max(finite, default=1.0)
    return (low / 2, high * 2) if high <= low * 1.01 else (low, high)


def monitor_chart(mon: GradientMonitor, widget: bool = True, min_width: int = 480) -> Any:
    """Layers x steps heatmap of gradient norms (with its colour bar) and norm lines over steps (legend,
    hover picks the nearest line); flagged steps marked on both; live while training, stretching to the cell.

    With ``widget`` (default) a ``BokehModel`` the monitor updates in place from :meth:`step`
    (at most every ``live_interval`` seconds); otherwise the Bokeh layout.
    """
    heat, lines = monitor_rows(mon)
    cells, model = monitor_flag_rows(mon)
    heat_src, line_src = ColumnDataSource(heat), ColumnDataSource(lines)
    cell_src, model_src = ColumnDataSource(cells), ColumnDataSource(model)
    prefix, labels = short_names(mon.layers)
    low, high = _log_mapper_range(heat["norm"])
    mapper = LogColorMapper(palette=THEMES["light"]["sequential"], low=low, high=high, nan_color=MISSING_COLOR)
    hm = figure(title="gradient L2 norm per layer over steps", y_range=FactorRange(factors=labels[::-1]),
                sizing_mode="stretch_width", min_width=min_width, height=56 + max(24 * len(labels), 140) + 100,
                tools="reset,xwheel_zoom,xpan", toolbar_location="right", name="monitor_heatmap")
    rects = hm.rect(x="x", y="label", width="w", height=0.95, source=heat_src, line_color=None,
                    fill_color={"field": "norm", "transform": mapper}, hatch_pattern="hatch",
                    hatch_color="#444444", hatch_scale=6)
    hm.add_tools(_hover(renderers=[rects], tooltips=[("layer", "@layer"), ("step", "@step"),
                                                        ("L2 norm", "@norm_text")]))
    hm.yaxis.major_label_text_font_size = "11px"
    hm.xaxis.axis_label = "training step"
    hm.add_layout(ColorBar(color_mapper=mapper, title="‖grad‖₂", width=10, padding=4, title_text_font_size="11px",
                           major_label_text_font_size="10px"), "right")
    _subtitle(hm, prefix)
    ln = figure(title="gradient L2 norm over steps (hover a line for its layer)", y_axis_type="log",
                sizing_mode="stretch_width", min_width=min_width, height=max(280, 60 + 19 * min(len(labels), 20)),
                tools="reset,xwheel_zoom,xpan", toolbar_location="right", name="monitor_lines")
    items: list[Any] = []
    drawn: list[Any] = []
    for c, (layer, label) in enumerate(zip(mon.layers, labels, strict=True)):
        # ten hues, then the same hues dashed, dotted...: no two of up to 40 lines look alike
        look: dict[str, Any] = dict(line_color=Category10_10[c % 10],
                                    line_dash=["solid", "dashed", "dotted", "dotdash"][(c // 10) % 4])
        r: Any = ln.line(x="step", y=f"y{c}", source=line_src, line_width=1.8, name=layer or "(top level)", **look)
        r.hover_glyph = Line(x="step", y=f"y{c}", line_width=4.5, **look)  # the line under the mouse stands out
        items.append(LegendItem(label=label, renderers=[r]))
        drawn.append(r)
    ln.add_tools(_hover(renderers=drawn, tooltips=[("layer", "$name"), ("step", "$x{0}"),
                                                                ("L2 norm", "$y{%0.4g}")],
                           formatters={"$y": "printf"}, line_policy="nearest", mode="mouse"))
    if len(items) <= 20:  # beyond that a legend is a wall of text: hover picks lines instead
        ln.add_layout(Legend(items=items, click_policy="hide", label_text_font_size="11px", spacing=0,
                             glyph_height=14, title="click to hide", title_text_font_size="10px"), "right")
    ln.xaxis.axis_label = "training step"
    _mark_flags(hm, ln, cell_src, model_src)
    layout = column(hm, ln, sizing_mode="stretch_width")

    def update(m: GradientMonitor) -> None:
        h, ls = monitor_rows(m)
        mapper.update(**dict(zip(("low", "high"), _log_mapper_range(h["norm"]), strict=True)))
        heat_src.data = h
        line_src.data = ls
        cell_src.data, model_src.data = monitor_flag_rows(m)
        legend = hm.select_one({"name": "flag_legend"})
        if isinstance(legend, Legend):
            legend.visible = bool(cell_src.data["step"])

    mon.on_record(update)
    return as_widget(layout) if widget else layout


def _mark_flags(hm: Any, ln: Any, cells: ColumnDataSource, model: ColumnDataSource) -> None:
    """Flagged steps: a marker on the flagged layer's cell (heatmap) and point (lines), a dashed band
    across both charts for flags on the whole model; each with its kind in a legend and its reason on hover."""
    style: dict[str, Any] = dict(marker="marker", size=13, fill_color="#ffffff", line_color="#d62728",
                                 line_width=2, source=cells)
    on_hm = hm.scatter(x="step", y="label", legend_field="kind", name="flag_marks", **style)
    on_ln = ln.scatter(x="step", y="y", **style)
    tips = [("step", "@step"), ("flag", "@kind"), ("layer", "@layer"), ("why", "@reason")]
    hm.add_tools(_hover(renderers=[on_hm], tooltips=tips))
    ln.add_tools(_hover(renderers=[on_ln], tooltips=tips))
    for fig in (hm, ln):
        band = fig.vspan(x="step", source=model, line_color="#d62728", line_width=2, line_dash="dashed",
                         name="flag_steps")
        fig.add_tools(_hover(renderers=[band], tooltips=[("step", "@step"), ("flag", "@kind"),
                                                            ("why", "@reason")]))
        # the band's own words at its foot ("stale gradient (every layer)"): a dashed line alone said nothing
        fig.add_layout(LabelSet(x="step", y=4, y_units="screen", text="label", source=model, x_offset=4,
                                text_color="#d62728", text_font_size="10px", text_font_style="bold",
                                background_fill_color="#ffffff", background_fill_alpha=0.8, name="flag_step_labels"))
    legend = hm.legend[0]
    legend.orientation, legend.label_text_font_size, legend.location, legend.margin = "horizontal", "11px", "left", 2
    # the markers' legend only while there are markers: an empty one drew a stray square under the heatmap
    legend.visible = bool(cells.data["step"])
    legend.name = "flag_legend"
    hm.add_layout(legend, "below")

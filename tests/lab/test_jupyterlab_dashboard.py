"""The Dashboard and the monitor chart in a real JupyterLab: offline charts, a tap on a bar reaching Python, and
charts that fit the cell (1000 and 1920 px), never clip a title, and follow a live switch to the dark theme."""

from __future__ import annotations

import pytest

from gradviz_nb.widgets.flow_charts import TOOLTIP_WIDTH

from .jupyterlab import CHROMIUM, CHROMIUM_ARGS, ConsoleLog, JupyterLabServer, LabNotebook

# ------------------------------------------------------------------------------------------------
# In a real JupyterLab (headless Chromium): offline charts, and a tap on a bar reaching Python.
# Its own server: a Dashboard run leaves Bokeh documents behind that other lab tests should not see.
# ------------------------------------------------------------------------------------------------

DASHBOARD_CELLS = [
    """\
import torch, gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss, add_lora
torch.manual_seed(0)
class PeftLike(torch.nn.Module):  # names as peft gives them (base_model.model.<layer>), its forward bypassed
    def __init__(self, inner):
        super().__init__()
        self.base_model = torch.nn.Module()
        self.base_model.model = inner
        self.config = inner.config
    wte = property(lambda self: self.base_model.model.wte)
    def forward(self, *args):
        return self.base_model.model(*args)
model = PeftLike(add_lora(GPT2(GPT2Config.small_test())))
attn = model.base_model.model.blocks[1].attn
original = attn.forward
attn.forward = lambda h: original(h).detach()
with gv.capture(model) as cap:
    loss = gpt2_loss(model, batch=2)
loss.backward()
dash = gv.Dashboard(model, loss, capture=cap, height=480)
dash""",
    """\
monitor = gv.GradientMonitor(model, every=1, live_interval=0.0)
chart = monitor.chart()
chart""",
    """\
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
for step in range(8):
    gpt2_loss(model, batch=2, seed=step).backward()
    monitor.step()
    opt.step()
    if step != 4:  # one forgotten zero_grad: step 6 adds onto step 5's gradient, flagged stale-grad
        opt.zero_grad()
print("RECORDS", len(monitor.steps))""",
    "print('SELECTED', repr(dash.graph.selected), dash.selected_layers)",
]

# Where to click bar `name` of the Bokeh figure named `fig`: Bokeh's own scales map data to canvas pixels.
BAR_POINT_JS = """([fig, name]) => {
    for (const doc of window.Bokeh.documents) {
        const plot = doc.get_model_by_name(fig);
        if (!plot) continue;
        const view = window.Bokeh.index.find_one(plot);
        const data = plot.renderers[0].data_source.data;
        const i = data.layer.indexOf(name);  // rows are named by their short label on the axis
        const x = Math.sqrt(data.left[i] * data.right[i]);  // the bar's middle on the log axis
        const sx = view.frame.x_scale.compute(x);
        const sy = view.frame.y_scale.compute(plot.y_range.synthetic(data.label[i]));
        // The graph above may be taller than the window (a small graph sizes itself): bring the chart in.
        view.canvas_view.el.scrollIntoView({ block: "center" });
        const r = view.canvas_view.el.getBoundingClientRect();
        return [r.left + sx, r.top + sy];
    }
    return null;
}"""
BOKEH_RENDERED_JS = """() => {
    // Bokeh draws inside nested shadow roots: count the canvases of every figure in the outputs.
    const canvases = (node) => [...node.querySelectorAll('*')].reduce(
        (n, el) => n + (el.tagName === 'CANVAS' ? 1 : 0) + (el.shadowRoot ? canvases(el.shadowRoot) : 0), 0);
    const roots = [...document.querySelectorAll('.jp-OutputArea .bk-Row, .jp-OutputArea .bk-Column, '
                                               + '.jp-OutputArea .bk-Figure')];
    return {roots: roots.length, withCanvas: roots.filter((r) => r.shadowRoot && canvases(r.shadowRoot) > 0).length,
            canvases: roots.reduce((n, r) => n + (r.shadowRoot ? canvases(r.shadowRoot) : 0), 0)};
}"""


# Per Bokeh figure in the page: its width, where it sits, its colours, and each title's text width (measured with
# the title's own font in a canvas) against the room the canvas leaves it right of the frame's left edge.
FIGURES_JS = """(names) => {
    const out = {};
    const ctx = document.createElement('canvas').getContext('2d');
    for (const doc of window.Bokeh.documents) for (const name of names) {
        const plot = doc.get_model_by_name(name);
        const view = plot && window.Bokeh.index.find_one(plot);
        if (!view) continue;
        const r = view.el.getBoundingClientRect();
        const titles = [plot.title, ...plot.above.filter((m) => 'text' in m && 'text_font_size' in m)];
        const room = view.canvas_view.bbox.width - view.frame.bbox.left;
        out[name] = {left: r.left, right: r.right, width: r.width, background: plot.border_fill_color,
                     frame: plot.background_fill_color, title_color: plot.title.text_color,
                     titles: titles.map((t) => {
                         ctx.font = `${t.text_font_style} ${t.text_font_size} ${t.text_font}`;
                         return {text: t.text, width: ctx.measureText(t.text).width, room};
                     })};
    }
    return out;
}"""
FLAG_MARKS_JS = """() => {
    for (const doc of window.Bokeh.documents) {
        const marks = doc.get_model_by_name('flag_marks');
        if (marks) return marks.data_source.data.step.map((s, i) => [s, marks.data_source.data.kind[i]]);
    }
    return null;
}"""
# Where Bokeh draws a hover tooltip (only Bokeh draws inside shadow roots here): each one's rectangle on screen.
TOOLTIPS_JS = """() => {
    const found = [];
    const walk = (node, shadow) => {
        for (const el of node.querySelectorAll('*')) {
            const cls = typeof el.className === 'string' ? el.className : '';
            if (shadow && /tooltip/i.test(cls)) {
                const r = el.getBoundingClientRect();
                if (r.height > 0 && getComputedStyle(el).display !== 'none') {
                    found.push({top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: r.width,
                                clipped: el.scrollHeight > el.clientHeight + 1 || el.scrollWidth > el.clientWidth + 1});
                }
            }
            if (el.shadowRoot) walk(el.shadowRoot, true);
        }
    };
    walk(document, false);
    return found;
}"""
# Every box label drawn on the canvas, first line only.
BOX_LABELS_JS = """() => document.querySelector('.gradviz-root').__gradviz.cy
    .nodes('[kind = "expanded"], [kind = "collapsed"]').map((n) => n.data('label').split('\\n')[0])"""
ADAPTER = "base_model.model.blocks.0.attn.c_attn"
DASH_FIGURES = ["norm_bars", "histograms"]
MONITOR_FIGURES = ["monitor_heatmap", "monitor_lines"]


def _check_fit(nb: LabNotebook, cell: int, figures: dict[str, dict], names: list[str], viewport: int) -> str:
    """Every figure inside the cell's output, wide enough, and no title clipped; returns a one-line report."""
    out = nb.cell(cell).locator(".jp-OutputArea-output").last.bounding_box()  # the widget, after BokehJS' loader
    assert out is not None
    report = []
    for name in names:
        f = figures[name]
        assert f["left"] >= out["x"] - 1 and f["right"] <= out["x"] + out["width"] + 1, (name, f, out)
        for t in f["titles"]:
            assert t["width"] <= t["room"], f"title {t['text']!r} of {name} clipped: {t['width']:.0f} > {t['room']}"
        report.append(f"{name} {f['width']:.0f}/{out['width']:.0f} px ({f['width'] / out['width']:.0%})")
    widest = max(figures[n]["width"] for n in names)
    if viewport >= 1920:  # the charts once stayed 340 px wide in a 1800 px cell
        assert widest >= 0.6 * out["width"], report
    assert min(figures[n]["width"] for n in names) >= 300, report  # readable at 1000 px too
    return ", ".join(report)


@pytest.mark.browser
def test_dashboard_in_jupyterlab_offline_and_linked(tmp_path: object) -> None:
    import time
    from pathlib import Path

    if not Path(CHROMIUM).exists():
        pytest.skip(f"headless Chromium not found at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    shots = Path(__file__).resolve().parents[2] / "build" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    server = JupyterLabServer(Path(str(tmp_path)))
    server.start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_context(viewport={"width": 1500, "height": 1100}).new_page()
            page.set_default_timeout(60_000)
            console = ConsoleLog()
            console.attach(page)
            foreign: list[str] = []
            page.on("request", lambda r: None if r.url.startswith((server.url, "data:", "blob:"))
                    else foreign.append(r.url))
            nb = LabNotebook(server, page, server.write_notebook("dashboard.ipynb", DASHBOARD_CELLS)).open()
            t0 = time.monotonic()
            nb.run_cell(0)
            rendered = nb.poll(lambda: (s := page.evaluate(BOKEH_RENDERED_JS))["withCanvas"] >= 1 and s,
                               timeout=30, what="Bokeh figures drawn in shadow DOM")
            nb.run_cell(1)
            assert "RECORDS 8" in nb.run_cell(2)
            nb.poll(lambda: page.evaluate(BOKEH_RENDERED_JS)["withCanvas"] >= 2, what="monitor chart drawn")
            # the live chart got the stale step marked (the flag reached the page through BokehModel)
            marked = nb.poll(lambda: page.evaluate(FLAG_MARKS_JS), timeout=20, what="flagged steps in the page")
            assert {(6, "stale-grad")} <= {(s, k) for s, k in marked}, marked
            render_s = time.monotonic() - t0
            # a real click on the bar of the adapter in blocks.0 selects its module in the graph (via Python)
            nb.activate_cell(3)
            point = page.evaluate(BAR_POINT_JS, ["norm_bars", ADAPTER])
            assert point is not None
            nb.cell(0).scroll_into_view_if_needed()
            point = page.evaluate(BAR_POINT_JS, ["norm_bars", ADAPTER])
            page.mouse.click(point[0], point[1])
            selected = nb.poll(lambda: ADAPTER in (t := nb.run_cell(3)) and t,
                               timeout=20, what="the tap reached Python")
            assert f"SELECTED '{ADAPTER}' ['{ADAPTER}']" in selected
            # the graph half of the dashboard (a GraphWidget rendered inside an ipywidgets Box) is drawn too
            nb.wait_in_output(0, ".gradviz-root .gradviz-canvas canvas")
            page.evaluate("async () => document.querySelector('.gradviz-root').__gradviz.idle()")
            # the graph takes the cell's width (it sat in a 45% column before)
            graph_w = page.evaluate("() => document.querySelector('.gradviz-root').getBoundingClientRect().width")
            out_w = nb.cell(0).locator(".jp-OutputArea-output").last.bounding_box()["width"]
            assert graph_w >= 0.9 * out_w, (graph_w, out_w)
            # box headers leave out the prefix every module shares ("base_model.model."); the wrapper keeps it
            headers = page.evaluate(BOX_LABELS_JS)
            assert "▾ base_model.model · GPT2" in headers and "▾ blocks.0 · Block" in headers, headers
            assert not any("base_model.model." in h for h in headers), headers
            # a hover on the top bar opens its tooltip below the pointer, never up over the graph
            nb.cell(0).scroll_into_view_if_needed()
            point = page.evaluate(BAR_POINT_JS, ["norm_bars", ADAPTER])
            page.mouse.move(point[0], point[1])
            tips = nb.poll(lambda: page.evaluate(TOOLTIPS_JS), timeout=10, what="the bar's hover tooltip")
            graph_bottom = page.evaluate("() => document.querySelector('.gradviz-root').getBoundingClientRect().bottom")
            assert all(t["top"] >= point[1] - 1 and t["top"] >= graph_bottom for t in tips), (tips, point, graph_bottom)
            # bounded and wrapped: no wider than the template's box (plus Bokeh's padding), on screen, nothing cut
            view_w = page.evaluate("() => window.innerWidth")
            assert all(t["width"] <= TOOLTIP_WIDTH + 40 and t["left"] >= 0 and t["right"] <= view_w
                       and not t["clipped"] for t in tips), (tips, view_w)
            page.mouse.move(0, 0)
            lines = [f"\nbokeh roots {rendered}, render {render_s:.1f} s, graph {graph_w:.0f}/{out_w:.0f} px"]
            from gradviz_nb.widgets.chart_theme import THEMES

            for theme, widths in (("light", (1000, 1920)), ("dark", (1920, 1000))):
                if theme == "dark":  # a live switch, as a person does it from the Settings menu
                    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', "
                                  "{theme: 'JupyterLab Dark'})")
                    nb.poll(lambda: page.evaluate("() => document.body.dataset.jpThemeLight") == "false",
                            timeout=30, what="JupyterLab dark theme")
                want = {"frame": THEMES[theme]["frame"], "background": THEMES[theme]["background"],
                        "title_color": THEMES[theme]["text"]}
                for width in widths:
                    page.set_viewport_size({"width": width, "height": 1100})
                    nb.poll(lambda want=want: len(f := page.evaluate(FIGURES_JS, DASH_FIGURES + MONITOR_FIGURES)) == 4
                            and all({k: x[k] for k in want} == want for x in f.values()),
                            timeout=20, what=f"charts restyled {theme}")
                    # tall enough for the whole cell to be on screen (an element screenshot clips to the viewport)
                    page.set_viewport_size({"width": width, "height": 2000})
                    page.wait_for_timeout(400)  # let the resize settle into a repaint
                    figs = page.evaluate(FIGURES_JS, DASH_FIGURES + MONITOR_FIGURES)
                    lines.append(f"{theme} {width}: " + _check_fit(nb, 0, figs, DASH_FIGURES, width) + "; "
                                 + _check_fit(nb, 1, figs, MONITOR_FIGURES, width))
                    nb.cell(0).scroll_into_view_if_needed()
                    nb.cell(0).screenshot(path=str(shots / f"dashboard_{theme}_{width}.png"))
                    if width == 1000:
                        nb.cell(1).scroll_into_view_if_needed()
                        nb.cell(1).screenshot(path=str(shots / f"monitor_chart_{theme}.png"))
            print("\n".join(lines) + f"\nscreenshots in {shots}")
            assert foreign == [], f"requests left the local server (CDN?): {foreign}"
            assert console.errors == [], console.errors
            browser.close()
    finally:
        server.stop()

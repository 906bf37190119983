"""The Dashboard and the monitor chart in a real JupyterLab: offline charts, and a tap on a bar reaching Python."""

from __future__ import annotations

import pytest

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
model = add_lora(GPT2(GPT2Config.small_test()))
attn = model.blocks[1].attn
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
    opt.step(); opt.zero_grad()
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
        const i = data.layer.indexOf(name);
        const x = Math.sqrt(data.left[i] * data.right[i]);  // the bar's middle on the log axis
        const sx = view.frame.x_scale.compute(x), sy = view.frame.y_scale.compute(plot.y_range.synthetic(name));
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
            render_s = time.monotonic() - t0
            # a real click on the bar of the adapter in blocks.0 selects its module in the graph (via Python)
            nb.activate_cell(3)
            point = page.evaluate(BAR_POINT_JS, ["norm_bars", "blocks.0.attn.c_attn"])
            assert point is not None
            nb.cell(0).scroll_into_view_if_needed()
            point = page.evaluate(BAR_POINT_JS, ["norm_bars", "blocks.0.attn.c_attn"])
            page.mouse.click(point[0], point[1])
            selected = nb.poll(lambda: "blocks.0.attn.c_attn" in (t := nb.run_cell(3)) and t,
                               timeout=20, what="the tap reached Python")
            assert "SELECTED 'blocks.0.attn.c_attn' ['blocks.0.attn.c_attn']" in selected
            # the graph half of the dashboard (a GraphWidget rendered inside an ipywidgets Box) is drawn too
            nb.wait_in_output(0, ".gradviz-root .gradviz-canvas canvas")
            page.evaluate("async () => document.querySelector('.gradviz-root').__gradviz.idle()")
            nb.cell(0).screenshot(path=str(shots / "dashboard.png"))
            nb.cell(1).screenshot(path=str(shots / "monitor_chart.png"))
            print(f"\nbokeh roots {rendered}, render {render_s:.1f} s, screenshots in {shots}")
            assert foreign == [], f"requests left the local server (CDN?): {foreign}"
            assert console.errors == [], console.errors
            browser.close()
    finally:
        server.stop()

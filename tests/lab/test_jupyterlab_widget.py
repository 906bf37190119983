"""End-to-end: gradviz_nb's GraphWidget in a real JupyterLab, and in Notebook 7, clicked with a real mouse.

The GPT-2 test runs once per front end (`notebook_server` in conftest.py: `[jupyterlab]` and
`[notebook7]`); Notebook 7 has the Lab DOM, so the same driver works in both. The harness test stays
JupyterLab-only: the GPT-2 test already renders ipywidgets in Notebook 7, and each extra Notebook 7
test costs a kernel start (about 12 s here).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from playwright.sync_api import Page

from .jupyterlab import JupyterLabServer, LabNotebook


def _assert_clean_console(page: Page) -> None:
    log = page.console_log  # type: ignore[attr-defined]
    errors = log.errors
    if log.ignored:
        print("benign console errors ignored:", *log.ignored, sep="\n  ")
    assert not errors, "errors on the browser console:\n" + "\n".join(errors)


def test_harness_renders_an_ipywidget(
    jupyterlab: JupyterLabServer, lab_page: Page, stopwatch: dict[str, float]
) -> None:
    """The harness itself: an ipywidgets slider renders and its value reaches the kernel."""
    t0 = time.monotonic()
    path = jupyterlab.write_notebook(
        "harness.ipynb",
        ["import ipywidgets\ns = ipywidgets.IntSlider(value=3)\ns", "print('value', s.value)"],
    )
    nb = LabNotebook(jupyterlab, lab_page, path).open()
    stopwatch["open + kernel"] = time.monotonic() - t0
    nb.run_cell(0)
    nb.wait_in_output(0, ".jupyter-widgets.widget-slider")
    assert "value 3" in nb.run_cell(1)
    stopwatch["run"] = time.monotonic() - t0 - stopwatch["open + kernel"]
    _assert_clean_console(lab_page)


GPT2_CELLS = [
    # A GPT-2-sized transformer: the real 124M configuration (12 blocks, tied embedding), seq 16.
    # About 6 s on 2 CPU cores, most of it building the weights.
    """\
import torch
import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss

torch.manual_seed(0)
model = GPT2(GPT2Config())
with gv.capture(model) as cap:
    loss = gpt2_loss(model, batch=1, seq=16, seed=0)
w = gv.GraphWidget(loss, model=model, capture=cap)
w""",
    "import json\nprint('EXPANDED', json.dumps(sorted(w.expanded)))",
]
BOX = "blocks.3"

# Reads the widget's debug hook (`root.__gradviz`, see js/src/index.ts: DebugHook) once the
# current layout has been drawn.
STATE_JS = """async (root) => {
    const g = root.__gradviz;
    await g.idle();
    return {layout: root.dataset.layout, counts: g.visibleCounts(), cyNodes: g.cy.nodes().length};
}"""
POINT_JS = """(root, id) => {
    // Where to click module box `id` so the click lands on the box itself. The hook's boxPoint
    // (a collapsed box's centre, an open box's top edge) comes first; for an open box an incoming
    // edge is often drawn across that spot (and across the header label), and cytoscape gives the
    // tap to the edge. So try points along the header label row and the top strip, and keep the
    // first one cytoscape's own hit test (renderer().findNearestElement, private but stable since
    // 3.x) assigns to the box. A real mouse click then goes there.
    // `id` is a call id, or a folded stack's element key ("f:fold:blocks.0").
    const g = root.__gradviz, cy = g.cy, key = id.startsWith('f:') ? id : 'c:' + id, n = cy.getElementById(key);
    if (n.empty()) return null;
    const rect = cy.container().getBoundingClientRect();
    const pan = cy.pan(), z = cy.zoom();
    const hits = (cx, cy_) => {
        const el = cy.renderer().findNearestElement((cx - rect.left - pan.x) / z,
                                                     (cy_ - rect.top - pan.y) / z, true, false);
        return !!el && el.id() === key;
    };
    const centre = () => { const q = n.renderedPosition(); return {x: rect.left + q.x, y: rect.top + q.y}; };
    const candidates = [key.startsWith('c:') ? g.boxPoint(id) : centre()];
    const bb = n.renderedBoundingBox({includeLabels: false, includeOverlays: false});
    const bl = n.renderedBoundingBox({includeLabels: true, includeOverlays: false});
    const mid = (bb.x1 + bb.x2) / 2, half = (bb.x2 - bb.x1) / 2;
    for (const y of [(bl.y1 + bb.y1) / 2, bb.y1 + 3, bb.y1 + 8])
        for (let dx = 0; dx < half - 2; dx += 4)
            for (const x of [mid - dx, mid + dx])
                candidates.push({x: rect.left + x, y: rect.top + y});
    const p = candidates.find((c) => c && hits(c.x, c.y));
    if (!p) return {x: NaN, y: NaN, onWidget: false, hitsBox: false};
    // What a person would hit there: it must be this widget's canvas, not an overlay. Asked of the
    // root's own document or shadow root: marimo draws widgets inside a shadow DOM, where
    // document.elementFromPoint only sees the host element.
    const el = root.getRootNode().elementFromPoint(p.x, p.y);
    return {x: p.x, y: p.y, onWidget: !!el && root.contains(el) && el.tagName === 'CANVAS', hitsBox: true};
}"""


def _expanded_in_kernel(nb: LabNotebook) -> list[str]:
    out = nb.run_cell(1)
    line = next(ln for ln in out.splitlines() if ln.startswith("EXPANDED"))
    return list(json.loads(line.removeprefix("EXPANDED")))


def _steady_point(root, box: str) -> dict:  # type: ignore[no-untyped-def]
    """The click point for `box`, once it has stayed put for 3 readings (0.45 s).

    After a cell runs, JupyterLab scrolls the active cell into view a moment later; a point read
    before that scroll lands beside the box.
    """
    root.scroll_into_view_if_needed()
    readings: list[dict] = []
    for _ in range(60):
        readings = [*readings[-2:], root.evaluate(POINT_JS, box)]
        if len(readings) == 3 and readings[0] == readings[1] == readings[2]:
            break
        time.sleep(0.15)
    point = readings[-1]
    assert point is not None, f"no box {box!r} on the canvas"
    assert point["hitsBox"], f"no point on box {box!r} that a click would give to the box"
    assert point["onWidget"], f"box {box!r} at {point} is covered or off-screen"
    return point


def _click_box_until(nb: LabNotebook, root, box: str, done, what: str) -> tuple[dict, int]:  # type: ignore[no-untyped-def]
    """Real mouse click on `box`, then wait until `done(state)`; returns (state, clicks used).

    One more click if nothing at all changed within 5 s (in case the page moved between aiming and
    clicking; the test reports how many clicks it took); a click that changes the wrong thing fails
    at once.
    """
    before = root.evaluate(STATE_JS)
    for clicks in (1, 2):
        nb.activate_cell(0)  # the widget's cell; see LabNotebook.activate_cell
        p = _steady_point(root, box)
        nb.page.mouse.move(p["x"], p["y"])
        nb.page.mouse.click(p["x"], p["y"])
        try:
            state = nb.poll(lambda: (s := root.evaluate(STATE_JS)) != before and s, 5.0, what)
        except TimeoutError:
            continue
        assert done(state), f"{what}: the click changed the view to {state}"
        return state, clicks
    raise TimeoutError(f"{what}: two clicks on {box!r} changed nothing; state {before}")


def test_gpt2_widget_expand_and_collapse_by_mouse(
    notebook_server: JupyterLabServer,
    notebook_page: Page,
    tmp_path: Path,
    screenshot_dir: Path,
    stopwatch: dict[str, float],
) -> None:
    jupyterlab, page = notebook_server, notebook_page
    # Screenshots keep their JupyterLab names; Notebook 7's get a suffix.
    suffix = "" if jupyterlab.frontend == "lab" else "_notebook7"
    t = time.monotonic()

    def lap(name: str) -> None:
        nonlocal t
        stopwatch[name] = time.monotonic() - t
        t = time.monotonic()

    nb = LabNotebook(jupyterlab, page, jupyterlab.write_notebook("gpt2.ipynb", GPT2_CELLS)).open()
    lap("open + kernel")
    nb.run_cell(0)
    root = nb.wait_in_output(0, ".gradviz-root")
    nb.wait_in_output(0, ".gradviz-canvas canvas")
    start = root.evaluate(STATE_JS)
    lap("model + widget drawn")
    assert start["layout"] == "idle", start
    # The static picture displayed after the widget (widgets/static_fallback.py) stays hidden where the
    # widget draws: never a second copy of the graph.
    fallback = nb.cell(0).locator(".gradviz-static")
    assert fallback.count() == 1 and not fallback.is_visible()
    assert start["counts"]["folded"] == 1, f"expected the 12 blocks folded into one stack: {start}"
    assert BOX not in _expanded_in_kernel(nb)

    # Unfold the "12 x Block" stack with a real click: the blocks appear as closed boxes.
    start, _ = _click_box_until(
        nb, root, "f:fold:blocks.0", lambda s: s["counts"]["collapsed"] >= 12 and not s["counts"]["folded"], "unfold"
    )
    lap("unfold by click")

    # Open blocks.3 with a real mouse click on its box.
    opened, clicks = _click_box_until(
        nb, root, BOX, lambda s: s["counts"]["nodes"] > start["counts"]["nodes"], f"{BOX} expands"
    )
    stopwatch["expand clicks"] = clicks
    assert opened["cyNodes"] > start["cyNodes"]
    assert opened["counts"]["expanded"] == start["counts"]["expanded"] + 1
    assert BOX in _expanded_in_kernel(nb), "the click did not reach the kernel's `expanded` trait"
    page.screenshot(path=str(tmp_path / "expanded.png"))
    shutil.copy(tmp_path / "expanded.png", screenshot_dir / f"jupyterlab_widget_expanded{suffix}.png")
    lap("expand by click")

    # Close it again by clicking the open box's header.
    closed, clicks = _click_box_until(nb, root, BOX, lambda s: s["counts"] == start["counts"], f"{BOX} collapses")
    stopwatch["collapse clicks"] = clicks
    assert closed["cyNodes"] == start["cyNodes"]
    assert BOX not in _expanded_in_kernel(nb)
    lap("collapse by click")

    page.screenshot(path=str(tmp_path / "jupyterlab_widget.png"))
    shutil.copy(tmp_path / "jupyterlab_widget.png", screenshot_dir / f"jupyterlab_widget{suffix}.png")
    _assert_clean_console(page)

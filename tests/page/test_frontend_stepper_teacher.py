"""The teacher's path through the backward stepper, in the built bundle (headless Chromium, fake anywidget
model, as test_frontend_stepper.py), on notebook 03's MLP recording at a notebook cell's widths:

- every step, and every "Run to", leaves the running node whole in the free part of the canvas (its box,
  its bold "data | grad" label and its highlight inside the canvas, clear of the legend and of the step
  details beside or under it);
- "Run to" a box or a leaf runs to what the user clicked last (a box click chooses the box and still opens
  it; a leaf click then chooses the leaf), the menu says what it will run to and is disabled with the way to
  choose when nothing applicable was clicked, and no rule's internal name reaches the text;
- the stepper's bar keeps its controls on one row from 900 px up.
Screenshots: build/screenshots/stepper_teacher_<width>.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from lab.canvas_checks import LABEL_OVERFLOW_JS
from pagekit import SCREENSHOTS
from test_frontend_stepper import Page

import gradviz_nb as gv
from gradviz_nb.demo_models import MLP
from gradviz_nb.widgets import page

pytestmark = pytest.mark.browser
browser = pagekit.browser


def mlp_data() -> tuple[dict[str, Any], Any]:
    """Notebook 03's MLP: fc1 -> ReLU -> fc2, a loss that uses x twice (a leaf with two contributions)."""
    torch.manual_seed(0)
    mlp = MLP(d_in=3, d_hidden=4, d_out=2)
    x = torch.randn(2, 3, requires_grad=True)
    with gv.capture(mlp) as cap:
        loss = mlp(x).pow(2).mean() + (x * x).sum() * 0.1
    rec = gv.record_backward(loss, model=mlp, capture=cap, names={"x": x})
    return {"graph": page.graph(rec.graph), "recording": page.recording(rec)}, rec


# The running node's label, box and highlight (includeLabels/Overlays/Underlays), in client pixels, against
# the canvas, the legend and the step details.
FREE_JS = """() => {
  const root = gv.el.querySelector('.gradviz-root');
  const cy = gv.hook.cy;
  const id = root.dataset.stepNode;
  const run = cy.nodes('.st-run');
  if (!id || run.empty()) return null;
  const c = cy.container().getBoundingClientRect();
  const b = run.renderedBoundingBox({ includeLabels: true, includeOverlays: true, includeUnderlays: true });
  const box = { x1: c.left + b.x1, y1: c.top + b.y1, x2: c.left + b.x2, y2: c.top + b.y2 };
  const rect = (sel) => {
    const e = root.querySelector(sel);
    if (!e || e.hidden || !e.offsetParent) return null;
    const r = e.getBoundingClientRect();
    return { x1: r.left, y1: r.top, x2: r.right, y2: r.bottom };
  };
  return { id, box, canvas: { x1: c.left, y1: c.top, x2: c.right, y2: c.bottom },
           legend: rect('.gradviz-legend'), details: rect('.gradviz-step-details') };
}"""


# The running node's widest label line (its own font) against the width inside its border.
RUN_ROOM_JS = """() => {
  const n = gv.hook.cy.nodes('.st-run').first();
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = `${n.style("font-style")} ${n.style("font-weight")} ${parseFloat(n.style("font-size"))}px`
    + ` ${n.style("font-family")}`;
  const text = Math.max(...String(n.data('label')).split('\\n').map((l) => ctx.measureText(l).width));
  return { id: n.id(), label: n.data('label'), text, inner: n.width() - 2 * parseFloat(n.style('border-width')) };
}"""


def overlaps(a: dict[str, float], b: dict[str, float] | None) -> bool:
    return b is not None and a["x1"] < b["x2"] and b["x1"] < a["x2"] and a["y1"] < b["y2"] and b["y1"] < a["y2"]


def assert_free(p: Page, what: str) -> None:
    f = p.js(FREE_JS)
    assert f is not None, what
    box, canvas = f["box"], f["canvas"]
    inside = (box["x1"] >= canvas["x1"] and box["x2"] <= canvas["x2"]
              and box["y1"] >= canvas["y1"] and box["y2"] <= canvas["y2"])
    assert inside, f"{what}: running node {f['id']} {box} not whole in the canvas {canvas}"
    assert not overlaps(box, f["legend"]), f"{what}: running node {f['id']} {box} under the legend {f['legend']}"
    assert not overlaps(box, f["details"]), f"{what}: {f['id']} {box} under the step details {f['details']}"


@pytest.mark.parametrize("width", [620, 1000])
def test_every_step_and_run_to_leave_the_running_node_whole_and_clear(
    browser: Any, tmp_path: Path, width: int
) -> None:
    data, rec = mlp_data()
    p = Page(browser, tmp_path, data, height=460)
    p.page.set_viewport_size({"width": width + 40, "height": 900})
    p.js(f"() => {{ document.getElementById('host').style.width = '{width}px'; }}")
    p.js("async () => { await gv.hook.idle(); }")
    # the first view cuts nothing at the sides: the whole graph's width fits at 80% or more here
    across = p.js("""() => { const cy = gv.hook.cy, b = cy.elements().renderedBoundingBox({ includeLabels: false });
                             return { x1: b.x1, x2: b.x2, w: cy.width() }; }""")
    assert across["x1"] >= 0 and across["x2"] <= across["w"], f"first view at {width} px cut at a side: {across}"
    root = p.page.locator(".gradviz-root")
    for i in range(len(rec.steps)):
        p.page.click("[data-testid=gradviz-step-forward]")
        p.page.wait_for_function("(i) => gv.model.get('step') === i", arg=i)
        assert_free(p, f"step {i + 1} at {width} px")
        # the running node's label (bold) inside its box and clear of its thick border
        over = [o for o in root.evaluate(LABEL_OVERFLOW_JS, 1.0)["overflow"] if "st-run" in p.classes(o["id"])]
        assert not over, f"step {i + 1} at {width} px: the running label overflows its box: {over}"
        room = p.js(RUN_ROOM_JS)
        assert room["text"] <= room["inner"], f"step {i + 1} at {width} px: the running border covers its label: {room}"
    p.page.screenshot(path=str(SCREENSHOTS / f"stepper_teacher_{width}.png"))
    for rule, stop in (("jump", rec.find("jump")), ("above", rec.find("above", threshold=0.01))):
        assert stop.hit
        p.js("() => gv.hook.stepTo(-1)")
        p.page.locator("[data-testid=gradviz-step-runto]").select_option(rule)
        if rule == "above":
            p.page.fill("[data-testid=gradviz-step-threshold]", "0.01")
            p.page.dispatch_event("[data-testid=gradviz-step-threshold]", "change")
        p.page.wait_for_function("(i) => gv.model.get('step') === i", arg=stop.index)
        assert_free(p, f"Run to {rule} at {width} px")
    assert p.errors == []


def test_run_to_box_and_leaf_read_the_last_click_and_say_what_they_run_to(browser: Any, tmp_path: Path) -> None:
    data, rec = mlp_data()
    p = Page(browser, tmp_path, data, height=520)
    p.js("async () => { await gv.hook.idle(); }")
    menu = p.page.locator("[data-testid=gradviz-step-runto]")
    option = lambda rule: menu.locator(f"option[value={rule}]")  # noqa: E731
    # nothing clicked yet: both rules say how to choose, and cannot be chosen
    assert option("module").is_disabled() and "click a box first" in option("module").inner_text()
    assert option("leaf").is_disabled() and "click a leaf first" in option("leaf").inner_text()

    # a real click on the closed box fc2: it opens (as before) and is the box "Run to" runs to
    point = p.js("() => gv.hook.boxPoint('fc2')")
    p.page.mouse.click(point["x"], point["y"])
    p.page.wait_for_function("() => gv.model.get('expanded').includes('fc2')")
    assert option("module").is_enabled() and option("module").inner_text() == "first step in box fc2"
    menu.select_option("module")
    box = rec.find(module="fc2")
    p.page.wait_for_function("(i) => gv.model.get('step') === i", arg=box.index)
    text = p.text("gradviz-step-runtext")
    assert text.startswith("Run to the first step in box fc2: ") and box.text in text

    # then a click on the leaf x: the leaf rule runs to x, the box rule no longer applies (no stale choice)
    x = rec.graph.find("x")
    p.js("async () => { await gv.hook.idle(); }")
    point = p.js("(id) => gv.hook.nodePoint(id)", x)
    p.page.mouse.click(point["x"], point["y"])
    leaf_on = "() => !document.querySelector('[data-testid=gradviz-step-runto] option[value=leaf]').disabled"
    p.page.wait_for_function(leaf_on)
    assert option("leaf").inner_text() == "first delivery into x"
    assert option("module").is_disabled()
    menu.select_option("leaf")
    want = rec.find(leaf="x")
    p.page.wait_for_function("(i) => gv.model.get('step') === i", arg=want.index)
    text = p.text("gradviz-step-runtext")
    assert text.startswith("Run to the first delivery into x: ") and want.text in text
    assert "not a leaf" not in text
    # the menu is back on "Run to…": the same rule can run again after a new click
    assert menu.input_value() == ""

    # rules read in words, never by their internal names
    for rule in ("nonfinite", "jump", "zero"):
        menu.select_option(rule)
        p.page.wait_for_function("() => document.querySelector('[data-testid=gradviz-step-runtext]').textContent")
        text = p.text("gradviz-step-runtext")
        assert not text.startswith(f"Run to {rule}"), text
        assert text.startswith("Run to the "), text
    assert p.errors == []


def test_stepper_bar_is_one_row_from_900_px(browser: Any, tmp_path: Path) -> None:
    data, _ = mlp_data()
    p = Page(browser, tmp_path, data, height=460)
    for width in (900, 1000, 1400):
        p.js(f"() => {{ document.getElementById('host').style.width = '{width}px'; }}")
        p.page.wait_for_timeout(200)
        rows = p.js("""() => {
          const tops = (sel) => [...gv.el.querySelectorAll(sel)].filter((e) => e.offsetParent)
            .map((e) => Math.round(e.getBoundingClientRect().top + e.getBoundingClientRect().height / 2));
          const count = (xs) => new Set(xs.map((t) => Math.round(t / 8))).size;
          return { stepper: count(tops('.gradviz-step-controls > *')),
                   toolbar: count(tops('.gradviz-toolbar > *, .gradviz-tools > *')) };
        }""")
        assert rows == {"stepper": 1, "toolbar": 1}, f"{width} px: {rows}"
        counts = p.page.locator("[data-testid=gradviz-counts]")
        clipped = counts.evaluate("(e) => e.scrollWidth > e.clientWidth + 1")
        assert not clipped, f"{width} px: the counts are cut: {counts.inner_text()!r}"
    assert p.errors == []

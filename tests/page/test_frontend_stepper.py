"""Backward stepper and overlay in the built bundle, in a blank headless Chromium page with a fake
anywidget model (as test_frontend_whatif.py).

Fixtures (``tests/fixtures/make_recordings.py``) are real recordings: ``recording_scalar.json``
(``L = tanh(a * b + a)``, a = 2, b = 3) and ``recording_mlp.json`` (Linear 3->2, ReLU, Linear 2->1, MSE,
two passes accumulating into ``.grad``). Screenshots go to build/screenshots/stepper.png and overlay.png.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pagekit
import pytest
from pagekit import FIXTURES, SCREENSHOTS, MountedPage

pytestmark = pytest.mark.browser
browser = pagekit.browser  # the module-scoped headless Chromium fixture


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


class Page(MountedPage):
    def __init__(self, browser: Any, tmp_path: Path, data: dict[str, Any], **traits: Any) -> None:
        state = {
            "graph_data": data["graph"],
            "expanded": [],
            "selected": "",
            "height": 560,
            "toggles": {"detach": [], "freeze": []},
            "verified": {},
            "can_verify": False,
            "overlay": {},
            "recording": data.get("recording", {}),
            "step": -1,
            **traits,
        }
        super().__init__(browser, tmp_path, state, viewport=(1040, 900))

    def text(self, testid: str) -> str:
        return str(self.page.locator(f"[data-testid={testid}]").inner_text())

    def label(self, key: str) -> str:
        return str(self.js("(k) => gv.hook.cy.$id(k).data('label')", key))

    def classes(self, key: str) -> list[str]:
        return list(self.js("(k) => gv.hook.cy.$id(k).classes()", key))

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.js("() => gv.hook.stepInfo()")
        return info

    def positions(self) -> dict[str, Any]:
        return dict(self.js("() => Object.fromEntries(gv.hook.cy.nodes().map((n) => [n.id(), n.position()]))"))


def test_scalar_stepper_steps_values_contributions_and_keys(browser: Any, tmp_path: Path) -> None:
    p = Page(browser, tmp_path, fixture("recording_scalar.json"), height=640)
    assert p.page.locator("[data-testid=gradviz-stepper]").is_visible()
    assert p.page.locator("[data-testid=gradviz-step-pass]").is_hidden()  # one pass
    assert "before the backward pass (5 steps)" in p.text("gradviz-step-position")
    assert p.label("n:n2").endswith("data 2 | grad ?\n0 of 2 contributions")
    before = p.positions()

    # Step 1: Tanh runs; it sends its gradient to Add along the edge Add -> Tanh.
    p.page.click("[data-testid=gradviz-step-forward]")
    assert p.js("() => gv.model.state.step") == 0 and p.js("() => gv.model.saves") >= 1
    assert p.info()["node"] == "n0" and "st-run" in p.classes("n:n0")
    flow = p.info()["flowEdges"]
    ends = "(k) => [gv.hook.cy.$id(k).source().id(), gv.hook.cy.$id(k).target().id()]"
    assert len(flow) == 1 and p.js(ends, flow[0]) == ["n:n1", "n:n0"]
    assert p.js("(k) => gv.hook.cy.$id(k).data('flowLabel')", flow[0]) == "∇ 4.77e-7"
    assert p.label("n:n0").endswith("data 1 | grad 1")
    assert "grad_a = grad_out * (1 - t²)" in p.text("gradviz-step-explain")
    assert "step 1 of 5: Tanh" in p.text("gradviz-step-position")
    assert any(c.startswith("heat-") for c in p.classes("n:n0"))
    assert not any(c.startswith("heat-") for c in p.classes("n:n3"))  # not run yet: neutral

    # Keyboard (the widget has focus after a click on it): → twice: Add, then Mul.
    p.page.click("[data-testid=gradviz-canvas]", position={"x": 5, "y": 5})
    p.page.keyboard.press("ArrowRight")
    assert p.info()["node"] == "n1"
    assert "a: 1 of 2 contributions received" in p.text("gradviz-step-pending")
    assert p.label("n:n2").endswith("grad Σ 4.77e-7 …\n1 of 2 contributions")
    p.page.keyboard.press("ArrowRight")
    assert p.info()["node"] == "n3"
    assert p.label("n:n2").endswith("2 of 2 contributions ✓")
    details = p.text("gradviz-step-details")
    assert "Mul · MulBackward0" in details and "input 1 → b" in details and "9.54e-7" in details
    p.page.keyboard.press("ArrowLeft")
    assert p.info()["node"] == "n1"

    # Scrubber to the end: a ran (2 contributions summed into .grad), then b.
    p.page.locator("[data-testid=gradviz-step-scrubber]").fill("3")
    assert p.info()["node"] == "n2" and p.js("() => gv.model.state.step") == 3
    details = p.text("gradviz-step-details")
    assert "sum of 2 contributions" in details and ".grad before" in details and "None" in details
    assert p.label("n:n2").startswith("a\nscalar\ndata 2 | grad 1.91e-6")

    # Click a node while stepping: jump to its step.
    p.js("() => gv.hook.stepTo(-1)")
    pt = p.js("() => gv.hook.nodePoint('n3')")
    p.page.mouse.click(pt["x"], pt["y"])
    assert p.info()["node"] == "n3" and p.js("() => gv.model.state.step") == 2

    # Python moves the cursor: the page follows without saving back.
    saves = p.js("() => gv.model.saves")
    p.js("() => gv.model.set('step', 4)")
    assert p.info()["node"] == "n4" and p.js("() => gv.model.saves") == saves

    # Play runs to the end and stops; Space toggles.
    p.js("() => gv.hook.stepTo(-1)")
    p.page.select_option("[data-testid=gradviz-step-speed]", "8")
    p.page.click("[data-testid=gradviz-canvas]", position={"x": 5, "y": 5})
    p.page.keyboard.press("Space")
    assert p.info()["playing"] is True
    p.page.wait_for_function("() => !gv.hook.stepInfo().playing", timeout=5000)
    assert p.js("() => gv.hook.currentStep()") == 4
    # Styles only: nothing moved while stepping.
    assert p.positions() == before
    assert p.js("() => gv.hook.lastStepMs()") < 100
    p.js("() => gv.hook.stepTo(2)")
    p.page.click("[data-testid=gradviz-fit]")
    print(f"\nstep -> styles applied: {p.js('() => gv.hook.lastStepMs()'):.1f} ms (6 nodes)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "stepper.png"))
    assert p.errors == []


def test_mlp_two_passes_modules_and_pass_selector(browser: Any, tmp_path: Path) -> None:
    data = fixture("recording_mlp.json")
    steps = data["recording"]["steps"]
    p = Page(browser, tmp_path, data)
    assert p.page.locator("[data-testid=gradviz-step-pass]").is_visible()
    # All boxes closed: the box of the second Linear lights up while its Addmm runs.
    p.js("() => gv.hook.stepTo(1)")
    assert "st-run" in p.classes("c:2")
    assert "pass 1 of 2 · step 2 of 10" in p.text("gradviz-step-position")
    # By module: the next step leaves box "2" (ReLU's box, step 5).
    p.page.check("[data-testid=gradviz-step-bymodule]")
    p.page.click("[data-testid=gradviz-step-forward]")
    assert p.js("() => gv.hook.currentStep()") == 5 and "st-run" in p.classes("c:1")
    # Pass 2: 2.bias's .grad goes from pass 1's value to the sum of both passes.
    p.page.select_option("[data-testid=gradviz-step-pass]", "1")
    assert p.js("() => gv.hook.currentStep()") == 10 and p.info()["pass"] == 1
    p.js("() => gv.hook.expand('2')")
    bias = next(i for i, s in enumerate(steps) if s["node"] == "n9" and s["pass"] == 1)
    p.js("(i) => gv.hook.stepTo(i)", bias)
    details = p.text("gradviz-step-details")
    assert "pass 2 of 2" in details and "after = before + received" in details
    assert "-1.368" in details and "-2.736" in details
    assert p.label("n:n9").endswith("grad -2.736")
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(tmp_path / "mlp.png"))
    assert p.errors == []


def test_overlay_colours_marks_legend_and_tooltip(browser: Any, tmp_path: Path) -> None:
    data = fixture("recording_mlp.json")
    overlay = {
        "title": "gradient L2 norm",
        "values": {"n7": 0.45, "n8": 0.2, "n3": 0.65, "n9": 1.37, "n1": 1.4, "n5": 0.3, "n4": 0.7, "n0": 1.0},
        "scale": "log",
        "encoding": "color",
        "marks": {"n8": "no-grad", "n7": "nan", "n3": "flag"},
        "unit": "",
    }
    p = Page(browser, tmp_path, {"graph": data["graph"]}, overlay=overlay, expanded=["0", "1", "2"])
    assert p.page.locator("[data-testid=gradviz-stepper]").is_hidden()
    assert p.text("gradviz-legend-title") == "gradient L2 norm"
    assert p.text("gradviz-legend-min") == "0.2" and p.text("gradviz-legend-max") == "1.4"
    assert "heat-0" in p.classes("n:n8") and "heat-8" in p.classes("n:n1")
    assert "ov-no-grad" in p.classes("n:n8") and p.label("n:n8").startswith("0.bias ⊘")
    assert "ov-nan" in p.classes("n:n7") and "ov-flag" in p.classes("n:n3")
    legend = p.text("gradviz-legend")
    assert "no gradient" in legend and "NaN / Inf" in legend and "flagged" in legend
    # Tooltip with the value.
    pt = p.js("() => gv.hook.nodePoint('n9')")
    p.page.mouse.move(pt["x"], pt["y"])
    p.page.wait_for_selector("[data-testid=gradviz-tooltip]:not([hidden])")
    assert p.text("gradviz-tooltip") == "gradient L2 norm: 1.37"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.mouse.move(5, 5)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "overlay.png"))
    # Collapsed: a box shows its "call:" value if given, else the max of its members; worst mark.
    p.js("() => gv.hook.collapse('0')")
    expected = {"value": 0.45, "mark": "nan", "text": "gradient L2 norm: 0.45 · NaN / Inf"}
    assert p.js("() => gv.hook.overlayOf('c:0')") == expected
    # Memory overlay: bytes, size encoding; then {} removes it.
    mem = {"title": "saved for backward", "values": {"n1": 2048, "n5": 100}, "scale": "linear", "encoding": "size",
           "marks": {}, "unit": "B"}
    p.js("(o) => gv.model.set('overlay', o)", mem)
    p.js("async () => gv.hook.idle()")  # sizes feed the layout: a "size" overlay lays the graph out again
    assert p.text("gradviz-legend-max") == "2 KiB"
    assert p.js("() => gv.hook.cy.$id('n:n1').data('w')") > p.js("() => gv.hook.cy.$id('n:n1').data('bw')")
    overlaps = p.js("""() => {
        const nodes = gv.hook.cy.nodes().filter((n) => n.data('kind') !== 'expanded');
        const out = [];
        nodes.forEach((a) => nodes.forEach((b) => {
            if (a.id() >= b.id()) return;
            const p = a.boundingBox({ includeLabels: false }), q = b.boundingBox({ includeLabels: false });
            if (p.x1 < q.x2 && q.x1 < p.x2 && p.y1 < q.y2 && q.y1 < p.y2) out.push([a.id(), b.id()]);
        }));
        return out; }""")
    assert overlaps == [], f"grown nodes overlap others: {overlaps}"
    p.js("() => gv.model.set('overlay', {})")
    p.js("async () => gv.hook.idle()")
    assert p.page.locator("[data-testid=gradviz-legend]").is_hidden()
    assert not any(c.startswith(("heat-", "ov-")) for c in p.classes("c:0") + p.classes("n:n9"))
    assert p.errors == []


def test_jump_to_first_nonfinite_gradient(browser: Any, tmp_path: Path) -> None:
    """sqrt at 0 makes an Inf gradient in backward: the button appears and goes to the step Python names."""
    import torch

    import gradviz_nb as gv
    from gradviz_nb.widgets import page

    x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    rec = gv.record_backward((torch.sqrt(x * w) * 2).sum(), names={"x": x, "w": w})
    first = rec.first_nonfinite
    assert first is not None
    p = Page(browser, tmp_path, {"graph": page.graph(rec.graph), "recording": page.recording(rec)})
    button = p.page.locator("[data-testid=gradviz-step-nonfinite]")
    assert button.is_visible()
    button.click()
    p.page.wait_for_function("(i) => gv.model.get('step') === i", arg=first.index)
    assert p.js("() => gv.el.querySelector('.gradviz-root').dataset.stepNode") == first.node
    assert button.is_disabled()
    assert p.errors == []
    healthy = gv.record_backward((x.tanh() * w).sum(), names={"x": x, "w": w})
    q = Page(browser, tmp_path, {"graph": page.graph(healthy.graph), "recording": page.recording(healthy)})
    assert q.page.locator("[data-testid=gradviz-step-nonfinite]").is_hidden()


def test_stepper_buttons_draw_svg_icons_not_font_glyphs(browser: Any, tmp_path: Path) -> None:
    # A stock headless Chromium has no ⏸ glyph and drew "▯"; the icons are inline SVG paths.
    p = Page(browser, tmp_path, fixture("recording_scalar.json"))
    play = p.page.locator("[data-testid=gradviz-step-play]")
    icons = "(id) => [...document.querySelector(`[data-testid=${id}]`).querySelectorAll('svg path')].length"
    for testid in ("gradviz-step-start", "gradviz-step-back", "gradviz-step-play", "gradviz-step-forward"):
        assert p.js(icons, testid) == 1, testid
        box = p.page.locator(f"[data-testid={testid}] svg").bounding_box()
        assert box and box["width"] >= 10 and box["height"] >= 10, (testid, box)  # drawn, not a 0-size glyph
    assert play.inner_text().strip() == "Play"
    assert p.js("() => document.querySelector('[data-testid=gradviz-step-play] svg').dataset.icon") == "play"
    p.page.select_option("[data-testid=gradviz-step-speed]", "0.5")
    play.click()
    assert p.info()["playing"] is True
    assert play.inner_text().strip() == "Pause"
    assert p.js("() => document.querySelector('[data-testid=gradviz-step-play] svg').dataset.icon") == "pause"
    text = p.js("() => document.querySelector('[data-testid=gradviz-stepper]').textContent")
    assert not any(ch in text for ch in "⏸⇤⏯▯"), text
    p.page.locator("[data-testid=gradviz-stepper]").screenshot(path=str(tmp_path / "stepper-controls.png"))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-stepper]").screenshot(path=str(SCREENSHOTS / "stepper-controls-playing.png"))
    play.click()
    assert p.info()["playing"] is False and play.inner_text().strip() == "Play"
    assert p.errors == []


# The running node's label as drawn (its own font: the highlight is bold) against the inside of its border.
RUNNING_LABEL_JS = """() => {
  const n = gv.hook.cy.$('node.st-run');
  if (n.empty()) return null;
  const ctx = document.createElement('canvas').getContext('2d');
  const size = parseFloat(n.style('font-size'));
  ctx.font = `${n.style('font-style')} ${n.style('font-weight')} ${size}px ${n.style('font-family')}`;
  const lines = String(n.style('label')).split('\\n');
  const border = parseFloat(n.style('border-width'));
  return { id: n.id(), label: lines.join(' | '), weight: String(n.style('font-weight')),
           textW: Math.max(...lines.map((l) => ctx.measureText(l).width)), w: n.width() - border,
           textH: lines.length * size * parseFloat(n.style('line-height')), h: n.height() - border };
}"""
BOXES_JS = """() => Object.fromEntries(['gradviz-legend', 'gradviz-canvas'].map((t) => {
  const el = document.querySelector(`[data-testid=${t}]`);
  return [t, el.hidden ? null : el.getBoundingClientRect().toJSON()];
}))"""


@pytest.mark.parametrize("width", [1000, 550])
@pytest.mark.parametrize("name", ["recording_scalar.json", "recording_mlp.json"])
def test_running_label_fits_its_node_and_the_legend_fits_the_canvas(browser: Any, tmp_path: Path, name: str,
                                                                      width: int) -> None:
    """At every step the highlighted "data | grad" label fits inside the running node's border, and the
    legend lies inside the canvas beside the step details (550 px: the cell of a 1000 px JupyterLab window with
    the findings column beside it, where the canvas was 210 px and the legend 260)."""
    data = fixture(name)
    state = {"graph_data": data["graph"], "recording": data["recording"], "step": 0, "height": 560,
             "expanded": sorted({c["id"] for c in data["graph"].get("calls", [])})}
    p = MountedPage(browser, tmp_path, state, viewport=(1040, 900), width=width)
    p.js("() => gv.hook.idle()")
    checked = with_values = 0
    for step in range(len(data["recording"]["steps"])):
        p.js("(i) => gv.hook.stepTo(i)", step)
        r = p.js(RUNNING_LABEL_JS)
        if r is None:
            continue
        checked += 1
        with_values += "grad" in r["label"]
        # inside the running node's 5 px border (drawn regular: Cytoscape cut a bold label set in the same paint)
        assert r["textW"] <= r["w"] - 10 + 0.5 and r["textH"] <= r["h"] + 0.5, (step, r)
    assert checked >= 5 and with_values >= 2, (checked, with_values)
    boxes = p.js(BOXES_JS)
    legend, canvas = boxes["gradviz-legend"], boxes["gradviz-canvas"]
    assert legend and canvas["width"] > 300, boxes
    assert legend["left"] >= canvas["left"] - 0.5 and legend["right"] <= canvas["right"] + 0.5, boxes
    assert legend["top"] >= canvas["top"] - 0.5 and legend["bottom"] <= canvas["bottom"] + 0.5, boxes
    # A small recording is shown whole at a readable zoom, also when the step details sit under the canvas
    # (they took 42% of the body: the canvas was squeezed to 0.58 of its height).
    p.js("() => gv.hook.idle()")
    fit = float(p.js("() => Number(document.querySelector('.gradviz-root').dataset.fitZoom)"))
    tall = canvas["height"] >= 900 - 1  # a small graph's canvas grows up to 900 px
    assert fit >= 0.9 - 1e-6 or tall, f"a {len(data['graph']['nodes'])}-node recording fits only at {fit:.2f}: {boxes}"
    assert p.errors == []

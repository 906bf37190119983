"""The key: what blue leaves, grey ops, the bold root, dashed and double-bordered
boxes, ghosts and "×2" edges mean. Hidden by default, a "?" in the toolbar opens it (also while the
details panel is open: nothing covers the "?", and the key sits beside the panel), a click on the canvas
closes it and still selects what it hit, and its swatches are drawn in the colours the canvas really
uses, in the light and the dark theme (switched live)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
from pagekit import SCREENSHOTS, MountedPage, load_fixture

pytestmark = pytest.mark.browser
browser = pagekit.browser

DARK = {"--jp-layout-color0": "#111111", "--jp-layout-color1": "#212121", "--jp-layout-color2": "#424242",
        "--jp-ui-font-color0": "rgba(255,255,255,1)", "--jp-ui-font-color1": "rgba(255,255,255,0.87)",
        "--jp-ui-font-color2": "rgba(255,255,255,0.54)",
        "--jp-brand-color1": "#42a5f5", "--jp-border-color1": "#616161"}
SET_THEME_JS = """(vars) => {
  for (const [k, v] of Object.entries(vars)) document.body.style.setProperty(k, v);
  document.body.style.background = vars['--jp-layout-color0'];
  document.body.dataset.jpThemeLight = 'false';
}"""

# For each kind: the swatch's colours, and the colours Cytoscape draws that kind with (a real element
# where one is drawn, else a temporary node of that kind styled by the same stylesheet).
COLOURS_JS = """() => {
  const cy = gv.hook.cy;
  const norm = (c) => c.replace(/\\s+/g, '');
  const out = {};
  for (const row of document.querySelectorAll('[data-testid=gradviz-key] .gradviz-key-row')) {
    const kind = row.dataset.kind;
    const shape = row.querySelector('[data-part=shape]');
    const cs = getComputedStyle(shape);
    let canvas;
    if (kind.startsWith('edge')) {
      const e = cy.edges().not('.ghost').first();
      canvas = { fill: 'none', stroke: norm(e.style('line-color')) };
    } else {
      let n = cy.nodes(`[kind = "${kind}"]`).first();
      const temp = n.empty();
      if (temp) n = cy.add({ data: { id: 'key-probe', kind, label: '', w: 20, h: 10 } });
      canvas = { fill: norm(n.style('background-color')), stroke: norm(n.style('border-color')), temp };
      if (temp) n.remove();
    }
    out[kind] = { key: { fill: norm(cs.fill), stroke: norm(cs.stroke) }, canvas };
  }
  return out;
}"""


def test_key_is_hidden_opens_and_uses_the_canvas_colours(browser: Any, tmp_path: Path) -> None:
    state = {"graph_data": load_fixture("whatif_ghosts.json"), "expanded": ["enc", "enc.fc1", "enc.fc2"],
             "height": 520, "toggles": {"detach": [], "freeze": []}}
    p = MountedPage(browser, tmp_path, state, viewport=(1040, 700))
    key = p.page.locator("[data-testid=gradviz-key]")
    toggle = p.page.locator("[data-testid=gradviz-key-toggle]")
    assert toggle.is_visible() and key.is_hidden()  # collapsed by default, always available
    assert toggle.get_attribute("aria-expanded") == "false"
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(tmp_path / "closed.png"))
    toggle.click()
    assert key.is_visible() and toggle.get_attribute("aria-expanded") == "true"
    rows = p.js("() => [...document.querySelectorAll('.gradviz-key-row')].map((r) => [r.dataset.kind, r.textContent])")
    kinds = [k for k, _ in rows]
    assert kinds == ["leaf", "op", "root", "collapsed", "expanded", "folded", "ghost", "edge", "edge-many"]
    text = dict(rows)
    assert "leaf" in text["leaf"] and ".grad" in text["leaf"] and "op" in text["op"]
    assert "bold" in text["root"] and "loss" in text["root"]
    assert "dashed box" in text["collapsed"] and "double border" in text["folded"]
    assert "ghost" in text["ghost"] and "detached or frozen" in text["ghost"] and "×2" in text["edge-many"]
    # The "?" is a toolbar button; the key opens in the canvas's top-right corner, clear of the legend
    # (bottom left).
    assert p.js("() => !!document.querySelector('[data-testid=gradviz-toolbar] [data-testid=gradviz-key-toggle]')")
    box = key.bounding_box()
    canvas = p.page.locator("[data-testid=gradviz-canvas]").bounding_box()
    assert box and canvas and box["x"] > canvas["x"] + canvas["width"] / 2 and box["y"] < canvas["y"] + 20

    def check_colours(theme: str) -> dict[str, Any]:
        colours: dict[str, Any] = p.js(COLOURS_JS)
        real = [k for k, v in colours.items() if not v["canvas"].get("temp", False) and not k.startswith("edge")]
        assert {"leaf", "op", "root", "expanded", "ghost"} <= set(real), (theme, real)  # drawn, not probed
        for kind, v in colours.items():
            assert v["key"]["stroke"] == v["canvas"]["stroke"], (theme, kind, v)
            if not kind.startswith("edge"):
                assert v["key"]["fill"] == v["canvas"]["fill"], (theme, kind, v)
        return colours

    light = check_colours("light")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "key-light.png"))
    # A live switch to a dark theme: the canvas restyles, and the key's swatches follow.
    p.js(SET_THEME_JS, DARK)
    p.page.wait_for_function("() => document.querySelector('.gradviz-root').dataset.theme === 'dark'", timeout=5000)
    leaf_fill = "getComputedStyle(document.querySelector('.gradviz-key-row [data-part=shape]')).fill"
    p.page.wait_for_function(f"(c) => {leaf_fill}.replace(/\\s+/g, '') !== c", arg=light["leaf"]["key"]["fill"],
                             timeout=5000)
    dark = check_colours("dark")
    assert dark["leaf"]["key"]["fill"] != light["leaf"]["key"]["fill"]
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "key-dark.png"))
    # The "?" key toggles it while the widget has focus; the close button hides it.
    p.page.locator("[data-testid=gradviz-key-close]").click()
    assert key.is_hidden()
    p.page.click("[data-testid=gradviz-canvas]", position={"x": 5, "y": 5})
    p.page.keyboard.press("?")
    assert key.is_visible()
    p.page.keyboard.press("?")
    assert key.is_hidden()
    assert p.errors == []


def overlap(a: dict[str, float] | None, b: dict[str, float] | None) -> float:
    assert a and b
    w = min(a["x"] + a["width"], b["x"] + b["width"]) - max(a["x"], b["x"])
    h = min(a["y"] + a["height"], b["y"] + b["height"]) - max(a["y"], b["y"])
    return max(0.0, w) * max(0.0, h)


@pytest.mark.parametrize("width", [1400, 700])
def test_key_opens_beside_the_details_and_a_canvas_click_closes_it(browser: Any, tmp_path: Path, width: int) -> None:
    payload = load_fixture("whatif_ghosts.json")
    ops = [n["id"] for n in payload["nodes"] if n["kind"] == "op"]
    state = {"graph_data": payload, "expanded": ["enc", "enc.fc1", "enc.fc2"], "height": 520,
             "toggles": {"detach": [], "freeze": []}, "selected": ops[0]}
    p = MountedPage(browser, tmp_path, state, viewport=(width + 40, 700), width=width)
    details = p.page.locator("[data-testid=gradviz-details]")
    key = p.page.locator("[data-testid=gradviz-key]")
    assert details.is_visible()
    p.page.locator("[data-testid=gradviz-key-toggle]").click()  # a real click: nothing lies over the "?"
    assert key.is_visible()
    assert overlap(key.bounding_box(), details.bounding_box()) == 0, (key.bounding_box(), details.bounding_box())
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / f"key-with-details-{width}.png"))
    # A click on a node the key does not cover: the key closes and the node is selected.
    covers = [key.bounding_box(), details.bounding_box()]

    def clear(node: str) -> bool:
        pt = p.js("(id) => gv.hook.nodePoint(id)", node)
        seen = p.page.viewport_size  # a small graph's canvas may reach below the window
        if not pt or not (0 < pt["x"] < seen["width"] - 5 and 0 < pt["y"] < seen["height"] - 5):
            return False
        return all(overlap({"x": pt["x"], "y": pt["y"], "width": 1, "height": 1}, c) == 0 for c in covers)

    target = next((n for n in ops[1:] if clear(n)), None)
    assert target, "no node clear of the key and the details"
    point = p.js("(id) => gv.hook.nodePoint(id)", target)
    p.page.mouse.click(point["x"], point["y"])
    p.page.wait_for_function("(id) => gv.model.get('selected') === id", arg=target, timeout=5000)
    assert key.is_hidden()
    # A click on the background closes it too.
    p.page.locator("[data-testid=gradviz-key-toggle]").click()
    assert key.is_visible()
    canvas = p.page.locator("[data-testid=gradviz-canvas]").bounding_box()
    assert canvas
    seen = p.page.viewport_size["height"]  # a small graph's canvas may reach below the window
    p.page.mouse.click(canvas["x"] + 4, min(canvas["y"] + canvas["height"], seen) - 4)
    assert key.is_hidden()
    assert p.errors == []

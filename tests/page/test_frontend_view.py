"""The first view and the theme: labels readable at the first view's zoom, the
loss on screen, the height following the content, the zoom chip saying where the whole graph fits, and a
live theme switch that restyles the canvas with readable contrast."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import SCREENSHOTS, MountedPage

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.widgets.page import graph as graph_payload

pytestmark = pytest.mark.browser
browser = pagekit.browser

ROOT = "document.querySelector('.gradviz-root')"
# Model units -> pixels at the current zoom, for the node font and for the loss's box on the canvas.
VIEW_JS = f"""() => {{
  const cy = {ROOT}.__gradviz.cy;
  const loss = cy.nodes('[kind = "root"]').first().renderedBoundingBox({{ includeLabels: false }});
  const fontPx = parseFloat(cy.nodes().first().style('font-size')) * cy.zoom();
  return {{ zoom: cy.zoom(), fontPx, loss, w: cy.width(), h: cy.height(),
           body: document.querySelector('.gradviz-body').getBoundingClientRect().height,
           message: document.querySelector('[data-testid=gradviz-message]').textContent }};
}}"""

CHIP_JS = """() => { const c = document.querySelector('[data-testid=gradviz-zoom-chip]');
  return { fits: c.dataset.fits, percent: Number(c.dataset.percent), title: c.title, hidden: c.hidden }; }"""

LIGHT = {"--jp-layout-color0": "#ffffff", "--jp-layout-color1": "#ffffff", "--jp-layout-color2": "#eeeeee",
         "--jp-ui-font-color0": "rgba(0,0,0,1)", "--jp-ui-font-color1": "rgba(0,0,0,0.87)",
         "--jp-brand-color1": "#1976d2", "--jp-border-color1": "#bdbdbd"}
DARK = {"--jp-layout-color0": "#111111", "--jp-layout-color1": "#212121", "--jp-layout-color2": "#424242",
        "--jp-ui-font-color0": "rgba(255,255,255,1)", "--jp-ui-font-color1": "rgba(255,255,255,0.87)",
        "--jp-brand-color1": "#42a5f5", "--jp-border-color1": "#616161"}

SET_THEME_JS = """([vars, light]) => {
  for (const [k, v] of Object.entries(vars)) document.body.style.setProperty(k, v);
  document.body.style.background = vars['--jp-layout-color0'];
  document.body.dataset.jpThemeLight = String(light);
  document.body.dataset.jpThemeName = light ? 'JupyterLab Light' : 'JupyterLab Dark';
}"""

# WCAG contrast of every drawn node's text against its fill (colours as Cytoscape resolved them).
CONTRAST_JS = f"""() => {{
  const cy = {ROOT}.__gradviz.cy;
  const rgb = (s) => s.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number);
  const lin = (v) => {{ v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }};
  const lum = (c) => {{ const [r, g, b] = c.map(lin); return 0.2126 * r + 0.7152 * g + 0.0722 * b; }};
  const ratio = (a, b) => {{ const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); }};
  return cy.nodes().filter((n) => n.data('kind') !== 'expanded' && n.data('kind') !== 'ghost').map((n) => [
    n.data('label'), ratio(rgb(n.style('color')), rgb(n.style('background-color'))), n.style('background-color')]);
}}"""


@pytest.fixture(scope="module")
def gpt2_payload() -> dict[str, Any]:
    return pagekit.gpt2_small_payload()


def _tiny_payload() -> dict[str, Any]:
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0, 4.0], requires_grad=True)
    return graph_payload(gv.trace((a * b + a).sum()))


def test_first_view_reads_and_shows_the_loss(browser: Any, gpt2_payload: dict[str, Any], tmp_path: Path) -> None:
    # Nothing opened since the first view, selected or marked: the loss is the subject (boxes opened from
    # Python later would be). Two open blocks make it more than a small graph, which would size itself.
    page = MountedPage(browser, tmp_path, {"graph_data": gpt2_payload, "height": 600,
                                           "expanded": ["blocks.0", "blocks.1"]})
    page.js(f"async () => {ROOT}.__gradviz.idle()")
    v = page.js(VIEW_JS)
    assert v["fontPx"] >= 11, f"first view text is {v['fontPx']:.1f} px"
    loss = v["loss"]
    inside = loss["x1"] >= 0 and loss["x2"] <= v["w"] and loss["y1"] >= 0 and loss["y2"] <= v["h"]
    assert inside, f"loss off screen: {loss}"
    # The whole graph does not fit at a readable zoom: the toolbar's zoom chip says at which zoom it would.
    chip = page.js(CHIP_JS)
    assert chip["fits"] == "false" and 0 < chip["percent"] < 100 and "outside the view" in chip["title"], chip
    # Fit zooms out towards that, never below the camera's floor (40%).
    page.page.click("[data-testid=gradviz-fit]")
    after = page.js(VIEW_JS)
    assert 0.4 - 1e-6 <= after["zoom"] < 1, after["zoom"]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.page.screenshot(path=str(SCREENSHOTS / "first_view_gpt2.png"))
    assert page.errors == []


def test_height_follows_a_small_graph(browser: Any, tmp_path: Path) -> None:
    page = MountedPage(browser, tmp_path, {"graph_data": _tiny_payload(), "height": 600})
    page.js(f"async () => {ROOT}.__gradviz.idle()")
    v = page.js(VIEW_JS)
    assert v["fontPx"] >= 11
    assert v["body"] < 600, f"a 5-node graph kept a {v['body']} px canvas"
    assert v["message"] == ""


@pytest.mark.parametrize("start", ["light", "dark"])
def test_theme_switch_restyles_the_canvas_live(browser: Any, gpt2_payload: dict[str, Any], tmp_path: Path,
                                               start: str) -> None:
    first, second = (LIGHT, DARK) if start == "light" else (DARK, LIGHT)
    page = MountedPage(browser, tmp_path, {"graph_data": gpt2_payload, "height": 500})
    page.js(SET_THEME_JS, [first, start == "light"])
    page.js(f"async () => {ROOT}.__gradviz.idle()")
    page.page.wait_for_timeout(700)
    before = page.js(CONTRAST_JS)
    page.js(SET_THEME_JS, [second, start != "light"])
    page.page.wait_for_timeout(700)  # the watcher re-reads at once, then at 120 and 600 ms
    after = page.js(CONTRAST_JS)
    assert {c for _, _, c in before} != {c for _, _, c in after}, "node fills did not change with the theme"
    low = [(label, round(r, 2)) for label, r, _ in after if r < 4.5]
    assert low == [], f"text/fill contrast under 4.5:1 after switching from {start}: {low[:5]}"
    assert page.js(f"{ROOT}.dataset.theme") == ("dark" if start == "light" else "light")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.page.screenshot(path=str(SCREENSHOTS / f"theme_switch_from_{start}.png"))
    assert page.errors == []


@pytest.mark.parametrize("width", [1000, 560])
def test_details_sit_beside_or_under_the_graph_never_over_it(browser: Any, gpt2_payload: dict[str, Any],
                                                             tmp_path: Path, width: int) -> None:
    page = MountedPage(browser, tmp_path, {"graph_data": gpt2_payload, "height": 500}, width=width)
    page.js(f"async () => {ROOT}.__gradviz.idle()")
    leaf = next(n["id"] for n in gpt2_payload["nodes"] if n["kind"] == "leaf")
    page.js("(id) => window.gv.model.set('selected', id)", leaf)
    page.js(f"async () => {ROOT}.__gradviz.idle()")
    rects = page.js("""() => ['gradviz-details', 'gradviz-canvas'].map((t) =>
        document.querySelector(`[data-testid=${t}]`).getBoundingClientRect().toJSON())""")
    details, canvas = rects
    assert details["width"] > 0 and details["height"] > 0, "the details panel is not shown"
    overlap_w = min(details["right"], canvas["right"]) - max(details["left"], canvas["left"])
    overlap_h = min(details["bottom"], canvas["bottom"]) - max(details["top"], canvas["top"])
    assert overlap_w <= 1 or overlap_h <= 1, f"details {details} cover the canvas {canvas}"
    page.page.screenshot(path=str(SCREENSHOTS / f"details_beside_{width}.png"))
    assert page.errors == []


def test_unfolding_a_long_stack_says_so_while_it_works(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=24, n_head=2, d_model=16, vocab=50, block_size=8))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, seq=4)
    page = MountedPage(browser, tmp_path, {"graph_data": graph_payload(gv.trace(loss, model=model, capture=cap)),
                                           "height": 500})
    page.js(f"async () => {ROOT}.__gradviz.idle()")
    folded = page.js(f"() => {ROOT}.__gradviz.folded()")
    assert folded, "the 24 blocks should be drawn as one folded stack"
    # Every text the spinner shows while the stack unfolds (a MutationObserver sees each change).
    page.js("""() => { window.spun = []; const s = document.querySelector('[data-testid=gradviz-spinner]');
        new MutationObserver(() => { if (!s.hidden) window.spun.push(s.textContent); })
          .observe(s, { attributes: true, childList: true, characterData: true, subtree: true }); }""")
    page.js(f"async (g) => {ROOT}.__gradviz.unfold(g)", folded[0])
    spun = page.js("() => window.spun")
    assert any(t.startswith("Unfolding 24 × Block") for t in spun), spun
    assert page.js("() => document.querySelector('[data-testid=gradviz-spinner]').hidden")
    assert page.errors == []


# Edges drawn through a box they do not connect to (Cytoscape's drawn routes, sampled along each segment).
CROSSING_JS = f"""() => {{
  const cy = {ROOT}.__gradviz.cy;
  const items = cy.nodes().map((n) => ({{ n, bb: n.boundingBox({{ includeLabels: false }}) }}));
  const within = (a, b) => a.x1 >= b.x1 && a.x2 <= b.x2 && a.y1 >= b.y1 && a.y2 <= b.y2;
  const out = [];
  cy.edges().forEach((e) => {{
    if (e.hasClass('ghost')) return;
    const s = e.source(), t = e.target();
    const pts = [e.sourceEndpoint(), ...(e.segmentPoints() || []), e.targetEndpoint()];
    const hit = items.filter(({{ n, bb }}) => {{
      if (n.same(s) || n.same(t)) return false;
      if (n.data('kind') === 'expanded' && (within(s.boundingBox(), bb) || within(t.boundingBox(), bb))) return false;
      const inner = {{ x1: bb.x1 + 2, y1: bb.y1 + 2, x2: bb.x2 - 2, y2: bb.y2 - 2 }};
      for (let i = 1; i < pts.length; i++) for (let k = 1; k < 50; k++) {{
        const a = pts[i - 1], b = pts[i], x = a.x + (b.x - a.x) * k / 50, y = a.y + (b.y - a.y) * k / 50;
        if (x > inner.x1 && x < inner.x2 && y > inner.y1 && y < inner.y2) return true;
      }}
      return false;
    }});
    if (hit.length) out.push(`${{s.id()}} -> ${{t.id()}} through ${{hit.map((h) => h.n.id()).join(', ')}}`);
  }});
  return out;
}}"""


def test_edges_never_cut_through_boxes_after_opening_and_closing(browser: Any, tmp_path: Path) -> None:
    """GPT-2 with tied embeddings: the wte.weight -> lm_head edge spans every block. After a click opens
    blocks.3 (an incremental placement), and after it closes again, no edge may cross a box."""
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=8, n_head=2, d_model=32, vocab=101, block_size=16))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=2)
    payload = graph_payload(gv.trace(loss, model=model, capture=cap))
    page = MountedPage(browser, tmp_path, {"graph_data": payload, "height": 800, "unfolded": [
        f["id"] for f in payload.get("folds", [])]})
    hook = f"{ROOT}.__gradviz"
    page.js(f"async () => {hook}.idle()")
    assert page.js(CROSSING_JS) == [], "first view"
    for step, box in [("expand", "blocks.3"), ("expand", "blocks.3.attn"), ("collapse", "blocks.3.attn"),
                      ("collapse", "blocks.3")]:
        page.js(f"async (b) => {hook}.{step}(b)", box)
        assert page.js(CROSSING_JS) == [], f"after {step} {box}"
    assert page.errors == []


# Every drawn label measured in the font Cytoscape really uses, against its box (1 px slack).
OVERFLOW_JS = f"""() => {{
  const cy = {ROOT}.__gradviz.cy;
  const c = document.createElement('canvas').getContext('2d');
  const out = [];
  cy.nodes().forEach((n) => {{
    if (n.data('kind') === 'expanded') return;
    c.font = `${{n.style('font-weight')}} ${{n.style('font-size')}} ${{n.style('font-family')}}`;
    const w = Math.max(...String(n.data('label') || '').split('\\n').map((l) => c.measureText(l).width));
    if (w > n.width() - 2 * 4 + 1) out.push([n.data('label'), Math.round(w), Math.round(n.width())]);
  }});
  return {{ out, family: cy.nodes().first().style('font-family') }};
}}"""


def test_labels_fit_their_boxes_in_jupyterlabs_quoted_font(browser: Any, gpt2_payload: dict[str, Any],
                                                           tmp_path: Path) -> None:
    """JupyterLab quotes font names with single quotes, which Cytoscape's parser refuses: it then drew in its
    default font while sizes were measured in the theme's, and labels overflowed their boxes."""
    page = MountedPage(browser, tmp_path, {"graph_data": gpt2_payload, "expanded": ["blocks.0", "blocks.0.attn"],
                                           "height": 600})
    page.js(f"async () => {ROOT}.__gradviz.idle()")
    serif = "'DejaVu Serif', 'Liberation Serif', serif"
    page.js("""(f) => { document.body.style.setProperty('--jp-ui-font-family', f);
                       document.body.dataset.jpThemeName = 'JupyterLab Light (serif)'; }""", serif)
    page.page.wait_for_timeout(800)  # the theme watcher re-reads, restyles and lays out again
    page.js(f"async () => {ROOT}.__gradviz.idle()")
    got = page.js(OVERFLOW_JS)
    assert "DejaVu Serif" in got["family"], f"Cytoscape did not take the theme's font: {got['family']}"
    assert got["out"] == [], f"labels wider than their boxes: {got['out'][:5]}"
    assert page.errors == []

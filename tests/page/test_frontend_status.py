"""The status line in the built bundle (blank headless Chromium page, fake anywidget model): the what-if
headline, its verification, the view's message and the notes share one line above the canvas, with an
expander for the rest; the no-capture note only on a graph big enough for module boxes to help; the
zoom chip in the toolbar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import SCREENSHOTS, MountedPage, load_fixture

import gradviz_nb as gv
from gradviz_nb.widgets.page import graph as graph_payload

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
# Every visible block between the toolbar and the canvas: [test id or class, height].
BARS_JS = """() => {
  const root = document.querySelector('.gradviz-root');
  const toolbar = root.querySelector('[data-testid=gradviz-toolbar]').getBoundingClientRect();
  const canvas = root.querySelector('[data-testid=gradviz-canvas]').getBoundingClientRect();
  const out = [];
  for (const el of root.children) {
    const r = el.getBoundingClientRect();
    if (r.height < 1 || r.top < toolbar.bottom - 1 || r.bottom > canvas.top + 1) continue;
    out.push([el.dataset.testid || el.className, Math.round(r.height)]);
  }
  return out;
}"""
NO_BOXES = "No module boxes"


def small_partial_verify() -> dict[str, Any]:
    """8 nodes traced without module capture (the payload carries the no-capture note); the tanh's output
    detached and verified: partly, since the plain tensors are no parameters the re-run can reach."""
    torch.manual_seed(0)
    w1 = torch.randn(3, 4, requires_grad=True)
    w2 = torch.randn(4, 1, requires_grad=True)
    x = torch.randn(2, 3)
    w = gv.GraphWidget.from_fn(lambda: ((x @ w1).tanh() @ w2).pow(2).mean())
    g = w.graph.nx
    tanh = next(n for n, d in g.nodes(data=True) if d["op"] == "TanhBackward0")
    w.toggles = {"detach": [f"{tanh}:0"], "freeze": []}
    w.verify()
    state = dict(w.page_state())
    return {k: state[k] for k in ("graph_data", "toggles", "verified", "can_verify")} | {"height": 420}


def test_one_status_line_for_a_small_graph_with_verify_and_notes(browser: Any, tmp_path: Path) -> None:
    state = small_partial_verify()
    nodes = len(state["graph_data"]["nodes"])
    assert nodes <= 25 and any(n.startswith(NO_BOXES) for n in state["graph_data"]["meta"]["notes"])
    assert state["verified"]["complete"] is False
    p = MountedPage(browser, tmp_path, state, viewport=(1040, 700))
    bars = p.js(BARS_JS)
    assert len(bars) == 1 and bars[0][0] == "gradviz-status" and bars[0][1] <= 32, bars
    status = p.page.locator("[data-testid=gradviz-status]")
    banner = p.page.locator("[data-testid=gradviz-verified]")
    # The headline and the amber verification are in that one line; the no-capture note is not.
    assert status.locator("[data-testid=gradviz-whatif-summary]").is_visible()
    assert banner.is_visible() and "gradviz-verified-partial" in (banner.get_attribute("class") or "")
    assert NO_BOXES not in (status.text_content() or "")
    assert p.page.locator("[data-testid=gradviz-notes]").is_hidden()
    bg = p.js("() => getComputedStyle(document.querySelector('[data-testid=gradviz-verified]')).backgroundColor")
    assert bg == "rgba(255, 179, 0, 0.2)", bg
    # The expander shows the verification in full, under the headline; again: one line.
    more = p.page.locator("[data-testid=gradviz-status-more]")
    assert more.is_visible() and more.get_attribute("aria-expanded") == "false"
    line = status.bounding_box()
    more.click()
    full = status.bounding_box()
    assert line and full and full["height"] > 2 * line["height"], (line, full)
    assert banner.bounding_box()["width"] > 0.8 * full["width"]  # type: ignore[index]
    assert "Not checked" in banner.inner_text()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "status-open-light.png"))
    more.click()
    assert status.bounding_box()["height"] == pytest.approx(line["height"], abs=1)  # type: ignore[index]
    assert p.errors == []


def test_no_capture_note_only_when_boxes_would_help(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, requires_grad=True)
    h = x
    for _ in range(30):
        h = (h * 1.01).tanh()
    g = gv.trace(h.sum())
    payload = graph_payload(g)
    assert len(payload["nodes"]) > 25 and any(n.startswith(NO_BOXES) for n in payload["meta"]["notes"])
    p = MountedPage(browser, tmp_path, {"graph_data": payload, "height": 400}, viewport=(1040, 600))
    notes = p.page.locator("[data-testid=gradviz-notes]")
    assert notes.is_visible() and notes.inner_text().startswith(NO_BOXES)
    bars = p.js(BARS_JS)
    assert len(bars) == 1 and bars[0][1] <= 32, bars
    # The one note is longer than the line (an ellipsis): the expander shows it whole.
    cut_js = "(q) => q.scrollWidth > q.clientWidth"
    note = notes.locator("p")
    cut = note.evaluate(cut_js)
    more = p.page.locator("[data-testid=gradviz-status-more]")
    assert cut and more.is_visible()
    more.click()
    assert not note.evaluate(cut_js)
    assert p.errors == []


def test_hidden_entries_take_no_room_in_the_line(browser: Any, tmp_path: Path) -> None:
    # A diff: the what-if and checkpoint entries are there but hidden; the diff's headline leads the line.
    data = load_fixture("diff_lora.json")["added"]
    state = {"graph_data": data["graph"], "expanded": [], "height": 500, "diff": data["diff"]}
    p = MountedPage(browser, tmp_path, state, viewport=(1240, 800), width=1200)
    status = p.page.locator("[data-testid=gradviz-status]").bounding_box()
    title = p.page.locator("[data-testid=gradviz-diff-title]")
    box = title.bounding_box()
    assert status and box and status["y"] <= box["y"] and box["y"] + box["height"] <= status["y"] + status["height"] + 1
    assert title.inner_text().startswith("Diff: ")
    hidden = p.js("() => [...document.querySelectorAll('.gradviz-status-entry[hidden]')].map((e) => e.offsetWidth)")
    assert hidden and set(hidden) == {0}, hidden
    # The summary under the headline is behind the expander.
    more = p.page.locator("[data-testid=gradviz-status-more]")
    assert more.is_visible()
    more.click()
    assert p.page.locator("[data-testid=gradviz-diff-summary]").is_visible()
    assert p.errors == []


def test_zoom_chip_says_the_zoom_and_fits_on_click(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    xs = [torch.randn(1, requires_grad=True) for _ in range(21)]
    payload = graph_payload(gv.trace(torch.cat([x * 2 for x in xs]).sum()))
    p = MountedPage(browser, tmp_path, {"graph_data": payload, "height": 400}, viewport=(1040, 600))
    chip = p.page.locator("[data-testid=gradviz-zoom-chip]")
    chip.wait_for(state="visible", timeout=5000)
    # 21 leaves side by side (45 items: more than a small graph, which would size itself) do not fit
    # whole in 1000 px at a readable zoom: the chip offers the fit zoom.
    assert chip.get_attribute("data-fits") == "false", chip.inner_text()
    percent = int(chip.get_attribute("data-percent") or "0")
    assert chip.inner_text() == f"{percent}% fits ⤢" and (chip.get_attribute("title") or "")
    chip.click()
    p.page.wait_for_function("() => document.querySelector('[data-testid=gradviz-zoom-chip]').dataset.fits === 'true'",
                             timeout=5000)
    zoom = round(p.js("() => gv.hook.cy.zoom()") * 100)
    assert abs(zoom - percent) <= 1, (zoom, percent)
    assert chip.inner_text() == f"{int(chip.get_attribute('data-percent') or 0)}% · whole graph"
    assert p.errors == []


@pytest.mark.parametrize("width", [1000, 1400, 1920])
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_status_line_screenshots(browser: Any, tmp_path: Path, theme: str, width: int) -> None:
    state = small_partial_verify()
    p = MountedPage(browser, tmp_path, state, viewport=(width + 40, 620), width=width)
    if theme == "dark":
        p.js(SET_THEME_JS, DARK)
        p.page.wait_for_function("() => document.querySelector('.gradviz-root').dataset.theme === 'dark'", timeout=5000)
    bars = p.js(BARS_JS)
    assert len(bars) == 1 and bars[0][1] <= 32, bars
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / f"status-{theme}-{width}.png"))
    assert p.errors == []


@pytest.mark.parametrize("width", [560, 1000])  # 560: the cell of a 1000 px JupyterLab window
def test_the_answer_gets_the_room_first_and_the_verification_shrinks(browser: Any, tmp_path: Path, width: int) -> None:
    """The answer a user came for gets the room first: the headline ("1 of 2 leaves lose gradient") is never
    cut short while the verification (its provenance) is; that one shrinks, down to a coloured stub of 28 px
    (its words in full behind the expander). Before, at 560 px, the headline read "1 of 2 leaves lose
    gr…" beside "Verified by re-running…"."""
    p = MountedPage(browser, tmp_path, small_partial_verify(), viewport=(width + 40, 700), width=width)
    seen = p.js("""() => {
      const line = document.querySelector('.gradviz-status-entries').getBoundingClientRect();
      const banner = document.querySelector('[data-testid=gradviz-verified]');
      const b = banner.getBoundingClientRect();
      const h = document.querySelector('[data-testid=gradviz-whatif-summary]');
      const first = banner.firstElementChild;
      // the answer: the headline up to its first ";" (what is lost; the costs after it may give way)
      const text = h.textContent, end = text.includes(';') ? text.indexOf(';') : text.length;
      const walker = document.createTreeWalker(h, NodeFilter.SHOW_TEXT);
      const range = document.createRange();
      let seen = 0, node, started = false;
      while ((node = walker.nextNode())) {
        const len = node.textContent.length;
        if (!started) { range.setStart(node, 0); started = true; }
        if (seen + len >= end) { range.setEnd(node, end - seen); break; }
        seen += len;
      }
      const a = range.getBoundingClientRect(), hr = h.getBoundingClientRect();
      const visible = Math.min(hr.right, line.right) - 12;  // the ellipsis takes the last glyph's room
      return { banner: Math.max(0, Math.min(b.right, line.right) - Math.max(b.left, line.left)), line: line.width,
               answerCut: a.right > visible, answer: text.slice(0, end), answerRight: a.right, visible,
               bannerCut: !!first && first.scrollWidth > first.clientWidth + 1 };
    }""")
    assert not seen["answerCut"], f"the answer {seen['answer']!r} is cut short at {width} px: {seen}"
    assert seen["banner"] >= 28, f"the verification shows {seen['banner']:.0f} px of a {seen['line']:.0f} px line"
    if width == 560:
        assert seen["bannerCut"], seen  # the provenance is what gave way
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / f"status-narrow-{width}.png"))
    assert p.errors == []

"""An exported HTML page opened from file:// in headless Chromium: it renders, expands a module on a
real click, shows details, answers a what-if toggle, steps through a recorded backward pass, with no
console error and no network request. Also PNG/SVG export from Python (which renders the same page)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import CHROMIUM

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, gpt2_loss

pytestmark = pytest.mark.browser
browser = pagekit.browser  # the module-scoped headless Chromium fixture

EVIL = "</script><script>window.pwned=1</script><!--"


@pytest.fixture(scope="module")
def widget() -> gv.GraphWidget:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    x = torch.randn(3, requires_grad=True)
    w = gv.GraphWidget([loss, (x * 2).sum()], model=model, capture=cap, names={EVIL: x})
    w.selected = ""
    return w


def open_page(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_function("() => window.gradvizReady !== undefined", timeout=60_000)
    page.evaluate("() => window.gradvizReady")
    return page, errors, requests


HOOK = "document.querySelector('.gradviz-root').__gradviz"


def test_exported_page_is_interactive_offline(browser: Any, widget: gv.GraphWidget, tmp_path: Path) -> None:
    path = widget.save_html(tmp_path / "graph.html", title=EVIL)
    page, errors, requests = open_page(browser, path)
    assert page.evaluate("() => window.pwned") is None
    assert EVIL in page.locator("h1").inner_text()
    before = page.evaluate(f"() => {HOOK}.visibleCounts()")
    # Expand a closed module box with a real mouse click.
    opened = widget.expanded
    box = next(c["id"] for c in widget.graph.calls
               if c["id"] not in opened and (not c["parent"] or c["parent"] in opened) and c["size"] > 2)
    point = page.evaluate(f"(id) => {HOOK}.boxPoint(id)", box)
    assert point, f"{box} is not on screen"
    page.mouse.click(point["x"], point["y"])
    page.evaluate(f"() => {HOOK}.idle()")
    assert box in page.evaluate("() => window.gradvizModel.get('expanded')")
    assert page.evaluate(f"() => {HOOK}.visibleCounts()")["nodes"] > before["nodes"]
    # Details of a node, by a real click.
    leaf = widget.graph.leaves()[EVIL]
    point = page.evaluate(f"(id) => {HOOK}.nodePoint(id)", leaf)
    page.mouse.click(point["x"], point["y"])
    assert page.evaluate("() => window.gradvizModel.get('selected')") == leaf
    assert EVIL in page.locator("[data-testid=gradviz-details]").inner_text()
    # A what-if detach, answered in the page, agrees with Python.
    detach = [f"call:{c}" for c in ("blocks.1",)]
    page.evaluate("(d) => window.gradvizModel.set('toggles', {detach: d, freeze: []})", detach)
    lost = page.evaluate(f"() => {HOOK}.whatIf().lost_ids")
    assert sorted(lost) == sorted(widget.graph.what_if(detach=["blocks.1"]).lost_ids) and lost
    page.screenshot(path=str(tmp_path / "exported.png"))
    assert errors == []
    assert all(u.split(":", 1)[0] in ("file", "blob", "data") for u in requests), requests


def test_export_keeps_widget_state_and_overrides(browser: Any, widget: gv.GraphWidget, tmp_path: Path) -> None:
    mem = gv.memory_held(widget.graph)
    path = gv.export_html(widget, tmp_path / "mem.html", expanded=["blocks.1"], overlay=mem)  # converted
    assert widget.overlay == {}  # the user's widget is left as it was
    page, errors, requests = open_page(browser, path)
    state = page.evaluate("() => window.gradvizModel.state")
    assert state["expanded"] == ["blocks.1"] and state["overlay"]["unit"] == "B"
    assert state["can_verify"] is False and state["verified"] == {}
    assert {"graph_data", "toggles", "selected", "height", "diff"} <= set(state)
    assert not any(k.startswith("_") for k in state)
    assert page.evaluate(f"() => {HOOK}.visibleCounts()")["expanded"] == 1
    assert errors == [] and all(u.split(":", 1)[0] in ("file", "blob", "data") for u in requests)


def test_png_and_svg_from_python(widget: gv.GraphWidget, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    pytest.importorskip("playwright.sync_api")
    png = widget.save_png(tmp_path / "view.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    svg = widget.save_svg(tmp_path / "view.svg")
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = " ".join("".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for label in ("blocks.0", "blocks.1", "lm_head", EVIL):
        assert label in text, label
    assert len(list(root.iter("{http://www.w3.org/2000/svg}polyline"))) > 5


def test_exported_page_steps_through_a_recorded_backward(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(5, 4)).pow(2).mean()
    rec = gv.record_backward(loss, model=model, capture=cap)
    widget = gv.GraphWidget(rec)
    path = widget.save_html(tmp_path / "steps.html", title="MLP backward, step by step")
    page, errors, requests = open_page(browser, path)
    root = page.locator("[data-testid=gradviz-root]")
    assert page.locator("[data-testid=gradviz-stepper]").is_visible()
    assert root.get_attribute("data-step") == "-1" and root.get_attribute("data-step-node") == ""
    seen = []
    for _ in range(3):
        page.click("[data-testid=gradviz-step-forward]")
        seen.append(root.get_attribute("data-step-node"))
        running = page.evaluate(f"() => {HOOK}.stepInfo().node")
        assert running == seen[-1] and running == widget.recording["steps"][len(seen) - 1]["node"]
        assert page.evaluate(f"(k) => {HOOK}.cy.$('.st-run').map((n) => n.id())") != []
    assert len(set(seen)) == 3, seen  # the highlighted node moved at every step
    assert page.evaluate("() => window.gradvizModel.get('step')") == 2
    page.click("[data-testid=gradviz-step-back]")
    assert root.get_attribute("data-step-node") == seen[1]
    assert page.locator("[data-testid=gradviz-step-details]").is_visible()
    page.screenshot(path=str(tmp_path / "steps.png"))
    assert errors == []
    assert all(u.split(":", 1)[0] in ("file", "blob", "data") for u in requests), requests


def _png_size(data: bytes) -> tuple[int, int]:
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")  # IHDR width, height


def test_png_fit_to_aspect_wraps_a_long_graph_into_columns(tmp_path: Path) -> None:
    """A long chain is a tall strip as one column; aspect=16/9 lays it out in columns (ELK's graph
    wrapping) so the picture fits a slide; a bad aspect is a clear error."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    x = torch.randn(4, requires_grad=True)
    y = x
    for i in range(40):
        y = (y * 1.01).tanh() if i % 2 else y + 0.1
    w = gv.GraphWidget(y.sum())
    tall_w, tall_h = _png_size(w.save_png(tmp_path / "tall.png", scale=1).read_bytes())
    wide_w, wide_h = _png_size(w.save_png(tmp_path / "wide.png", scale=1, aspect=16 / 9).read_bytes())
    assert tall_h > 8 * tall_w, (tall_w, tall_h)
    assert 0.8 < wide_w / wide_h < 3.5, (wide_w, wide_h)
    with pytest.raises(gv.GradvizError, match="width / height"):
        w.save_png(tmp_path / "bad.png", aspect=0)

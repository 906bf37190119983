"""Checkpoint mode in the built bundle, in headless Chromium with the fake anywidget model, on GPT-2 124M's
graph: shift-clicks and checkpoint-mode clicks on block boxes cycle their marks (synced ``checkpoints``
trait), the answer (bytes before/after per box and total, recompute, lost leaves) is the one Python gives for
the same marks, and each click is answered within 50 ms without a kernel. Screenshots (light and dark, 1000
and 1920 px) go to ``build/screenshots/checkpoint-*.png``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import SCREENSHOTS, MountedPage

import gradviz_nb as gv
from gradviz_nb.analysis.checkpointing import checkpoint_what_if
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss

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


@pytest.fixture(scope="module")
def gpt2_124m() -> tuple[gv.AutogradGraph, dict[str, Any]]:
    torch.manual_seed(0)
    model = GPT2(GPT2Config())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=1, seq=64)
    w = gv.GraphWidget(loss, model=model, capture=cap)
    state = dict(w.page_state())
    state["unfolded"] = [f["id"] for f in state["graph_data"].get("folds", [])]
    graph = w.graph
    w.close()
    return graph, state


def _click_box(p: MountedPage, call: str, shift: bool) -> None:
    point = p.js("(id) => gv.hook.boxPoint(id)", call)
    assert point, f"{call} is not on screen"
    if shift:
        p.page.keyboard.down("Shift")
    p.page.mouse.click(point["x"], point["y"])
    if shift:
        p.page.keyboard.up("Shift")


def test_marks_by_click_answer_as_python_within_50_ms(browser: Any, tmp_path: Path,
                                                       gpt2_124m: tuple[gv.AutogradGraph, dict[str, Any]]) -> None:
    graph, state = gpt2_124m
    p = MountedPage(browser, tmp_path, state, viewport=(1040, 1000))
    _click_box(p, "blocks.0", shift=True)
    assert p.js("() => gv.model.state.checkpoints") == {"blocks.0": "non_reentrant"}
    _click_box(p, "blocks.0", shift=True)
    assert p.js("() => gv.model.state.checkpoints") == {"blocks.0": "reentrant"}
    _click_box(p, "blocks.0", shift=True)
    assert p.js("() => gv.model.state.checkpoints") == {}
    p.page.locator("[data-testid=gradviz-checkpoint-toggle]").click()
    times = []
    for call in ("blocks.0", "blocks.2", "blocks.4", "blocks.6", "blocks.8", "blocks.10"):
        _click_box(p, call, shift=False)
        times.append(float(p.js("() => gv.hook.lastCheckpointMs()")))
    marks = p.js("() => gv.model.state.checkpoints")
    assert marks == {f"blocks.{i}": "non_reentrant" for i in range(0, 12, 2)}
    assert max(times) <= 50, times
    page_answer = p.js("() => gv.hook.checkpointAnswer()")
    py = checkpoint_what_if(graph, marks)
    assert (page_answer["before"], page_answer["after"]) == (py.before, py.after)
    assert page_answer["recomputedOps"] == py.recomputed_ops and page_answer["lost"] == []
    summary = p.page.locator("[data-testid=gradviz-checkpoint-summary]").inner_text()
    assert summary.startswith("6 checkpointed: saved for backward")
    assert p.js("() => gv.hook.cy.$id('c:blocks.2').hasClass('ck-nonreentrant')")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # marks added by clicks, after the layout was drawn
    p.js("() => { const cy = gv.hook.cy; cy.zoom(0.9); cy.center(cy.$id('c:blocks.4')); }")
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "checkpoint-clicked-1000.png"))
    assert not p.errors, p.errors
    print(f"checkpoint answer per click on GPT-2 124M: max {max(times):.1f} ms")


@pytest.mark.parametrize("width", [1000, 1920])
def test_screenshots_light_and_dark(browser: Any, tmp_path: Path, width: int,
                                    gpt2_124m: tuple[gv.AutogradGraph, dict[str, Any]]) -> None:
    _, base = gpt2_124m
    marks = {**{f"blocks.{i}": "non_reentrant" for i in (0, 4, 8)}, **{f"blocks.{i}": "reentrant" for i in (2, 6)}}
    state = {**base, "checkpoints": marks}
    p = MountedPage(browser, tmp_path, state, viewport=(width + 40, 1000), width=width)
    p.js("() => gv.hook.idle()")
    assert p.js("() => gv.hook.cy.$id('c:blocks.2').hasClass('ck-reentrant')")
    p.js("() => { const cy = gv.hook.cy; cy.zoom(0.9); cy.center(cy.$id('c:blocks.4')); }")  # the marked blocks
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    root = p.page.locator("[data-testid=gradviz-root]")
    root.screenshot(path=str(SCREENSHOTS / f"checkpoint-light-{width}.png"))
    p.js(SET_THEME_JS, DARK)
    p.page.wait_for_function("() => document.querySelector('.gradviz-root').dataset.theme === 'dark'", timeout=5000)
    p.page.wait_for_timeout(300)
    root.screenshot(path=str(SCREENSHOTS / f"checkpoint-dark-{width}.png"))
    assert not p.errors, p.errors

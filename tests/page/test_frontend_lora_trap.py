"""The reentrant trap as the LoRA engineer meets it (notebook 09's setup), in the built bundle: the status line
leads with the harm ("N leaves lose gradient", in the bad colour) before the bytes saved; the first view
shows a lost adapter, not the loss; a verification of earlier marks is greyed and labelled, never a red
"disagree" over the current marks; a box's tooltip follows a click that changes its mark. The lost leaves are
PyTorch's own: the same marks, really applied in a re-run, leave exactly those adapters without ``.grad``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import SCREENSHOTS, MountedPage

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss

pytestmark = pytest.mark.browser
browser = pagekit.browser

# The first lost leaf's drawn representative (itself, or the closed box around it) in the viewport?
LOST_IN_VIEW_JS = """() => {
  const cy = gv.hook.cy, a = gv.hook.checkpointAnswer(), g = gv.model.state.graph_data;
  const calls = new Map(g.calls.map((c) => [c.id, c.parent]));
  const shown = a.lost.map((id) => {
    let el = cy.$id('n:' + id);
    for (let c = g.nodes.find((n) => n.id === id).call; el.empty() && c; c = calls.get(c)) el = cy.$id('c:' + c);
    if (el.empty()) return false;
    const b = el.renderedBoundingBox(), w = cy.width(), h = cy.height();
    return b.x2 > 0 && b.x1 < w && b.y2 > 0 && b.y1 < h;
  });
  return shown.some(Boolean);
}"""
STATUS_JS = """() => {
  const v = document.querySelector('[data-testid=gradviz-checkpoint-summary-verdict]');
  const line = document.querySelector('[data-testid=gradviz-status]').getBoundingClientRect();
  const r = v.getBoundingClientRect();
  const first = document.querySelector('[data-testid=gradviz-checkpoint-summary]').textContent;
  return {text: v.textContent, color: getComputedStyle(v).color, hidden: v.hidden, right: r.right,
          lineRight: line.right, left: r.left, lineLeft: line.left, summary: first};
}"""


@pytest.fixture(scope="module")
def trap() -> tuple[dict[str, Any], list[str]]:
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_head=2, d_model=32, vocab=64, block_size=16)
    lora = add_lora(GPT2(cfg), targets=("c_attn",))
    w = gv.GraphWidget.from_fn(lambda: gpt2_loss(lora, batch=2, seq=16), model=lora)
    blocks = [c["id"] for c in w.graph.calls if c["type"] == "Block"]
    w.checkpoints = {b: "reentrant" for b in blocks}
    plan = w.checkpoint_what_if()
    truth = w.verify_checkpoint()  # the marks really applied in PyTorch: which leaves get no .grad
    assert truth["agree"] and sorted(truth["actual_lost"]) == sorted(plan.lost_names) and plan.lost_names
    state = dict(w.page_state())
    w.close()
    return state, blocks


@pytest.mark.parametrize("width", [1000, 1400])
def test_the_trap_leads_with_the_lost_leaves_and_frames_one(browser: Any, tmp_path: Path, width: int,
                                                            trap: tuple[dict[str, Any], list[str]]) -> None:
    state, _ = trap
    p = MountedPage(browser, tmp_path, {**state, "checkpoint_verified": {}}, viewport=(width + 40, 900), width=width)
    p.js("() => gv.hook.idle()")
    lost = p.js("() => gv.hook.checkpointAnswer().lost.length")
    s = p.js(STATUS_JS)
    assert not s["hidden"] and s["text"].startswith(f"{lost} leaves lose gradient"), s
    assert s["summary"].startswith(s["text"]), s  # the verdict first, the bytes saved after it
    r, g, b = (int(x) for x in s["color"].strip("rgba()").split(",")[:3])
    assert r > 150 and g < 100 and b < 100, s  # the bad colour, not the text colour
    assert s["left"] >= s["lineLeft"] and s["right"] <= s["lineRight"], s  # whole, on the first line
    assert p.js(LOST_IN_VIEW_JS), "the first view shows no lost adapter"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / f"lora-trap-{width}.png"))
    assert not p.errors, p.errors


def test_an_old_verification_is_greyed_and_a_tooltip_follows_the_click(browser: Any, tmp_path: Path,
                                                                       trap: tuple[dict[str, Any], list[str]]) -> None:
    state, blocks = trap
    marks = dict(state["checkpoints"])
    disagree = {"marks": marks, "agree": False, "predicted_lost": ["x"], "actual_lost": [], "error": "",
                "checked": [], "unchecked": [], "predicted_bytes": 10, "measured_bytes": 10}
    p = MountedPage(browser, tmp_path, {**state, "checkpoint_verified": disagree}, viewport=(1440, 900), width=1400)
    p.js("() => gv.hook.idle()")
    banner = p.page.locator("[data-testid=gradviz-checkpoint-verified]")
    assert "gradviz-verified-bad" in (banner.get_attribute("class") or "")  # current marks: red, as it should
    p.page.locator("[data-testid=gradviz-checkpoint-toggle]").click()  # checkpoint mode: a click cycles a mark
    point = p.js("(id) => gv.hook.boxPoint(id)", blocks[-1])
    assert point
    p.page.mouse.move(point["x"], point["y"])
    tip = p.page.locator("[data-testid=gradviz-tooltip]")
    tip.wait_for(state="visible", timeout=5000)
    assert "Checkpointed (reentrant)" in tip.inner_text()
    p.page.mouse.click(point["x"], point["y"])  # reentrant -> off
    assert blocks[-1] not in p.js("() => gv.model.state.checkpoints")
    assert "Checkpointed (reentrant)" not in (tip.inner_text() if tip.is_visible() else "")
    cls = banner.get_attribute("class") or ""
    assert "gradviz-verified-stale" in cls and "gradviz-verified-bad" not in cls, cls
    first = banner.locator("div").first.inner_text()
    assert first.startswith("Stale"), first  # labelled before the old verdict
    assert not p.errors, p.errors

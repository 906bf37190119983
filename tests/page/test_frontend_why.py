"""The details panel's "Why?" row in an exported page (no kernel): a leaf whose gradient a dead ReLU
zeroes shows a Why? button; pressing it shows the answer the kernel's own handler saved ahead
(``gradviz_nb.doctor.why`` on the traced graph), the same text Python gives, and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import SCREENSHOTS
from torch import nn

import gradviz_nb as gv

pytestmark = pytest.mark.browser
browser = pagekit.browser

ROWS_JS = """() => [...document.querySelectorAll('[data-testid=gradviz-details] dt')]
  .map((dt) => [dt.textContent, dt.nextElementSibling.textContent])"""
FOLD_JS = """() => { const panel = document.querySelector('[data-testid=gradviz-details]');
  const dts = [...panel.querySelectorAll('dt')];
  const fix = dts.find((dt) => dt.textContent === '  fix').nextElementSibling.getBoundingClientRect();
  const p = panel.getBoundingClientRect();
  return { facts: panel.querySelector('[data-testid=gradviz-details-facts]').open, fix_bottom: fix.bottom,
           panel_bottom: p.top + panel.clientHeight, width: p.width }; }"""
ANSWERED_JS = """() => { const rows = [...document.querySelectorAll('[data-testid=gradviz-details] dt')];
  const why = rows.find((dt) => dt.textContent === 'why');
  return !!why && why.nextElementSibling.textContent !== '' && why.nextElementSibling.textContent !== 'asking…'
    && !why.nextElementSibling.querySelector('[data-testid=gradviz-why]'); }"""


def test_why_row_shows_the_saved_answer_for_a_zeroed_weight(browser: Any, tmp_path: Path) -> None:
    pytest.importorskip("gradviz_nb.doctor.why")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    with torch.no_grad():
        model[0].bias.fill_(-100.0)  # every ReLU input negative: no gradient reaches layer 0
    with gv.capture(model) as cap:
        loss = model(torch.randn(16, 4)).pow(2).mean()
    loss.backward()
    g = gv.trace(loss, model=model, capture=cap)
    leaf = g.find("0.weight")
    expected = gv.why(g, "0.weight").to_dict()
    assert expected["status"] == "zero" and float(model[0].weight.grad.abs().max()) == 0.0
    path = gv.export_html(g, tmp_path / "why.html", selected=leaf)
    page = browser.new_page(viewport={"width": 1100, "height": 640})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    page.wait_for_function("() => window.gradvizReady !== undefined", timeout=60_000)
    page.evaluate("() => window.gradvizReady")
    button = page.locator("[data-testid=gradviz-why]")
    button.wait_for(timeout=30_000)
    assert button.inner_text() == "Why?"
    asked = "() => window.gradvizModel.sent.filter((m) => m.kind === 'why').length"
    assert page.evaluate(asked) == 0  # asked on press only
    button.click()
    page.wait_for_function(ANSWERED_JS, timeout=30_000)
    rows = dict(page.evaluate(ROWS_JS))
    assert rows["why"].startswith("its gradient is exactly zero")
    assert expected["kind"] in rows["why"]
    assert rows["  cause"] == expected["cause"] and rows["  fix"] == expected["fix"]
    assert page.evaluate(asked) == 1
    # Above the fold: the answer leads the panel (cause and fix before the evidence), the leaf's facts fold
    # away under it, and both cause and fix are inside the panel's visible height without scrolling.
    order = [row[0] for row in page.evaluate(ROWS_JS)]
    assert order[:3] == ["why", "  cause", "  fix"], order
    fold = page.evaluate(FOLD_JS)
    assert fold["facts"] is False, fold
    assert fold["fix_bottom"] <= fold["panel_bottom"] and fold["width"] <= 360, fold
    assert rows.get("  at", "") and not rows["  at"].startswith("n"), rows  # op and module, never "n752"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "details-why.png"))
    # An op has no Why? row; a leaf the export saved no answer for says so.
    reply = page.evaluate("""() => new Promise((done) => {
      window.gradvizModel.on('msg:custom', (m) => { if (m.id === 999) done(m); });
      window.gradvizModel.send({ id: 999, kind: 'why', body: { node: 'nope' } });
    })""")
    assert reply["ok"] and reply["body"] == {"node": "nope", "answer": None, "missing": "not saved in this export"}
    assert errors == []
    page.close()

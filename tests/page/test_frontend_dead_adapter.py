"""A dead adapter is reachable on the page (notebook 04's story, in an exported page with no kernel): its
parameters are in no graph of the loss (a detach cut them off), yet ``gv.Dashboard.select`` of the flagged
adapter selects it on the canvas ("p:<name>"), opens the box its cut is drawn in and centres on the cut;
the details panel names it and leads with "Why?", whose answer is ``gv.why``'s; search finds it by name.
The truth is PyTorch's: after backward the adapter's ``.grad`` is None and the live one's is not."""

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

DEAD = "blocks.1.attn.lora_A.weight"
STATE_JS = """() => {
  const root = document.querySelector('.gradviz-root'), cy = root.__gradviz.cy;
  const sel = cy.$(':selected'), b = sel.nonempty() ? sel.renderedBoundingBox() : null;
  const dts = [...document.querySelectorAll('[data-testid=gradviz-details] dt')];
  return { title: document.querySelector('[data-testid=gradviz-details-title]').textContent,
           selected: window.gradvizModel.get('selected'), key: sel.nonempty() ? sel.id() : '',
           inView: !!b && b.x2 > 0 && b.x1 < cy.width() && b.y2 > 0 && b.y1 < cy.height(),
           rows: dts.map((dt) => [dt.textContent, dt.nextElementSibling.textContent]),
           why: !!document.querySelector('[data-testid=gradviz-why]') };
}"""
ANSWERED_JS = """() => [...document.querySelectorAll('[data-testid=gradviz-details] dt')]
  .some((dt) => dt.textContent === '  cause')"""


class Adapter(nn.Module):
    """A frozen projection with a LoRA pair beside it; ``cut`` is the bug: its output detached."""

    def __init__(self, cut: bool) -> None:
        super().__init__()
        self.base = nn.Linear(8, 8).requires_grad_(False)
        self.lora_A = nn.Linear(8, 2, bias=False)
        self.lora_B = nn.Linear(2, 8, bias=False)
        nn.init.normal_(self.lora_B.weight)
        self.cut = cut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x) + self.lora_B(self.lora_A(x))
        return out.detach() if self.cut else out


class Block(nn.Module):
    def __init__(self, cut: bool) -> None:
        super().__init__()
        self.attn = Adapter(cut)
        self.mlp = nn.Linear(8, 8).requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(False), Block(True)])
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def test_the_dead_adapter_is_selected_shown_searched_and_answered(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Net()
    with gv.capture(model) as cap:
        loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    dead = model.get_parameter(DEAD)
    assert dead.grad is None and model.blocks[0].attn.lora_A.weight.grad is not None  # PyTorch's truth
    dash = gv.Dashboard(model, loss, capture=cap, histograms=False)
    flag = next(f for f in dash.flow.flags if f.kind == "dead-adapter")
    assert flag.target == "blocks.1.attn"
    dash.select(flag.target)  # what a click on its ✖ row does
    assert dash.graph.selected == f"p:{DEAD}"
    expected = gv.why(dash.graph.graph, DEAD)
    assert expected.status == "none"
    path = gv.export_html(dash.graph, tmp_path / "dead.html")
    page = browser.new_page(viewport={"width": 1040, "height": 760})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    page.wait_for_function("() => window.gradvizReady !== undefined", timeout=60_000)
    page.evaluate("() => window.gradvizReady")
    page.wait_for_function("() => document.querySelector('[data-testid=gradviz-details-title]').textContent !== ''",
                           timeout=30_000)
    page.evaluate("async () => document.querySelector('.gradviz-root').__gradviz.idle()")
    s = page.evaluate(STATE_JS)
    assert s["title"] == DEAD and s["selected"] == f"p:{DEAD}", s
    assert s["key"].startswith("g:") and s["inView"], s  # the cut that left it out, on screen
    rows = dict(s["rows"])
    assert rows["outside"].startswith("not in the loss's graph") and "blocks.1.attn" in rows["outside"], rows
    assert s["why"], s
    assert page.evaluate("() => document.querySelector('[data-testid=gradviz-details-facts]').open") is False
    assert "id" not in rows and not any(v.startswith("p:") for v in rows.values()), rows  # no page id in text
    page.locator("[data-testid=gradviz-why]").click()
    page.wait_for_function(ANSWERED_JS, timeout=30_000)
    rows = dict(page.evaluate(STATE_JS)["rows"])
    assert rows["why"].startswith("no gradient (.grad is None)") and rows["  cause"] == expected.cause, rows
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "dead-adapter-why.png"))
    hits = page.evaluate("(q) => document.querySelector('.gradviz-root').__gradviz.search(q)", "lora_A")
    labels = [h["label"] for h in hits]
    assert any(lbl.startswith(DEAD) and "no path to the loss" in lbl for lbl in labels), labels
    assert any(lbl.startswith("blocks.0.attn.lora_A.weight") for lbl in labels), labels  # the live one too
    assert errors == []
    page.close()

"""The stepper's "Run to" menu in the built bundle (headless Chromium, fake anywidget model, as
test_frontend_stepper.py): each rule moves the cursor to the step ``rec.find`` names, frames its node and
shows the rule's text; a rule that never fires says so and leaves the cursor; the module rule reads the
selected box. A "Run to" on a recording of over 2,000 steps (rule + seek + repaint) is measured and printed
(goal <= 100 ms); the test bounds it only loosely, as timings on a loaded machine vary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from test_frontend_stepper import Page
from torch import nn

import gradviz_nb as gv
from gradviz_nb.widgets import page

pytestmark = pytest.mark.browser
browser = pagekit.browser


def run_to(p: Page, rule: str) -> None:
    p.page.locator("[data-testid=gradviz-step-runto]").select_option(rule)
    p.page.wait_for_function("() => gv.el.querySelector('[data-testid=gradviz-step-runtext]').textContent !== ''")


def test_run_to_first_nonfinite_on_over_2000_steps_within_budget(browser: Any, tmp_path: Path) -> None:
    w = [nn.Parameter(torch.full((4,), 0.9)) for _ in range(520)]
    h = torch.ones(4)
    for i, wi in enumerate(w):
        if i == 500:  # sqrt at 0 sends inf in backward; inf * 0 = NaN
            h = torch.sqrt(h * h * torch.tensor([0.0, 1, 1, 1]))
        h = torch.tanh(h * wi + 0.1)
    rec = gv.record_backward(h.sum(), names={f"w{i}": t for i, t in enumerate(w)})
    assert len(rec.steps) >= 2000
    want = rec.find("nonfinite")
    p = Page(browser, tmp_path, {"graph": page.graph(rec.graph), "recording": page.recording(rec)})
    run_to(p, "nonfinite")
    p.page.wait_for_function("(i) => gv.model.get('step') === i", arg=want.index)
    assert p.js("() => gv.el.querySelector('.gradviz-root').dataset.stepNode") == want.node
    assert want.text in p.text("gradviz-step-runtext")
    ms = float(p.js("() => gv.el.querySelector('.gradviz-root').dataset.stepMs"))
    rule_ms = float(p.js("() => gv.el.querySelector('.gradviz-root').dataset.runRuleMs"))
    p.js("() => gv.hook.stepTo(0)")
    seek_ms = float(p.js("() => gv.hook.lastStepMs()"))
    print(f"\nRun to first NaN/Inf on {len(rec.steps)} steps: {ms:.1f} ms (rule + seek + repaint; rule "
          f"{rule_ms:.1f} ms; a plain seek to step 0: {seek_ms:.1f} ms)")
    # The goal (<= 100 ms; 58 ms measured on an idle machine) is a measurement, printed above, not a timed
    # assertion: a loaded machine doubles it. This bound only catches a rule that walks the steps per step.
    assert ms <= 1000
    assert p.errors == []


class Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(3, 3), nn.Tanh()) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x.pow(2).sum()


def test_module_rule_reads_the_selected_box_and_never_hit_says_so(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Blocks()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 3))
    rec = gv.record_backward(loss, model=model, capture=cap)
    data = {"graph": page.graph(rec.graph), "recording": page.recording(rec)}
    box = rec.find(module="blocks.1")
    p = Page(browser, tmp_path, data, selected="blocks.1", expanded=["blocks.1"])
    run_to(p, "module")
    p.page.wait_for_function("(i) => gv.model.get('step') === i", arg=box.index)
    assert box.text in p.text("gradviz-step-runtext")
    q = Page(browser, tmp_path, data)
    run_to(q, "nonfinite")
    assert "never hit" in q.text("gradviz-step-runtext") and q.js("() => gv.model.get('step')") == -1
    assert p.errors == [] and q.errors == []

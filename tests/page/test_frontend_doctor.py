"""The doctor's findings in the built bundle (blank headless Chromium page, fake anywidget model):
listed above the graph, marked on their nodes, and a click reveals the node hidden in a closed box."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import SCREENSHOTS, MountedPage

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.export.html import exported_state

pytestmark = pytest.mark.browser
browser = pagekit.browser


def _diagnosis() -> gv.Diagnosis:
    """GPT-2 (small_test) whose blocks.1 MLP reads its c_fc weight through .data; the head is left out
    of the optimizer."""
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    mlp = model.blocks[1].mlp

    def forward(h: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.linear(h, mlp.c_fc.weight.data, mlp.c_fc.bias)  # the bug
        return mlp.c_proj(torch.nn.functional.gelu(x))

    mlp.forward = forward
    opt = torch.optim.AdamW([p for n, p in model.named_parameters() if n != "ln_f.bias"], lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        gpt2_loss(model, batch=2).backward()
        opt.step()

    return gv.doctor(step, model, opt)


def test_findings_listed_marked_and_revealed_by_a_click(browser: Any, tmp_path: Path) -> None:
    dx = _diagnosis()
    kinds = {(f.kind, f.target) for f in dx.findings}
    assert ("data-access", "blocks.1.mlp.c_fc.weight") in kinds and ("not-in-optimizer", "ln_f.bias") in kinds
    widget = gv.GraphWidget(dx, height=560)
    state = {**exported_state(widget), "expanded": []}  # every box closed: the finding's node is hidden
    p = MountedPage(browser, tmp_path, state, viewport=(1240, 900), width=1200)
    p.page.wait_for_selector("[data-testid=gradviz-findings]:not([hidden])")
    head = p.page.locator("[data-testid=gradviz-findings-head]").inner_text()
    assert head == f"Doctor: {len(dx.findings)} findings (click one to see it)"
    i = next(i for i, f in enumerate(dx.findings) if f.kind == "data-access")
    finding = dx.findings[i]
    assert finding.node and finding.node in state["overlay"]["marks"]
    p.page.locator(f"[data-testid=gradviz-finding-{i}]").click()
    p.page.wait_for_function("(id) => gv.model.get('selected') === id", arg=finding.node)
    assert {"blocks.1", "blocks.1.mlp"} <= set(p.js("() => gv.model.get('expanded')"))
    shown = p.js("(k) => gv.hook.cy.$id(k).length", "n:" + finding.node)
    assert shown == 1
    evidence = p.page.locator(".gradviz-finding-active .gradviz-finding-evidence").inner_text()
    assert evidence.startswith("seen: ") and ".data" in evidence
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.screenshot(path=str(SCREENSHOTS / "doctor_findings.png"))
    assert p.errors == []

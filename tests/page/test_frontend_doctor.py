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


class _LogHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.relu(self.fc(h)))  # log(0) where relu cuts


def _nan_diagnosis() -> gv.Diagnosis:
    """A forward log(0) in module 'head' (the zoo's doctor-nan-origin), and zero_grad called between
    backward and step: a finding about the loop, with no node."""
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("body", torch.nn.Linear(8, 16))
    model.add_module("head", _LogHead())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(3))

    def step() -> None:
        model(x).mean().backward()
        opt.zero_grad()  # the second bug: between backward and step
        opt.step()

    return gv.doctor(step, model, opt)


IN_VIEW_JS = """(k) => {
  const cy = gv.hook.cy, n = cy.$id(k);
  if (n.empty()) return null;
  const b = n.renderedBoundingBox(), w = cy.width(), h = cy.height();
  return { inside: b.x1 >= 0 && b.y1 >= 0 && b.x2 <= w && b.y2 <= h, selected: n.hasClass('selected') || n.selected(),
           nan: n.hasClass('ov-nan'), border: n.style('border-color') };
}"""
LEGEND_NAN_JS = """() => {
  const sw = document.querySelector('[data-testid=gradviz-legend] [data-kind=nan] .gradviz-sw');
  return sw ? getComputedStyle(sw).borderTopColor : null;
}"""


@pytest.mark.parametrize("width", [1000, 1400, 1920])
def test_nan_origin_finding_goes_to_its_node_with_the_legends_mark(browser: Any, tmp_path: Path, width: int) -> None:
    dx = _nan_diagnosis()
    nan = next(f for f in dx.findings if f.kind == "nan-origin")
    assert dx.graph is not None
    g = dx.graph.nx
    log = [n for n, d in g.nodes(data=True) if d["op"] == "LogBackward0"]
    assert nan.target.startswith("aten.log") and nan.node == log[0], (nan, log)  # the op, not its box
    loop = [f for f in dx.findings if not f.node]
    assert loop, [(f.kind, f.node) for f in dx.findings]
    widget = gv.GraphWidget(dx, height=460)
    state = {**exported_state(widget), "expanded": []}  # the Log node hidden in the closed 'head' box
    p = MountedPage(browser, tmp_path, state, viewport=(width + 40, 760), width=width)
    p.page.wait_for_selector("[data-testid=gradviz-findings]:not([hidden])")
    i = dx.findings.index(nan)
    p.page.locator(f"[data-testid=gradviz-finding-{i}]").click()
    p.page.wait_for_function("(id) => gv.model.get('selected') === id", arg=nan.node, timeout=10000)
    p.js("() => gv.hook.idle()")
    seen = p.js(IN_VIEW_JS, "n:" + nan.node)
    assert seen and seen["inside"] and seen["nan"], seen
    # The legend's NaN / Inf swatch is the colour the node is drawn with (magenta).
    legend = str(p.js(LEGEND_NAN_JS)).replace(" ", "")
    assert legend == seen["border"] == "rgb(213,0,249)", (legend, seen)
    # The findings list lies beside or under the graph, never over it.
    findings = p.page.locator("[data-testid=gradviz-findings]").bounding_box()
    canvas = p.page.locator("[data-testid=gradviz-canvas]").bounding_box()
    assert findings and canvas
    assert findings["x"] + findings["width"] <= canvas["x"] + 1 or findings["y"] >= canvas["y"] + canvas["height"] - 1
    assert canvas["width"] >= 480, canvas
    # A finding with no node says where it applies.
    j = dx.findings.index(loop[0])
    applies = p.page.locator(f"[data-testid=gradviz-finding-applies-{j}]")
    text = applies.inner_text()
    assert applies.is_visible() and text.startswith("not on the graph: applies to "), text
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / f"doctor-nan-{width}.png"))
    assert p.errors == []


# The widget's height, and the details panel's: its box and what it holds (title and rows).
HEIGHTS_JS = """() => {
  const root = document.querySelector('.gradviz-root');
  const d = root.querySelector('[data-testid=gradviz-details]');
  const content = d && !d.hidden ? [...d.children].filter((c) => getComputedStyle(c).position !== 'absolute')
    .reduce((s, c) => s + c.offsetHeight, 0) : 0;
  const canvas = root.querySelector('.gradviz-canvas').getBoundingClientRect();
  return { root: root.getBoundingClientRect().height, panel: d && !d.hidden ? d.clientHeight : 0, content,
           under: !!d && !d.hidden && d.getBoundingClientRect().top >= canvas.bottom - 1 };
}"""


@pytest.mark.parametrize("width", [560, 1200])  # 560: the cell of a 1000 px JupyterLab window (details under)
def test_a_finding_click_grows_the_widget_by_what_it_shows_only(browser: Any, tmp_path: Path, width: int) -> None:
    """A click on a finding opens its evidence and the node's details; the widget grows by what they say,
    not by an empty panel: under the canvas the details took 42% of a body that then grew to keep the
    canvas (650 px more in a notebook, most of it empty)."""
    dx = _diagnosis()
    widget = gv.GraphWidget(dx, height=560)
    state = {**exported_state(widget), "expanded": []}
    p = MountedPage(browser, tmp_path, state, viewport=(width + 40, 1400), width=width)
    p.page.wait_for_selector("[data-testid=gradviz-findings]:not([hidden])")
    p.js("async () => { await gv.hook.idle(); }")
    before = p.js(HEIGHTS_JS)
    i = next(i for i, f in enumerate(dx.findings) if f.kind == "data-access")
    p.page.locator(f"[data-testid=gradviz-finding-{i}]").click()
    p.page.wait_for_function("(id) => gv.model.get('selected') === id", arg=dx.findings[i].node)
    p.js("async () => { await gv.hook.idle(); }")
    p.page.wait_for_timeout(300)
    after = p.js(HEIGHTS_JS)
    p.page.screenshot(path=str(SCREENSHOTS / f"doctor_finding_click_{width}.png"))
    grew = after["root"] - before["root"]
    if after["under"]:
        empty = after["panel"] - after["content"]
        assert empty <= 40, f"the details under the canvas are {after['panel']} px for {after['content']} px of rows"
        assert grew <= 320, f"the widget grew by {grew:.0f} px ({before} -> {after})"
    else:
        assert grew <= 120, f"the widget grew by {grew:.0f} px beside the canvas ({before} -> {after})"
    assert p.errors == []

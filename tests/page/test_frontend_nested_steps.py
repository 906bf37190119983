"""The stepper on a reentrant checkpoint, in the built bundle (headless Chromium, fake anywidget model, as
test_frontend_stepper.py): the inner backward PyTorch runs inside ``CheckpointFunction.backward`` shows as
steps inside the checkpointed box, a closed box is marked as running while they run, and no leaf inside is
called cut off (PyTorch gives every one of them a gradient). Also the stop on a loss the forward made NaN
prints the user's source line, as ``gv.find_nonfinite`` names it. Screenshots:
build/screenshots/stepper_nested_closed.png and stepper_nested_open.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import SCREENSHOTS
from test_frontend_breakpoints import run_to
from test_frontend_stepper import Page

import gradviz_nb as gv
from gradviz_nb.widgets import page
from tests.unit.test_backward_forward_origin import WithLog
from tests.unit.test_backward_nested import Net

pytestmark = pytest.mark.browser
browser = pagekit.browser

INSIDE = """([box, node]) => {
  const b = gv.hook.cy.$id(box).boundingBox(), n = gv.hook.cy.$id(node).boundingBox();
  return n.x1 >= b.x1 && n.x2 <= b.x2 && n.y1 >= b.y1 && n.y2 <= b.y2;
}"""


def test_nested_steps_run_inside_the_checkpointed_box(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4)
    truth = Net()
    truth.load_state_dict(model.state_dict())
    truth(x).backward()
    assert all(p.grad is not None for p in truth.parameters())  # PyTorch: every leaf inside gets a gradient
    with gv.capture(model) as cap:
        loss = model(x)
    rec = gv.record_backward(loss, model=model, capture=cap)
    inner = [i for i, s in enumerate(rec.steps) if "/" in s.node]
    assert len(inner) >= 5
    p = Page(browser, tmp_path, {"graph": page.graph(rec.graph), "recording": page.recording(rec)}, height=640)
    label = p.label("c:b")
    assert "12 nodes" in label and "lose" not in label, label  # the nested nodes counted, no false cut
    p.js("(i) => gv.hook.stepTo(i)", inner[1])
    p.js("() => gv.hook.idle()")
    assert p.js("() => gv.el.querySelector('.gradviz-root').dataset.stepNode") == rec.steps[inner[1]].node
    assert "st-run" in p.classes("c:b")  # the closed box runs while its inner backward does
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.screenshot(path=str(SCREENSHOTS / "stepper_nested_closed.png"))

    p.js("() => { gv.model.set('expanded', ['b']); gv.model.save_changes(); }")
    p.js("() => gv.hook.idle()")
    for i in inner:
        node = "n:" + rec.steps[i].node
        p.js("(i) => gv.hook.stepTo(i)", i)
        p.js("() => gv.hook.idle()")
        assert "st-run" in p.classes(node), (i, node)
        assert p.js(INSIDE, ["c:b", node]), f"step {i + 1} ({rec.steps[i].op}) is drawn outside box b"
    assert "st-runbox" in p.classes("c:b")
    # the recomputed block's output feeds the checkpoint node: an edge joins them inside the box
    assert p.js("() => gv.hook.cy.$id('n:n4').incomers('edge').some((e) => e.source().id().startsWith('n:n4/'))")
    p.page.screenshot(path=str(SCREENSHOTS / "stepper_nested_open.png"))
    assert p.errors == []


def test_the_run_to_text_names_the_forward_line(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = WithLog()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4))
    rec = gv.record_backward(loss, model=model, capture=cap)
    assert rec.forward is not None and rec.forward.line
    p = Page(browser, tmp_path, {"graph": page.graph(rec.graph), "recording": page.recording(rec)})
    run_to(p, "nonfinite")
    shown = p.text("gradviz-step-runtext")
    assert rec.find("nonfinite").text in shown and f"at {rec.forward.line}" in shown
    assert p.errors == []

"""End-to-end in a real JupyterLab: a lazy widget gets a box's nodes from the kernel through
anywidget's custom messages when the box is opened, folds its repeated blocks into one stack, and
reveals a node Python selects. The page tests (tests/page/test_frontend_scale.py) cover the same page with
the exported page's stand-in model; this is the real comm."""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.sync_api import Page

from .jupyterlab import JupyterLabServer, LabNotebook
from .test_jupyterlab_widget import _assert_clean_console

CELLS = [
    """\
import json, torch
import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
torch.manual_seed(0)
m = GPT2(GPT2Config(n_layer=8, n_head=2, d_model=32, vocab=101, block_size=16))
with gv.capture(m) as cap:
    loss = gpt2_loss(m, batch=1, seq=8)
w = gv.GraphWidget(loss, model=m, capture=cap, lazy=True, height=480)
print("LAZY", json.dumps([w.lazy, len(w.graph_data["nodes"]), len(w.graph)]))
w""",
    "print('STATE', json.dumps({'expanded': w.expanded, 'unfolded': w.unfolded, 'selected': w.selected}))",
    "target = w.graph.find('blocks.5.mlp.c_fc.weight'); w.selected = target; print('TARGET', json.dumps(target))",
]

# Client point of a drawn element (any key: "f:fold:...", "c:blocks.3", "n:n12").
# The first view may show another part of the graph (the loss): scroll the element into view first, as a
# user would.
POINT = """(r, key) => {
  const cy = r.__gradviz.cy;
  const n = cy.getElementById(key);
  if (n.empty()) return null;
  let p = n.renderedPosition();
  if (p.x < 30 || p.y < 30 || p.x > cy.width() - 30 || p.y > cy.height() - 40) {
    cy.center(n);
    p = n.renderedPosition();
  }
  const c = r.querySelector('.gradviz-canvas').getBoundingClientRect();
  return { x: c.left + p.x, y: c.top + p.y };
}"""


def _click_key(nb: LabNotebook, root: object, key: str) -> None:
    nb.activate_cell(0)
    root.scroll_into_view_if_needed()  # type: ignore[attr-defined]
    point = root.evaluate(POINT, key)  # type: ignore[attr-defined]
    assert point, f"{key} is not drawn"
    nb.click(point)


def test_lazy_widget_loads_boxes_from_the_kernel(
    jupyterlab: JupyterLabServer, lab_page: Page, tmp_path: Path, screenshot_dir: Path
) -> None:
    nb = LabNotebook(jupyterlab, lab_page, jupyterlab.write_notebook("lazy.ipynb", CELLS)).open()
    lazy, sent, total = nb.run_cell_json(0, "LAZY")  # type: ignore[misc]
    assert lazy is True and sent < total / 5, (sent, total)  # the first payload holds few full records
    root = nb.wait_in_output(0, ".gradviz-root")
    nb.wait_in_output(0, ".gradviz-canvas canvas")
    hook = "(r) => r.__gradviz"
    root.evaluate("async (r) => r.__gradviz.idle()")
    assert root.evaluate(hook + ".folded()") == ["fold:blocks.0"]
    assert "blocks.3" not in root.evaluate(hook + ".loaded()")

    # A real click on the "8 x Block" stack unfolds it; the kernel sees `unfolded`.
    _click_key(nb, root, "f:fold:blocks.0")
    nb.poll(lambda: root.evaluate(hook + ".folded()") == [], 10.0, "stack unfolded")
    root.evaluate("async (r) => r.__gradviz.idle()")
    nb.poll(lambda: nb.run_cell_json(1, "STATE")["unfolded"] == ["fold:blocks.0"], 10.0, "unfolded synced")  # type: ignore[index]

    # A real click on blocks.3: the page asks the kernel for its nodes, then draws them.
    before = int(root.evaluate("(r) => r.dataset.visibleNodes"))
    _click_key(nb, root, "c:blocks.3")
    nb.poll(lambda: "blocks.3" in root.evaluate(hook + ".loaded()"), 20.0, "blocks.3 loaded from the kernel")
    root.evaluate("async (r) => r.__gradviz.idle()")
    nb.poll(lambda: int(root.evaluate("(r) => r.dataset.visibleNodes")) > before, 10.0, "blocks.3's nodes drawn")
    state = nb.run_cell_json(1, "STATE")
    assert "blocks.3" in state["expanded"], state  # type: ignore[index]

    # Python selects a weight hidden three boxes deep: the page loads, opens and shows it.
    target = nb.run_cell_json(2, "TARGET")
    nb.poll(lambda: root.evaluate(POINT, f"n:{target}") is not None, 20.0, "selected weight revealed")
    loaded = root.evaluate(hook + ".loaded()")
    assert {"blocks.5", "blocks.5.mlp", "blocks.5.mlp.c_fc"} <= set(loaded), loaded
    details = root.locator("[data-testid=gradviz-details]")
    nb.poll(lambda: "blocks.5.mlp.c_fc.weight" in (details.text_content() or ""), 10.0, "details of the weight")
    lab_page.screenshot(path=str(tmp_path / "lazy.png"))
    shutil.copy(tmp_path / "lazy.png", screenshot_dir / "jupyterlab_lazy.png")
    _assert_clean_console(lab_page)

"""End-to-end in a real JupyterLab: the screenshot suite's "no edge through a box" check after a click
sequence, not only after a full layout. GPT-2's structure (4 blocks, small widths: the boxes and their
nesting are what count): unfold the stack of blocks, open blocks.3, open its attention, close it, close
blocks.3, each by a real mouse click; after every click no drawn edge crosses a node or box it does not
connect (`canvas_checks.EDGE_CROSSING_JS`, headers included), nor the header text of any open box."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import Page

from . import canvas_checks as cc
from .jupyterlab import JupyterLabServer, LabNotebook
from .test_jupyterlab_widget import _assert_clean_console

CELLS = [
    """\
import torch
import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
torch.manual_seed(0)
model = GPT2(GPT2Config(n_layer=4, n_head=2, d_model=32, vocab=101, block_size=16))
with gv.capture(model) as cap:
    loss = gpt2_loss(model)
w = gv.GraphWidget(loss, model=model, capture=cap, height=640)
w""",
]

# Every drawn edge against every open box's header label (Cytoscape's own label box), holders included.
HEADER_CROSSING_JS = (
    "(root, inset) => {\n" + cc.HELPERS_JS + """
  const cy = root.__gradviz.cy;
  const heads = cy.nodes('[kind = "expanded"]').map((n) => [n.id(), n.boundingBox(
    { includeNodes: false, includeEdges: false, includeLabels: true, includeOverlays: false })]);
  const out = [];
  for (const e of cy.edges()) {
    const pts = [e.sourceEndpoint(), ...(e.segmentPoints() || []), e.targetEndpoint()].map((p) => [p.x, p.y]);
    for (const [id, r] of heads) {
      if (!GVCHECK.polylineHitsRect(pts, r, inset)) continue;
      out.push(e.source().id() + ' -> ' + e.target().id() + ' through ' + id);
    }
  }
  return out;
}"""
)

# The centre of the first folded stack on screen, in client coordinates (null: no stack drawn).
FOLDED_POINT_JS = """(r) => {
  const n = r.__gradviz.cy.nodes('[kind = "folded"]').first();
  if (n.empty()) return null;
  const b = n.renderedBoundingBox({ includeLabels: false });
  const c = r.querySelector('.gradviz-canvas').getBoundingClientRect();
  return { x: c.left + (b.x1 + b.x2) / 2, y: c.top + (b.y1 + b.y2) / 2 };
}"""
IDLE_JS = "async (root) => { await root.__gradviz.idle(); return root.dataset.layout; }"


def _click(nb: LabNotebook, root: Any, key: str) -> None:
    """A real click on a box (the folded stack: "stack"; a call: its id), then wait for the view to be drawn."""
    if key == "stack":
        point = root.evaluate(FOLDED_POINT_JS)
    else:
        point = root.evaluate("(r, id) => r.__gradviz.boxPoint(id)", key)
    assert point, f"{key} is not drawn"
    nb.click(point)
    nb.poll(lambda: root.evaluate(IDLE_JS) == "idle", 30.0, f"view drawn after the click on {key}")


def test_no_edge_through_a_box_after_a_click_sequence(
    jupyterlab: JupyterLabServer, lab_page: Page, tmp_path: Path, screenshot_dir: Path
) -> None:
    nb = LabNotebook(jupyterlab, lab_page, jupyterlab.write_notebook("clicks.ipynb", CELLS)).open()
    nb.run_cell(0)
    root = nb.wait_in_output(0, ".gradviz-root")
    nb.wait_in_output(0, ".gradviz-canvas canvas")
    root.evaluate(IDLE_JS)
    nb.activate_cell(0)
    root.scroll_into_view_if_needed()
    steps: list[tuple[str, str]] = [("stack", "unfolded")] if root.evaluate(FOLDED_POINT_JS) else []
    steps += [("blocks.3", "expanded"), ("blocks.3.attn", "expanded"), ("blocks.3.attn", "collapsed"),
              ("blocks.3", "collapsed")]
    seen: list[tuple[str, list[str], list[str]]] = []
    for key, want in steps:
        _click(nb, root, key)
        if want != "unfolded":
            kind = root.evaluate("(r, k) => r.__gradviz.cy.getElementById(k).data('kind')", "c:" + key)
            assert kind == want, (key, kind)
        boxes = cc.edge_crossings(root)
        assert boxes["checked"] > 5, boxes
        crossing = [f"{c['edge']} crosses {c['crossed']}" for c in boxes["crossing"]]
        seen.append((f"{key} {want}", crossing, root.evaluate(HEADER_CROSSING_JS, 1)))
        if key == "blocks.3.attn" and want == "expanded":
            root.screenshot(path=str(screenshot_dir / "jupyterlab_clicks_attn-open.png"))
    assert all(not b and not h for _, b, h in seen), seen
    _assert_clean_console(lab_page)

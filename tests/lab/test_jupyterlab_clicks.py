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

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"

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
w.expanded = []  # the first view opens what fits: start the clicks from every box closed
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
# What a click at a client point reaches: the DOM element, and the canvas element Cytoscape finds there.
AT_POINT_JS = """(root, p) => {
  const el = document.elementFromPoint(p.x, p.y);
  const cy = root.__gradviz.cy;
  const c = root.querySelector('.gradviz-canvas').getBoundingClientRect();
  const m = { x: (p.x - c.left - cy.pan().x) / cy.zoom(), y: (p.y - c.top - cy.pan().y) / cy.zoom() };
  const hit = cy.nodes().filter((n) => { const b = n.boundingBox({ includeLabels: false });
    return m.x >= b.x1 && m.x <= b.x2 && m.y >= b.y1 && m.y <= b.y2; }).map((n) => n.id() + ' ' + n.data('kind'));
  return { point: p, dom: el ? el.className || el.tagName : null, inCanvas: c.toJSON(), hit,
           selected: root.__gradviz.cy.$(':selected').map((n) => n.id()), layout: root.dataset.layout };
}"""
IDLE_JS = "async (root) => { await root.__gradviz.idle(); return root.dataset.layout; }"
# Drawn as wanted ("unfolded": no stack left; else the box's kind) and laid out.
DONE_JS = """async (root, [key, want]) => {
  await root.__gradviz.idle();
  const cy = root.__gradviz.cy;
  const ok = want === 'unfolded' ? cy.nodes('[kind = "folded"]').empty()
    : cy.getElementById('c:' + key).data('kind') === want;
  return ok && root.dataset.layout === 'idle';
}"""


def _click(nb: LabNotebook, root: Any, key: str, want: str) -> None:
    """A real click on a box (the folded stack: "stack"; a call: its id), then wait until it is drawn `want`."""
    if key == "stack":
        point = root.evaluate(FOLDED_POINT_JS)
    else:
        point = root.evaluate("(r, id) => r.__gradviz.boxPoint(id)", key)
    assert point, f"{key} is not drawn"
    nb.click(point)
    try:
        nb.poll(lambda: root.evaluate(DONE_JS, [key, want]), 30.0, f"{key} {want} after the click")
    except TimeoutError as e:
        root.page.screenshot(path=str(SHOTS / f"jupyterlab_clicks_{key}-{want}-failed.png"))
        raise AssertionError(f"{e}; at the click point: {root.evaluate(AT_POINT_JS, point)}") from e


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
        _click(nb, root, key, want)
        boxes = cc.edge_crossings(root)
        assert boxes["checked"] > 5, boxes
        crossing = [f"{c['edge']} crosses {c['crossed']}" for c in boxes["crossing"]]
        seen.append((f"{key} {want}", crossing, root.evaluate(HEADER_CROSSING_JS, 1)))
        if key == "blocks.3.attn" and want == "expanded":
            root.screenshot(path=str(screenshot_dir / "jupyterlab_clicks_attn-open.png"))
    assert all(not b and not h for _, b, h in seen), seen
    _assert_clean_console(lab_page)

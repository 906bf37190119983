"""Incremental re-layout in the page: expanding one block lays out only that block; everything else
keeps its place up to the pure shift that makes room (js/src/view/incremental.ts), and collapsing it
again puts the picture back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from lab.canvas_checks import EDGE_CROSSING_JS, HELPERS_JS
from pagekit import MountedPage

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.widgets import page

pytestmark = pytest.mark.browser
browser = pagekit.browser

# BOX_PADDING.top - BOX_PADDING.side (js/src/view/elkgraph.ts): an open box is drawn this much below
# the top of the room the layout keeps for it (its header label sits there).
TRIM = 34 - 12
EPS = 0.05

Rect = tuple[float, float, float, float]

SNAPSHOT = """() => { const out = {}; window.gv.hook.cy.nodes().forEach((n) => { const p = n.position();
  out[n.id()] = [p.x, p.y, n.data('w'), n.data('h'), n.data('kind'), n.data('box') || null]; }); return out; }"""


@pytest.fixture(scope="module")
def payload() -> dict[str, Any]:
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=4, n_head=2, d_model=32, vocab=101, block_size=16))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    return page.graph(gv.trace(loss, model=model, capture=cap))


def room(v: list[Any]) -> Rect:
    """The rectangle the layout keeps for an element (an open box with its header room)."""
    x, y, w, h, kind = v[:5]
    r = (x - w / 2, y - h / 2, x + w / 2, y + h / 2)
    return (r[0], r[1] - TRIM, r[2], r[3]) if kind == "expanded" else r


def rule(r: Rect, old: Rect, new: Rect) -> tuple[float, float]:
    """The pure shift of an element beside the region (incremental.ts offsetFor)."""
    if r[3] <= old[1] + 0.5:
        return (0.0, 0.0)
    dx = 0.0
    if r[2] <= old[0] + 0.5:
        dx = new[0] - old[0]
    elif r[0] >= old[2] - 0.5:
        dx = new[2] - old[2]
    return (dx, new[3] - old[3] if r[1] >= old[3] - 0.5 else 0.0)


def top_of(key: str, snap: dict[str, list[Any]]) -> str:
    while snap[key][5]:
        key = snap[key][5]
    return key


def union(rects: list[Rect]) -> Rect:
    return (min(r[0] for r in rects), min(r[1] for r in rects), max(r[2] for r in rects), max(r[3] for r in rects))


def assert_pure_shift(before: dict[str, list[Any]], after: dict[str, list[Any]]) -> int:
    """The region (top-level items that changed) kept its top-centre; every other element moved by
    the rule of its top-level ancestor (not re-laid out). Returns how many of them moved."""
    removed = {k for k, v in before.items() if not v[5] and (k not in after or after[k][4] != v[4])}
    added = {k for k, v in after.items() if not v[5] and (k not in before or before[k][4] != v[4])}
    assert removed and added
    old = union([room(before[k]) for k in removed])
    new = union([room(after[k]) for k in added])
    assert abs((old[0] + old[2]) / 2 - (new[0] + new[2]) / 2) < EPS and abs(old[1] - new[1]) < EPS
    moved = 0
    for key, v in before.items():
        if top_of(key, before) in removed:
            continue
        assert key in after and after[key][4] == v[4], key
        want = rule(room(before[top_of(key, before)]), old, new)
        got = (after[key][0] - v[0], after[key][1] - v[1])
        assert abs(got[0] - want[0]) < EPS and abs(got[1] - want[1]) < EPS, (key, got, want)
        moved += abs(got[0]) + abs(got[1]) > EPS
    return moved


def assert_no_leaf_overlap(snap: dict[str, list[Any]]) -> None:
    rects = sorted((room(v), k) for k, v in snap.items() if v[4] != "expanded")
    for i, (a, ka) in enumerate(rects):
        for b, kb in rects[i + 1 :]:
            if b[0] >= a[2] - 0.5:
                break
            assert not (a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5), (ka, kb)


def inside(inner: Rect, outer: Rect) -> bool:
    return all(inner[i] >= outer[i] - 0.5 for i in (0, 1)) and all(inner[i] <= outer[i] + 0.5 for i in (2, 3))


def test_expand_moves_the_rest_by_a_pure_shift_and_collapse_restores(
    browser: Any, tmp_path: Path, payload: dict[str, Any]
) -> None:
    page = MountedPage(browser, tmp_path, {"graph_data": payload, "height": 700})
    root = "document.querySelector('.gradviz-root')"
    # index.ts exposes GraphView.lastLayoutIncremental as data-layout-incremental (when it does).
    incremental = f"{root}.dataset.layoutIncremental"
    block = "blocks.1"
    region = "c:" + block
    before = page.js(SNAPSHOT)
    folded = [k for k, v in before.items() if v[4] == "folded"]
    if folded:
        # Repeated blocks start as one stacked box: unfolding it is incremental too.
        (stack,) = folded
        page.js("(async () => { const h = window.gv.hook; await h.unfold(h.folded()[0]); })()")
        assert page.js(incremental) in (None, "true")
        unfolded = page.js(SNAPSHOT)
        assert stack not in unfolded
        assert_pure_shift(before, unfolded)
        assert_no_leaf_overlap(unfolded)
        before = unfolded
    assert before[region][4] == "collapsed"
    anchor = page.js(
        f"(() => {{ const b = window.gv.hook.cy.getElementById('{region}').renderedBoundingBox("
        "{includeLabels: false}); return [(b.x1 + b.x2) / 2, b.y1]; })()"
    )
    page.js(f"window.gv.hook.expand('{block}')")
    assert page.js(incremental) in (None, "true")
    after = page.js(SNAPSHOT)
    assert after[region][4] == "expanded"

    # Untouched elements: the pure shift (not re-laid out); some below really moved.
    assert assert_pure_shift(before, after) > 3
    # New elements sit inside the opened box (as drawn, and as laid out).
    added = [k for k in after if k not in before]
    assert added
    for key in added:
        assert top_of(key, after) == region and inside(room(after[key]), room(after[region])), key
    assert_no_leaf_overlap(after)
    # The clicked box kept its screen point (top-centre).
    now = page.js(
        f"(() => {{ const b = window.gv.hook.cy.getElementById('{region}').renderedBoundingBox("
        "{includeLabels: false}); return [(b.x1 + b.x2) / 2, b.y1]; })()"
    )
    assert abs(now[0] - anchor[0]) < 1 and abs(now[1] - anchor[1]) < 1

    # Collapse: incremental again, and everything back where it was before the expand.
    page.js(f"window.gv.hook.collapse('{block}')")
    assert page.js(incremental) in (None, "true")
    again = page.js(SNAPSHOT)
    assert set(again) == set(before)
    for key, v in before.items():
        assert abs(again[key][0] - v[0]) < EPS and abs(again[key][1] - v[1]) < EPS, key
    assert_no_leaf_overlap(again)

    # A nested expand inside the open block: the block refits around its members, siblings make room.
    page.js(f"window.gv.hook.expand('{block}')")
    outer = page.js(SNAPSHOT)
    inner_box = next(k for k, v in outer.items() if v[5] == region and v[4] == "collapsed" and v[3] > 0)
    page.js(f"window.gv.hook.expand('{inner_box[2:]}')")
    assert page.js(incremental) in (None, "true")
    nested = page.js(SNAPSHOT)
    assert_no_leaf_overlap(nested)
    for key, v in nested.items():
        if v[5]:
            assert inside(room(v), room(nested[v[5]])), key
    assert page.errors == []


# Every drawn edge against every open box's header label (Cytoscape's own label box), holders included:
# an edge entering a box goes in beside its header, never through the text.
HEADER_CROSSING_JS = """(inset) => {
  const cy = window.gv.hook.cy;
  const out = [];
  const heads = cy.nodes('[kind = "expanded"]').map((n) => [n.id(), n.boundingBox(
    { includeNodes: false, includeEdges: false, includeLabels: true, includeOverlays: false })]);
  for (const e of cy.edges()) {
    const pts = [e.sourceEndpoint(), ...(e.segmentPoints() || []), e.targetEndpoint()].map((p) => [p.x, p.y]);
    for (const [id, r] of heads) {
      if (!GVCHECK.polylineHitsRect(pts, r, inset)) continue;
      out.push(e.source().id() + ' -> ' + e.target().id() + ' through ' + id);
    }
  }
  return { edges: cy.edges().length, heads: heads.length, crossing: out };
}"""


def _crossings(page: MountedPage) -> tuple[list[str], list[str]]:
    """(edges through a box they do not connect, as the screenshot suite measures it; edges through a header)."""
    boxes = page.js(f"(inset) => ({EDGE_CROSSING_JS})(document.querySelector('.gradviz-root'), inset)", 1)
    heads = page.js(f"(inset) => {{ {HELPERS_JS}; return ({HEADER_CROSSING_JS})(inset); }}", 1)
    assert boxes["checked"] > 5 and heads["edges"] > 5
    return [f"{c['edge']} crosses {c['crossed']}" for c in boxes["crossing"]], heads["crossing"]


def _click_box(page: MountedPage, call: str) -> None:
    point = page.js("(id) => gv.hook.boxPoint(id)", call)
    assert point, f"{call} is not on screen"
    page.page.mouse.click(point["x"], point["y"])
    page.page.wait_for_function("() => document.querySelector('.gradviz-root').dataset.layout === 'idle'")
    page.js("() => gv.hook.idle()")


def test_no_edge_through_a_box_or_header_after_clicks(browser: Any, tmp_path: Path, payload: dict[str, Any]) -> None:
    """Open blocks.3 by click, then its attention, then close both: after every click no edge crosses a box it
    does not connect, nor any open box's header text (incremental placement and full layouts alike)."""
    folds = [f["id"] for f in payload.get("folds", [])]
    page = MountedPage(browser, tmp_path, {"graph_data": payload, "unfolded": folds, "height": 700})
    seen = []
    for call, opens in (("blocks.3", True), ("blocks.3.attn", True), ("blocks.3.attn", False), ("blocks.3", False)):
        _click_box(page, call)
        kind = page.js("(k) => gv.hook.cy.getElementById(k).data('kind')", "c:" + call)
        assert kind == ("expanded" if opens else "collapsed"), (call, kind)
        boxes, heads = _crossings(page)
        seen.append((call, opens, boxes, heads))
    _click_box(page, "blocks.3")
    _click_box(page, "blocks.3.attn")
    page.page.click("[data-testid=gradviz-more]")  # the toolbar's "⋯" menu
    page.page.click("[data-testid=gradviz-relayout]")  # a full layout: ELK's routes keep clear of headers too
    page.page.wait_for_function("() => document.querySelector('.gradviz-root').dataset.layoutIncremental === 'false'")
    page.js("() => gv.hook.idle()")
    seen.append(("re-layout", True, *_crossings(page)))
    assert all(not b and not h for _, _, b, h in seen), seen
    assert page.errors == []


# A DOM click on a toolbar button, then: was the spinner up right after the click (synchronously), and at
# the first animation frame (what the first frame painted after the click shows); the time to the view drawn.
CLICK_SPINNER_JS = """async (testid) => {
  const root = document.querySelector('.gradviz-root');
  const spinner = root.querySelector('[data-testid=gradviz-spinner]');
  let atFrame = null;
  requestAnimationFrame(() => { atFrame = !spinner.hidden; });
  const t0 = performance.now();
  // A toolbar button, or "reveal:<id>" (a search pick): bring that node or box on screen.
  const done = testid.startsWith('reveal:') ? gv.hook.reveal(testid.slice(7))
    : root.querySelector(`[data-testid=${testid}]`).click();
  const atClick = !spinner.hidden;
  await done;
  await gv.hook.idle();
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return { atClick, atFrame, ms: performance.now() - t0, after: !spinner.hidden, items: gv.hook.cy.nodes().length };
}"""


@pytest.fixture(scope="module")
def big_payload() -> dict[str, Any]:
    """GPT-2's structure with 12 blocks (small widths: the graph is what counts): about 700 nodes open."""
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=12, n_head=2, d_model=32, vocab=101, block_size=16))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    return page.graph(gv.trace(loss, model=model, capture=cap))


def test_spinner_shows_from_the_click_of_expand_and_collapse_all(browser: Any, tmp_path: Path,
                                                                  big_payload: dict[str, Any]) -> None:
    """Expand all, Collapse all and a search pick's reveal on a big graph: the spinner is up in the first frame
    after the click (set before any work is scheduled), and down once the view is drawn."""
    p = MountedPage(browser, tmp_path, {"graph_data": big_payload, "height": 700})
    expand = p.js(CLICK_SPINNER_JS, "gradviz-expand-all")
    assert expand["items"] > 500, expand
    collapse = p.js(CLICK_SPINNER_JS, "gradviz-collapse-all")
    reveal = p.js(CLICK_SPINNER_JS, "reveal:blocks.7.mlp")
    assert p.js("() => gv.hook.cy.getElementById('c:blocks.7.mlp').nonempty()")
    print(f"\nExpand all {expand['ms']:.0f} ms, Collapse all {collapse['ms']:.0f} ms, reveal {reveal['ms']:.0f} ms"
          f" ({expand['items']} nodes)")
    for r in (expand, collapse, reveal):
        assert r["atClick"] and r["atFrame"] and not r["after"], r
    assert p.errors == []

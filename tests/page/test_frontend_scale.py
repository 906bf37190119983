"""Big graphs in the built bundle (headless Chromium, the fake model of exported pages):

- lazy mode: a page given the skeleton (``LazyGraph.skeleton``) asks for call contents as boxes open,
  the fake model answers from ``LazyGraph.all_chunks()``, and after the same expansions it draws
  exactly what the eager page draws (element ids, kinds, labels, edges);
- folding: GPT-2's six identical blocks are one stacked box; a real click unfolds it;
- search: typing + Enter, or a click on a result, reveals (loads, opens, unfolds), selects and centres;
  ``selected`` set from Python on a hidden node reveals it too;
- expand-all past the old 3,000-item cap is drawn (the big view); the view cap (100,000 items, lowered for
  the test) refuses an expand past it; a flat first view past the old 9,000-item cap is drawn and a
  search pick reveals its match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import SCREENSHOTS, MountedPage
from test_frontend_bundle import synthetic_payload

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.widgets import page
from gradviz_nb.widgets.page.lazy import LazyGraph

pytestmark = pytest.mark.browser
browser = pagekit.browser  # the module-scoped headless Chromium fixture

# Drawn elements, comparable across pages: nodes (id, kind, label), edges (ends, tensor count).
DRAWN = """() => ({
  nodes: gv.hook.cy.nodes().map((n) => [n.id(), n.data('kind'), n.data('label')]).sort(),
  edges: gv.hook.cy.edges().map((e) => [e.data('source'), e.data('target'), e.data('count')]).sort(),
})"""


@pytest.fixture(scope="module")
def gpt2() -> Any:
    """GPT-2 with 6 layers of width 32, traced with capture."""
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=6, n_head=4, d_model=32, vocab=101, block_size=16)
    model = GPT2(cfg)
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    return gv.trace(loss, model=model, capture=cap)


def state(payload: dict[str, Any], **traits: Any) -> dict[str, Any]:
    return {"graph_data": payload, "expanded": [], "unfolded": [], "selected": "", "height": 700,
            "toggles": {"detach": [], "freeze": []}, "verified": {}, "can_verify": False, **traits}


class Page(MountedPage):
    def __init__(
        self, browser: Any, tmp_path: Path, payload: dict[str, Any], chunks: Any = None, **traits: Any
    ) -> None:
        super().__init__(browser, tmp_path, state(payload, **traits), chunks=chunks)

    def drawn(self) -> dict[str, Any]:
        drawn: dict[str, Any] = self.js(DRAWN)
        return drawn

    def message(self) -> str:
        return str(self.page.locator("[data-testid=gradviz-message]").inner_text())

    def point(self, key: str) -> dict[str, float]:
        """Client coordinates of a drawn element's centre."""
        point: dict[str, float] | None = self.js(
            "(k) => { const n = gv.hook.cy.$id(k); if (n.empty()) return null; const r = gv.hook.cy.container()"
            ".getBoundingClientRect(); const p = n.renderedPosition(); return {x: r.left + p.x, y: r.top + p.y}; }",
            key,
        )
        assert point, f"{key} is not drawn"
        return point

    def click_key(self, key: str) -> None:
        point = self.point(key)
        self.page.mouse.click(point["x"], point["y"])

    def search(self, text: str) -> list[str]:
        box = self.page.locator("[data-testid=gradviz-search]")
        box.fill(text)
        results = self.page.locator("[data-testid=gradviz-search-results]")
        results.locator(".gradviz-search-hit").first.wait_for()
        return [str(t) for t in results.locator(".gradviz-search-hit").all_inner_texts()]


def test_lazy_view_equals_eager_view(browser: Any, tmp_path: Path, gpt2: Any) -> None:
    eager = page.graph(gpt2)
    lazy = LazyGraph(gpt2)
    skeleton = lazy.skeleton()
    assert skeleton["loaded"] == [""] and len(skeleton["nodes"]) < len(eager["nodes"])
    steps = [("unfold", "fold:blocks.0"), ("expand", "blocks.2"), ("expand", "blocks.2.attn"), ("expand", "ln_f"),
             ("expand", "blocks.4.mlp"), ("collapse", "blocks.2.attn")]
    pages = {"eager": Page(browser, tmp_path, eager), "lazy": Page(browser, tmp_path, skeleton, lazy.all_chunks())}
    for p in pages.values():
        assert p.js("() => gv.hook.folded()") == ["fold:blocks.0"]
        for verb, arg in steps:
            p.js(f"(a) => gv.hook.{verb}(a)", arg)
    e, z = pages["eager"], pages["lazy"]
    assert z.drawn() == e.drawn()
    assert z.js("() => gv.model.state.expanded") == e.js("() => gv.model.state.expanded")
    assert z.js("() => gv.model.state.unfolded") == ["fold:blocks.0"]
    assert set(z.js("() => gv.hook.loaded()")) == {"", "blocks.2", "blocks.2.attn", "ln_f", "blocks.4", "blocks.4.mlp"}
    assert [m["body"]["calls"] for m in z.js("() => gv.model.sent") if m.get("kind") == "load"] == [
        ["blocks.2"], ["blocks.2.attn"], ["ln_f"], ["blocks.4", "blocks.4.mlp"]]
    # Details of a loaded node show the full record, as on the eager page.
    node = next(n for n in eager["nodes"] if n["call"] == "blocks.4")
    details = []
    for p in (e, z):
        p.js("(id) => gv.model.set('selected', id)", node["id"])
        details.append(p.page.locator("[data-testid=gradviz-details]").inner_text())
    assert details[0] == details[1] and "requires_grad" in details[0]
    z.page.screenshot(path=str(SCREENSHOTS / "scale_lazy.png"))
    assert e.errors == [] and z.errors == []


def test_lazy_page_without_answers_says_so_and_stays_closed(browser: Any, tmp_path: Path, gpt2: Any) -> None:
    lazy = LazyGraph(gpt2)
    p = Page(browser, tmp_path, lazy.skeleton(), {"": lazy.chunks([""])[0]})  # knows the top level only
    p.js("() => gv.hook.unfold('fold:blocks.0')")
    before = p.drawn()
    p.js("() => gv.hook.expand('blocks.3')")
    assert "Could not load the contents of blocks.3" in p.message()
    assert p.drawn() == before
    assert p.js("() => gv.model.state.expanded") == []
    assert p.page.locator("[data-testid=gradviz-spinner]").is_hidden()


def test_folded_stack_is_one_box_and_a_click_unfolds_it(browser: Any, tmp_path: Path, gpt2: Any) -> None:
    p = Page(browser, tmp_path, page.graph(gpt2))
    stack = p.js("() => { const n = gv.hook.cy.$id('f:fold:blocks.0'); return [n.data('kind'), n.data('label')]; }")
    assert stack[0] == "folded"
    assert stack[1].splitlines()[:2] == ["▸ 6 × Block", "blocks.0 … blocks.5"]
    assert p.js("() => gv.hook.cy.nodes().filter((n) => n.id().startsWith('c:blocks.')).length") == 0
    assert p.js("() => gv.hook.visibleCounts().folded") == 1
    assert p.js("() => gv.hook.cy.$id('f:fold:blocks.0').connectedEdges().length") >= 2  # edges run through it
    box = p.point("f:fold:blocks.0")
    p.page.mouse.move(box["x"], box["y"])
    tooltip = p.page.locator("[data-testid=gradviz-tooltip]")
    tooltip.wait_for()
    assert tooltip.inner_text().startswith("6 calls of Block (blocks.0 … blocks.5), 258 nodes in all")
    p.page.mouse.move(5, 5)
    svg = p.js("() => gv.hook.toSVG()")
    assert 'id="f:fold:blocks.0"' in svg and "6 × Block" in svg
    p.page.screenshot(path=str(SCREENSHOTS / "scale_folded.png"))
    p.js("() => gv.hook.setWhatIfMode(true)")  # in what-if mode too, a click on a stack unfolds it
    p.click_key("f:fold:blocks.0")
    p.js("() => gv.hook.idle()")
    assert p.js("() => gv.model.state.unfolded") == ["fold:blocks.0"]
    assert p.js("() => gv.model.state.toggles") == {"detach": [], "freeze": []}
    assert p.js("() => gv.hook.folded()") == []
    kinds = p.js("() => gv.hook.cy.nodes().filter((n) => /^c:blocks\\.\\d$/.test(n.id())).map((n) => n.data('kind'))")
    assert kinds == ["collapsed"] * 6
    # Re-layout: the same elements laid out afresh, the zoom kept.
    before, zoom = p.drawn(), p.js("() => gv.hook.cy.zoom()")
    p.page.click("[data-testid=gradviz-more]")  # the toolbar's "⋯" menu
    p.page.click("[data-testid=gradviz-relayout]")
    p.js("() => gv.hook.idle()")
    assert p.drawn() == before and p.js("() => gv.hook.cy.zoom()") == zoom
    # Collapse all folds the stack again.
    p.js("() => gv.hook.setWhatIfMode(false)")
    p.js("() => gv.hook.expand('blocks.1')")
    p.page.click("[data-testid=gradviz-more]")  # the toolbar's "⋯" menu
    p.page.click("[data-testid=gradviz-collapse-all]")
    p.js("() => gv.hook.idle()")
    assert p.js("() => gv.model.state.unfolded") == []
    assert p.js("() => gv.hook.folded()") == ["fold:blocks.0"]
    assert p.errors == []


def test_search_reveals_selects_and_centres(browser: Any, tmp_path: Path, gpt2: Any) -> None:
    lazy = LazyGraph(gpt2)
    p = Page(browser, tmp_path, lazy.skeleton(), lazy.all_chunks())
    hits = p.search("LN_F")
    assert hits[0] == "ln_f · LayerNorm" and any(h.startswith("ln_f.weight") for h in hits)
    p.page.keyboard.press("Enter")
    p.js("() => gv.hook.idle()")
    assert p.js("() => gv.model.state.selected") == "ln_f"
    assert p.js("() => gv.hook.cy.$id('c:ln_f').selected()")
    # A leaf deep inside a folded block: loaded, opened, unfolded, selected, centred at 1:1 or closer.
    hits = p.search("blocks.3.attn.c_attn.weight")
    leaf = next(n for n in page.graph(gpt2)["nodes"] if "blocks.3.attn.c_attn.weight" in n["names"])
    p.page.locator("[data-testid=gradviz-search-results] .gradviz-search-hit").first.click()
    p.js("() => gv.hook.idle()")
    assert p.js("() => gv.model.state.selected") == leaf["id"]
    assert p.js("() => gv.model.state.unfolded") == ["fold:blocks.0"]
    assert {"blocks.3", "blocks.3.attn", "blocks.3.attn.c_attn"} <= set(p.js("() => gv.model.state.expanded"))
    view = p.js(
        "(k) => { const cy = gv.hook.cy, n = cy.$id(k), p = n.renderedPosition();"
        " return {zoom: cy.zoom(), dx: p.x - cy.width() / 2, dy: p.y - cy.height() / 2}; }",
        "n:" + leaf["id"],
    )
    assert view["zoom"] >= 1 and abs(view["dx"]) < 2 and abs(view["dy"]) < 2
    # Escape clears; Python selecting a hidden node reveals it.
    p.page.locator("[data-testid=gradviz-search]").press("Escape")
    assert p.page.locator("[data-testid=gradviz-search-results]").is_hidden()
    hidden = next(n for n in page.graph(gpt2)["nodes"] if n["call"] == "blocks.5.mlp.c_fc")
    p.js("(id) => gv.model.set('selected', id)", hidden["id"])
    p.js("() => gv.hook.idle()")
    assert p.js("(k) => gv.hook.cy.$id(k).selected()", "n:" + hidden["id"])
    assert p.js("() => gv.hook.search('c_fc.weight').length") == 6
    assert p.errors == []


def test_expand_all_past_the_old_cap_is_drawn(browser: Any, tmp_path: Path) -> None:
    """Expand all on 5,202 nodes in 200 boxes, refused at the old 3,000-item cap, is drawn by the big view
    (view/bigview/): every node and box, the members of the open box in view mounted with their labels."""
    payload = synthetic_payload(n_blocks=200, ops_per_block=17)
    p = Page(browser, tmp_path, payload)
    p.page.click("[data-testid=gradviz-more]")  # the toolbar's "⋯" menu
    p.page.click("[data-testid=gradviz-expand-all]")
    p.js("() => gv.hook.idle()")
    counts = p.js("() => gv.hook.visibleCounts()")
    assert counts["nodes"] == len(payload["nodes"]) and counts["expanded"] == len(payload["calls"]), counts
    assert "would draw" not in p.message()
    assert p.js("() => document.querySelector('.gradviz-root').dataset.bigView") == "true"
    p.page.wait_for_function("() => gv.hook.cy.nodes('[kind = \"op\"]').length > 5")  # mounted once settled
    assert len(p.js("() => gv.model.state.expanded")) == len(payload["calls"])
    assert p.errors == []


def test_cap_refuses_expand_all(browser: Any, tmp_path: Path) -> None:
    payload = synthetic_payload(n_blocks=200, ops_per_block=17)
    p = Page(browser, tmp_path, payload)
    p.js("() => { window.gradvizViewCap = 3000; }")  # the refusal, tested at a cap this graph passes
    before = p.js("() => gv.hook.visibleCounts()")
    p.page.click("[data-testid=gradviz-more]")  # the toolbar's "⋯" menu
    p.page.click("[data-testid=gradviz-expand-all]")
    p.js("() => gv.hook.idle()")
    items = len(payload["nodes"]) + len(payload["calls"])  # every node and every (open) box
    assert p.message() == f"Expand all would draw {items:,} items (limit 3,000): collapse other boxes or use search."
    assert p.js("() => gv.hook.visibleCounts()") == before
    assert p.js("() => gv.model.state.expanded") == []
    # One more open box past the cap is refused too, saying which.
    blocks = [c["id"] for c in payload["calls"]]
    per_block = sum(1 for n in payload["nodes"] if n["call"] == "blocks.0")
    top = sum(1 for n in payload["nodes"] if n["call"] == "")
    k = (3000 - top - len(blocks)) // per_block  # items(k) = top + boxes + k * members <= 3000 < items(k + 1)
    p.js("(e) => gv.model.set('expanded', e)", blocks[:k])
    p.js("() => gv.hook.idle()")
    counts = p.js("() => gv.hook.visibleCounts()")
    assert counts["nodes"] + counts["collapsed"] + counts["expanded"] == top + len(blocks) + k * per_block
    p.js("(b) => gv.hook.expand(b)", blocks[k])
    assert p.message() == (f"Opening {blocks[k]} would draw {top + len(blocks) + (k + 1) * per_block:,} items "
                           "(limit 3,000): collapse other boxes or use search.")
    assert p.js("() => gv.model.state.expanded") == blocks[:k]
    p.page.click("[data-testid=gradviz-more]")  # the toolbar's "⋯" menu
    p.page.click("[data-testid=gradviz-collapse-all]")
    p.js("() => gv.hook.idle()")
    # Python asking for too much is refused the same way, and the trait is set back.
    p.js("(e) => gv.model.set('expanded', e)", [c["id"] for c in payload["calls"]])
    p.js("() => gv.hook.idle()")
    assert "would draw" in p.message()
    assert p.js("() => gv.model.state.expanded") == []
    assert p.errors == []


def test_flat_first_view_past_the_old_cap_is_drawn_and_search_reveals(browser: Any, tmp_path: Path) -> None:
    # Past 9,000 items a first view used to be left undrawn; the big view (js/src/view/bigview/) draws it.
    payload = synthetic_payload(n_blocks=400, ops_per_block=17, with_calls=False)
    n = len(payload["nodes"])
    assert n > 9000
    p = Page(browser, tmp_path, payload)
    root = "document.querySelector('.gradviz-root').dataset"
    assert p.js(f"() => {root}.bigView") == "true" and int(p.js(f"() => {root}.visibleNodes")) == n
    p.search("blocks.200.w4")
    p.page.keyboard.press("Enter")
    p.js("() => gv.hook.idle()")
    leaf = next(x["id"] for x in payload["nodes"] if x["names"] == ["blocks.200.w4"])
    assert p.js("() => gv.model.state.selected") == leaf
    assert p.js("() => gv.hook.cy.$(':selected').map((e) => e.id())") == [f"n:{leaf}"]
    assert p.errors == []


def test_20k_node_lazy_graph_unfolds_and_expands_without_freezing(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=470, n_head=2, d_model=8, vocab=101, block_size=16))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    lazy = LazyGraph(gv.trace(loss, model=model, capture=cap))
    skeleton = lazy.skeleton()
    assert len(skeleton["wiring"]["ids"]) > 20_000
    p = Page(browser, tmp_path, skeleton, lazy.all_chunks())
    assert p.js("() => gv.hook.folded()") == ["fold:blocks.0"]
    # A heartbeat every 20 ms: the longest gap is the longest the main thread did not answer.
    p.js("() => { window.gaps = []; let last = performance.now(); window.beat = setInterval(() => {"
         " const t = performance.now(); gaps.push(t - last); last = t; }, 20); }")
    timings = p.js(
        "async () => { const t0 = performance.now(); await gv.hook.unfold('fold:blocks.0');"
        " const t1 = performance.now(); await gv.hook.expand('blocks.235'); const t2 = performance.now();"
        " return {unfold: t1 - t0, expand: t2 - t1}; }"
    )
    worst = p.js("() => { clearInterval(window.beat); return Math.max(0, ...window.gaps); }")
    print(f"\n20k-node lazy GPT-2: unfold 470 blocks {timings['unfold']:.0f} ms, expand blocks.235 "
          f"{timings['expand']:.0f} ms, longest main-thread stall {worst:.0f} ms")
    assert p.js("() => gv.hook.visibleCounts().collapsed") >= 470
    assert p.js("() => gv.hook.cy.$id('c:blocks.235').data('kind')") == "expanded"
    assert "blocks.235" in p.js("() => gv.hook.loaded()")
    assert worst < 3000, f"main thread blocked for {worst:.0f} ms"
    assert p.errors == []

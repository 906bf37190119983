"""What-if in the built bundle, in a blank headless Chromium page with a fake anywidget model.

Real mouse clicks switch on what-if mode and toggle a tensor (edge), an op, a leaf and module boxes;
the synced ``toggles`` trait, the lost / pruned / cut marks (read through ``__gradviz.whatIf()`` and
Cytoscape classes), Reset, the ``verified`` banner and ghost tensors are checked.

``fixtures/whatif_ghosts.json`` is ``page.graph(gv.trace(loss, model=m, capture=cap))`` of::

    enc (fc1 -> relu -> fc2) -> chunk(2) -> cat -> + frozen(h.detach()) -> head -> pow -> mean
    with m.frozen.requires_grad_(False): ghosts g0 = detach() of n8 (fc2's addmm), g1/g2 = frozen.*
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pagekit
import pytest
from pagekit import FIXTURES, SCREENSHOTS, MountedPage

pytestmark = pytest.mark.browser
browser = pagekit.browser  # the module-scoped headless Chromium fixture


def fixture_payload() -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / "whatif_ghosts.json").read_text())
    return payload


class Page(MountedPage):
    def __init__(self, browser: Any, tmp_path: Path, payload: dict[str, Any], **traits: Any) -> None:
        state = {
            "graph_data": payload,
            "expanded": [],
            "selected": "",
            "height": 600,
            "toggles": {"detach": [], "freeze": []},
            "verified": {},
            "can_verify": False,
            **traits,
        }
        super().__init__(browser, tmp_path, state, viewport=(1040, 1040))

    def click_at(self, point: dict[str, float] | None, what: str, shift: bool = False) -> None:
        assert point, f"{what} is not on screen"
        if shift:
            self.page.keyboard.down("Shift")
        self.page.mouse.click(point["x"], point["y"])
        if shift:
            self.page.keyboard.up("Shift")

    def click_node(self, node_id: str) -> None:
        self.click_at(self.js("(id) => gv.hook.nodePoint(id)", node_id), node_id)

    def click_box(self, call_id: str, shift: bool = False) -> None:
        self.click_at(self.js("(id) => gv.hook.boxPoint(id)", call_id), call_id, shift)

    def click_edge(self, source: str, target: str) -> None:
        key = self.js("([s, t]) => gv.hook.edgeBetween(s, t)", [source, target])
        assert key, f"no edge {source} -> {target}"
        self.click_at(self.js("(k) => gv.hook.edgePoint(k)", key), key)

    def toggles(self) -> dict[str, list[str]]:
        toggles: dict[str, list[str]] = self.js("() => gv.model.state.toggles")
        return toggles

    def answer(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.js("() => gv.hook.whatIf()")
        return answer

    def has_class(self, key: str, cls: str) -> bool:
        return bool(self.js("([k, c]) => gv.hook.cy.$id(k).hasClass(c)", [key, cls]))

    def summary(self) -> str:
        return str(self.page.locator("[data-testid=gradviz-whatif-summary]").inner_text())

    def positions(self) -> dict[str, Any]:
        return dict(
            self.js(
                "() => Object.fromEntries(gv.hook.cy.nodes().filter((n) => n.data('kind') !== 'expanded')"
                ".map((n) => [n.id(), n.position()]))"
            )
        )


ALL_CALLS = ["enc", "enc.fc1", "enc.fc2", "head"]


def test_whatif_mode_click_edge_node_leaf_then_reset(browser: Any, tmp_path: Path) -> None:
    p = Page(browser, tmp_path, fixture_payload(), expanded=ALL_CALLS, height=900)
    assert p.page.locator("[data-testid=gradviz-whatif]").is_hidden()
    p.page.click("[data-testid=gradviz-whatif-toggle]")
    assert p.js("() => gv.hook.whatIfMode()") is True
    assert p.page.locator("[data-testid=gradviz-whatif-toggle]").get_attribute("aria-pressed") == "true"
    assert "Click a tensor" in p.page.locator("[data-testid=gradviz-whatif-hint]").inner_text()
    p.page.click("[data-testid=gradviz-fit]")  # every node on screen, for the mouse
    before = p.positions()
    layouts = p.js("() => gv.hook.lastLayoutMs()")

    # 1. The tensor relu -> fc2: fc1's parameters lose their gradient, fc1's ops are pruned.
    p.click_edge("n:n11", "n:n8")
    assert p.toggles() == {"detach": ["n11:0"], "freeze": []}
    assert p.js("() => gv.model.saves") >= 1
    answer = p.answer()
    assert sorted(answer["lost_ids"]) == ["n14", "n15"]
    assert {"n11", "n12", "n13", "n14", "n15"} == set(answer["pruned"])
    edge = p.js("() => gv.hook.edgeBetween('n:n11', 'n:n8')")
    assert p.has_class(edge, "wi-cut")
    assert p.has_class("n:n14", "wi-lost") and p.has_class("n:n15", "wi-lost")
    assert p.has_class("n:n12", "wi-pruned") and not p.has_class("n:n8", "wi-pruned")
    assert p.has_class("c:enc.fc1", "wi-haslost")
    assert "2 of 6 leaves lose gradient: enc.fc1.weight, enc.fc1.bias" in p.summary()
    assert "backward runs 13 of 18 nodes" in p.summary()
    # Styles only: nothing moved, no new layout.
    assert p.positions() == before and p.js("() => gv.hook.lastLayoutMs()") == layouts
    assert p.js("() => gv.el.querySelector('.gradviz-root').dataset.layout") == "idle"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    # 2. The same edge again: untoggled.
    p.click_edge("n:n11", "n:n8")
    assert p.toggles() == {"detach": [], "freeze": []}
    assert p.answer()["lost_ids"] == [] and not p.has_class("n:n14", "wi-lost")

    # 3. An op (every output of the chunk's Split): the whole encoder loses its gradient.
    p.click_node("n7")
    assert p.toggles()["detach"] == ["n7"]
    assert sorted(p.answer()["lost_ids"]) == ["n10", "n14", "n15", "n16"]
    assert p.has_class("n:n7", "wi-detached")
    assert all(p.has_class(p.js("() => gv.hook.edgeBetween('n:n7', 'n:n6')"), c) for c in ["wi-cut"])

    # 4. A leaf: frozen (requires_grad=False), marked with a snowflake, lost.
    p.click_node("n4")
    assert p.toggles() == {"detach": ["n7"], "freeze": ["n4"]}
    assert p.has_class("n:n4", "wi-frozen") and p.has_class("n:n4", "wi-lost")
    assert p.js("() => gv.hook.cy.$id('n:n4').data('label')").startswith("❄ head.weight")
    assert "5 of 6 leaves lose gradient" in p.summary()
    ms = p.js("() => gv.hook.lastWhatIfMs()")
    print(f"\nwhat-if toggle on {len(before)} elements: {ms:.1f} ms from click to styles applied")
    widget = p.page.locator("[data-testid=gradviz-root]")
    widget.screenshot(path=str(tmp_path / "whatif.png"))
    widget.screenshot(path=str(SCREENSHOTS / "whatif.png"))

    # 5. Reset clears everything, in the trait too.
    p.page.click("[data-testid=gradviz-whatif-reset]")
    assert p.toggles() == {"detach": [], "freeze": []}
    assert p.answer() == {"lost_ids": [], "pruned": [], "runs": 18, "total": 18}
    assert p.js("() => gv.hook.cy.$('.wi-lost, .wi-cut, .wi-pruned, .wi-frozen').length") == 0
    assert p.js("() => gv.hook.cy.$id('n:n4').data('label')").startswith("head.weight")

    # 6. Mode off: clicks select again, and edges take no clicks.
    p.page.click("[data-testid=gradviz-whatif-toggle]")
    p.click_node("n7")
    assert p.js("() => gv.model.state.selected") == "n7"
    assert p.toggles() == {"detach": [], "freeze": []}
    assert p.errors == []


def test_collapsed_boxes_detach_outputs_and_shift_click_freezes(browser: Any, tmp_path: Path) -> None:
    p = Page(browser, tmp_path, fixture_payload())
    p.js("() => gv.hook.setWhatIfMode(true)")
    p.page.click("[data-testid=gradviz-fit]")
    p.click_box("enc")
    assert p.toggles() == {"detach": ["call:enc"], "freeze": []}
    assert sorted(p.answer()["lost_ids"]) == ["n10", "n14", "n15", "n16"]
    assert p.has_class("c:enc", "wi-haslost")
    label = p.js("() => gv.hook.cy.$id('c:enc').data('label')")
    assert label.startswith("✂ ▸ enc") and "✖ 4 lose gradient" in label
    p.click_box("head", shift=True)
    assert p.toggles() == {"detach": ["call:enc"], "freeze": ["call:head"]}
    assert sorted(p.answer()["lost_ids"]) == ["n10", "n14", "n15", "n16", "n17", "n4"]
    assert p.has_class("c:head", "wi-frozen")
    # Python sets the trait: the page follows.
    p.js("() => gv.model.set('toggles', {detach: [], freeze: ['n4']})")
    assert p.answer()["lost_ids"] == ["n4"]
    assert not p.has_class("c:enc", "wi-haslost")
    assert "1 of 6 leaves loses gradient" not in p.summary()  # plural of the total, not of the lost
    assert "1 of 6 leaves lose gradient: head.weight" in p.summary()
    p.page.screenshot(path=str(tmp_path / "boxes.png"))
    assert p.errors == []


def test_verified_banner_and_verify_button(browser: Any, tmp_path: Path) -> None:
    toggles = {"detach": ["n11:0"], "freeze": []}
    bad = {
        "toggles": toggles,
        "predicted_lost": ["enc.fc1.weight", "enc.fc1.bias"],
        "actual_lost": ["enc.fc1.weight"],
        "agree": False,
        "unverifiable": [],
        "error": "",
    }
    p = Page(browser, tmp_path, fixture_payload(), toggles=toggles, verified=bad, can_verify=True)
    banner = p.page.locator("[data-testid=gradviz-verified]")
    assert banner.is_visible()
    text = banner.inner_text()
    assert "Prediction and PyTorch disagree" in text and "enc.fc1.bias" in text
    assert "gradviz-verified-bad" in (banner.get_attribute("class") or "")
    p.page.screenshot(path=str(tmp_path / "disagree.png"))
    # The Verify button asks Python to re-run.
    p.page.click("[data-testid=gradviz-verify]")
    # the PageRequest envelope, naming the question
    assert p.js("() => gv.model.sent") == [{"id": 1, "kind": "verify", "body": {"question": "whatif"}}]
    good = {**bad, "actual_lost": bad["predicted_lost"], "agree": True}
    p.js("(v) => gv.model.set('verified', v)", good)
    text = banner.inner_text()
    assert "Verified by re-running PyTorch: 2 leaves lose gradient, as predicted" in text
    assert "not the gradients' values" in text  # verify never claims to have checked values
    assert "Stale" not in text
    # Changing the toggles makes the verification stale.
    p.js("() => gv.model.set('toggles', {detach: [], freeze: []})")
    assert "Stale" in banner.inner_text()
    p.js("() => gv.model.set('verified', {})")
    assert banner.is_hidden()
    p.js("() => gv.model.set('can_verify', false)")
    p.js("() => gv.hook.setWhatIfMode(true)")
    assert p.page.locator("[data-testid=gradviz-verify]").is_hidden()
    assert p.errors == []


# Every ghost edge: its stub's id, the straight distance between its ends and their vertical distance (graph px).
GHOST_EDGES_JS = """() => gv.hook.cy.edges('.ghost').map((e) => {
    const s = e.sourceEndpoint(), t = e.targetEndpoint();
    return [e.source().id(), e.target().id(), Math.hypot(s.x - t.x, s.y - t.y), Math.abs(s.y - t.y)];
})"""
# Ghost stubs whose drawn box (label included) leaves the canvas, after Fit.
GHOSTS_OUTSIDE_JS = """() => { const cy = gv.hook.cy; return cy.nodes('[kind = "ghost"]').filter((n) => {
    const b = n.renderedBoundingBox({includeLabels: true});
    return b.x1 < 0 || b.y1 < 0 || b.x2 > cy.width() || b.y2 > cy.height(); }).map((n) => n.id()); }"""
STUB_MAX_PX = 160  # a stub sits in the layer just above its target or beside it, never across boxes


def test_ghost_tensors_are_short_stubs_beside_their_target(browser: Any, tmp_path: Path) -> None:
    p = Page(browser, tmp_path, fixture_payload(), expanded=ALL_CALLS)
    ghosts = p.js("() => gv.hook.cy.nodes('[kind = \"ghost\"]').map((n) => [n.id(), n.data('label')])")
    assert sorted(g[0] for g in ghosts) == ["g:g0", "g:g1", "g:g2"]
    assert sorted(label for _, label in ghosts) == ["from detach()", "from ❄ frozen.bias", "from ❄ frozen.weight"]
    # One short dashed edge per stub into the add they feed; none runs back to fc2, where h was detached.
    edges = p.js(GHOST_EDGES_JS)
    assert sorted((s, t) for s, t, _, _ in edges) == [("g:g0", "n:n5"), ("g:g1", "n:n5"), ("g:g2", "n:n5")]
    assert all(length < STUB_MAX_PX and dy < 60 for _, _, length, dy in edges), edges
    assert p.js("() => gv.hook.visibleCounts().nodes") == 19  # ghosts are not counted as nodes
    # Fit: no stub, nor its label, is cut at the canvas edge.
    p.page.click("text=Fit")
    p.js("() => gv.hook.idle()")
    assert p.js(GHOSTS_OUTSIDE_JS) == []
    # Hover: the stub's tooltip names its whole source.
    point = p.js("() => { const r = gv.hook.cy.container().getBoundingClientRect();"
                 " const q = gv.hook.cy.$id('g:g1').renderedPosition(); return {x: r.left + q.x, y: r.top + q.y}; }")
    p.page.mouse.move(point["x"], point["y"])
    tip = p.page.locator("[data-testid=gradviz-tooltip]")
    tip.wait_for(state="visible", timeout=5000)
    assert tip.inner_text().startswith("frozen parameter frozen.weight [8, 8]"), tip.inner_text()
    # Collapsing enc, where h was detached: the stub stays beside the add, no ghost edge comes out of the box.
    p.js("() => gv.hook.collapse('enc')")
    assert p.js("() => gv.hook.cy.edges('.ghost[source = \"c:enc\"]').length") == 0
    assert sorted((s, t) for s, t, _, _ in p.js(GHOST_EDGES_JS))[0] == ("g:g0", "n:n5")
    # Ghosts take no part in what-if: a click on one toggles nothing.
    p.js("() => gv.hook.setWhatIfMode(true)")
    p.click_at(
        p.js(
            "() => { const r = gv.hook.cy.container().getBoundingClientRect();"
            " const q = gv.hook.cy.$id('g:g0').renderedPosition(); return {x: r.left + q.x, y: r.top + q.y}; }"
        ),
        "ghost g0",
    )
    assert p.toggles() == {"detach": [], "freeze": []}
    assert p.js("() => gv.model.get('selected')") == ""
    p.page.screenshot(path=str(tmp_path / "ghosts.png"))
    assert p.errors == []


def test_gpt2_124m_toggle_restyles_without_layout(browser: Any, tmp_path: Path) -> None:
    """The 124M-parameter GPT-2, every box open (532 nodes, 124 boxes): a real click on a tensor
    restyles in place. Prints the time from the click to the styles applied, and to the next paint."""
    torch = pytest.importorskip("torch")
    import gradviz_nb as gv
    from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
    from gradviz_nb.widgets import page

    torch.manual_seed(0)
    model = GPT2(GPT2Config())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    payload = json.loads(json.dumps(page.graph(gv.trace(loss, model=model, capture=cap))))
    del model, loss, cap
    p = Page(browser, tmp_path, payload, height=800)
    p.page.click("[data-testid=gradviz-more]")  # the toolbar's "⋯" menu
    p.page.click("[data-testid=gradviz-expand-all]")
    p.js("() => gv.hook.idle()")
    assert p.js("() => gv.hook.visibleCounts().nodes") == len(payload["nodes"])
    p.page.click("[data-testid=gradviz-whatif-toggle]")
    # The tensor leaving blocks.5's last op: put it on screen at 1:1 and click it.
    key = p.js(
        "() => gv.hook.cy.edges().filter((e) => e.source().data('box') === 'c:blocks.5'"
        " && e.target().data('box') !== 'c:blocks.5' && !e.hasClass('ghost'))[0].id()"
    )
    p.js("(k) => { const cy = gv.hook.cy; cy.zoom(1); cy.center(cy.$id(k)); }", key)
    before = p.positions()
    handler, paint = [], []
    for _ in range(4):
        p.js(
            "() => gv.hook.cy.container().addEventListener('mouseup',"
            " () => { window.__t0 = performance.now(); }, {once: true, capture: true})"
        )
        p.click_at(p.js("(k) => gv.hook.edgePoint(k)", key), key)
        handler.append(p.js("() => gv.hook.lastWhatIfMs()"))
        paint.append(
            p.js(
                "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame("
                "() => r(performance.now() - window.__t0))))"
            )
        )
        if len(handler) % 2:
            assert p.toggles()["detach"] and p.answer()["lost_ids"], "the click did not detach the tensor"
            assert p.has_class(key, "wi-cut")
    assert p.toggles() == {"detach": [], "freeze": []}
    assert p.positions() == before
    assert p.js("() => gv.el.querySelector('.gradviz-root').dataset.layout") == "idle"
    print(
        f"\nGPT-2 124M, {len(before)} nodes drawn: click -> styles applied "
        + ", ".join(f"{ms:.1f}" for ms in handler)
        + " ms; mouseup -> second frame painted "
        + ", ".join(f"{ms:.0f}" for ms in paint)
        + " ms"
    )
    assert p.errors == []


def partial_verification() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """A real from_fn widget (Linear -> Tanh -> attention with a learned mask): detach tanh's output
    (replayable) and scores + mask inside scaled_dot_product_attention (two inputs, no Python-level call:
    not replayable); then tanh's only."""
    import torch
    from torch import nn

    import gradviz_nb as gv

    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
            self.bias = nn.Parameter(torch.zeros(4, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x),
                                                                    attn_mask=self.bias)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), Attn())
    x = torch.randn(2, 4, 3)
    w = gv.GraphWidget.from_fn(lambda: model(x).pow(2).mean(), model=model)
    g = w.graph.nx
    inside = next(n for n, d in g.nodes(data=True) if d["op"] == "AddBackward0" and d["call"] == "2")
    tanh = next(n for n, d in g.nodes(data=True) if d["op"] == "TanhBackward0")
    w.toggles = {"detach": [f"{tanh}:0", f"{inside}:0"], "freeze": []}
    w.verify()
    partial = w.page_state()
    w.toggles = {"detach": [f"{tanh}:0"], "freeze": []}
    w.verify()
    return w, dict(partial), dict(w.page_state())


def test_partial_verification_is_amber_and_names_what_was_not_replayed(browser: Any, tmp_path: Path) -> None:
    # Seen in review: the banner was green ("1 leaf loses gradient, as predicted") while the headline predicted 2,
    # and named the cut it could not replay "n2:0".
    _, partial, full = partial_verification()
    state = {k: partial[k] for k in ("graph_data", "toggles", "verified", "can_verify")}
    p = Page(browser, tmp_path, state["graph_data"], **{k: v for k, v in state.items() if k != "graph_data"})
    p.js("() => gv.hook.setWhatIfMode(true)")
    banner = p.page.locator("[data-testid=gradviz-verified]")
    assert banner.is_visible()
    cls = banner.get_attribute("class") or ""
    assert "gradviz-verified-partial" in cls and "gradviz-verified-ok" not in cls, cls
    text = banner.inner_text()
    assert p.summary().startswith("7 of 9 leaves lose gradient"), p.summary()  # the headline's prediction
    assert "Partly verified" in text and "0.bias, 0.weight lose gradient, as predicted (2 of 7" in text, text
    assert "Not checked: " in text and "2.q.weight" in text and "because:" in text, text
    assert "the detach of the AddBackward0 output in 2 (Attn) was not replayed" in text, text
    assert "no line of your code returns it" in text and "detach the output of 2 (Attn)" in text, text
    assert "which leaves get a gradient, not the gradients' values" in text
    ids = [n["id"] for n in state["graph_data"]["nodes"]]
    assert not any(f"{i}:" in text for i in ids), text  # no internal node id such as "n2:0"
    # Amber, distinct from green and red: a warm translucent fill and an amber bar on the left.
    bg = p.js("() => getComputedStyle(document.querySelector('[data-testid=gradviz-verified]')).backgroundColor")
    bar = p.js("() => getComputedStyle(document.querySelector('[data-testid=gradviz-verified]')).borderLeftColor")
    assert bg == "rgba(255, 179, 0, 0.2)" and bar == "rgb(249, 168, 37)", (bg, bar)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-whatif]").screenshot(path=str(SCREENSHOTS / "verify-partial.png"))
    # The full verification (every toggle replayed): green.
    p.js("(s) => { gv.model.set('toggles', s.toggles); gv.model.set('verified', s.verified); }", full)
    cls = banner.get_attribute("class") or ""
    assert "gradviz-verified-ok" in cls and "partial" not in cls, cls
    text = banner.inner_text()
    assert "Verified by re-running PyTorch: 2 leaves lose gradient, as predicted (0.bias, 0.weight)" in text, text
    assert "Not checked" not in text and "Stale" not in text
    p.page.locator("[data-testid=gradviz-whatif]").screenshot(path=str(SCREENSHOTS / "verify-full.png"))
    assert p.errors == []

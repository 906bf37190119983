"""The diff view in the built bundle, in a blank headless Chromium page with the fake anywidget model.

``fixtures/diff_lora.json`` (``tests/fixtures/make_diff.py``) is GPT-2 (small_test) before / after LoRA
adapters (``add_lora(..., freeze_base=False)``): ``"added"`` is plain -> LoRA, ``"removed"`` the reverse
(the adapters' nodes drawn as removed, "was:<id>"). Each holds ``graph`` (``page.graph(d.merged())``)
and ``diff`` (``page.diff(d)``), as ``GraphWidget(d.merged(), diff=page.diff(d))`` syncs them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pagekit
import pytest
from pagekit import SCREENSHOTS, MountedPage, load_fixture

pytestmark = pytest.mark.browser
browser = pagekit.browser  # the module-scoped headless Chromium fixture


class Page(MountedPage):
    def __init__(self, browser: Any, tmp_path: Path, data: dict[str, Any], **traits: Any) -> None:
        state = {"graph_data": data["graph"], "expanded": [], "selected": "", "height": 700,
                 "toggles": {"detach": [], "freeze": []}, "verified": {}, "can_verify": False, "overlay": {},
                 "recording": {}, "step": -1, "diff": data["diff"], **traits}
        super().__init__(browser, tmp_path, state, viewport=(1240, 1000), width=1200)

    def classes(self, key: str) -> list[str]:
        return list(self.js("(k) => gv.hook.cy.$id(k).classes()", key))

    def label(self, key: str) -> str:
        return str(self.js("(k) => gv.hook.cy.$id(k).data('label')", key))

    def text(self, testid: str) -> str:
        return str(self.page.locator(f"[data-testid={testid}]").inner_text())


def leaf_id(data: dict[str, Any], name: str) -> str:
    return next(n["id"] for n in data["graph"]["nodes"] if name in n["names"])


def test_lora_added_colours_badges_legend_and_summary(browser: Any, tmp_path: Path) -> None:
    data = load_fixture("diff_lora.json")["added"]
    status = data["diff"]["status"]
    p = Page(browser, tmp_path, data)
    # Summary panel: Python's text, as text.
    assert p.text("gradviz-diff-title") == "Diff: 72 added · 0 removed · 6 changed"
    summary = p.text("gradviz-diff-summary")
    assert summary.startswith("diff: 72 nodes added, 0 removed, 6 changed") and "lora_A" in summary
    assert "modules wrapped" in summary
    # All closed: the blocks hold every change; their badges count them.
    counts = Counter(st for n, st in status.items() if st != "same")
    blocks = [c["id"] for c in data["graph"]["calls"] if not c["parent"] and c["id"].startswith("blocks")]
    badges = [p.js("(k) => gv.hook.diffOf(k)", "c:" + b)["badge"] for b in blocks]
    assert all(b.startswith("Δ ") for b in badges) and "df-box" in p.classes("c:" + blocks[0])
    assert sum(int(b.split()[1]) for b in badges) == counts["added"]  # "Δ 36 added · 3 changed"
    assert "Δ 36 added · 3 changed" in p.label("c:blocks.0")
    assert p.js("() => gv.hook.diffOf('c:wte')")["badge"] == "" and "df-box" not in p.classes("c:wte")
    # Legend: the diff's swatches.
    legend = p.text("gradviz-legend")
    for text in ("added", "removed", "changed", "the same", "gains a gradient path", "changes inside"):
        assert text in legend, text
    assert "loses its gradient path" not in legend  # nothing lost here
    # Open everything: adapters' leaves are added and gain a gradient path; changed ops are amber.
    p.page.click("[data-testid=gradviz-more]")  # the toolbar's "⋯" menu
    p.page.click("[data-testid=gradviz-expand-all]")
    p.js("() => gv.hook.idle()")
    lora_a = leaf_id(data, "blocks.0.attn.c_attn.lora_A")
    assert {"df-added", "df-gained"} <= set(p.classes("n:" + lora_a))
    assert p.label("n:" + lora_a).startswith("+ blocks.0.attn.c_attn.lora_A")
    assert p.label("n:" + lora_a).endswith("▲ gains a gradient path")
    changed = next(n for n, st in status.items() if st == "changed")
    assert "df-changed" in p.classes("n:" + changed) and p.label("n:" + changed).startswith("~ ")
    assert "inputs" in p.js("(k) => gv.hook.diffOf(k)", "n:" + changed)["text"]
    same = next(n for n, st in status.items() if st == "same")
    assert not any(c.startswith("df-") for c in p.classes("n:" + same))
    # Details of a changed node say why.
    p.js("(id) => gv.model.set('selected', id)", changed)
    details = p.text("gradviz-details")
    assert "changed" in details and "inputs" in details
    # ... and what it holds for backward, before -> after, where that moved.
    held = next(iter(data["diff"]["memory"]))
    p.js("(id) => gv.model.set('selected', id)", held)
    assert "saved for backward" in p.text("gradviz-details") and "→" in p.text("gradviz-details")
    p.js("() => gv.model.set('selected', '')")
    p.page.click("[data-testid=gradviz-fit]")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "diff_added.png"))
    # What-if still works on the diff view, and its marks compose with the diff's.
    p.js("(id) => gv.model.set('toggles', {detach: [], freeze: [id]})", lora_a)
    assert p.label("n:" + lora_a).startswith("+ ❄ blocks.0.attn.c_attn.lora_A")
    # The diff trait cleared: colours, badges, legend and panel go.
    p.js("() => gv.model.set('diff', {})")
    assert not any(c.startswith("df-") for c in p.classes("n:" + lora_a))
    assert p.page.locator("[data-testid=gradviz-diff]").is_hidden()
    assert p.page.locator("[data-testid=gradviz-legend]").is_hidden()
    assert p.errors == []


def test_lora_removed_nodes_are_red_and_lost_leaves_marked(browser: Any, tmp_path: Path) -> None:
    data = load_fixture("diff_lora.json")["removed"]
    p = Page(browser, tmp_path, data, expanded=[c["id"] for c in data["graph"]["calls"] if c["size"]])
    removed = [n for n, st in data["diff"]["status"].items() if st == "removed"]
    assert removed and all(n.startswith("was:") for n in removed)
    assert all("df-removed" in p.classes("n:" + n) for n in removed[:10])
    was_lora = leaf_id(data, "blocks.0.attn.c_attn.lora_B")
    assert was_lora.startswith("was:")
    assert {"df-removed", "df-lost"} <= set(p.classes("n:" + was_lora))
    assert p.label("n:" + was_lora).startswith("− ") and p.label("n:" + was_lora).endswith("✖ loses its gradient path")
    assert p.js("() => gv.hook.cy.$('.df-removed').length") >= len(removed)
    assert "loses its gradient path" in p.text("gradviz-legend")
    # The adapters' 12 weights lose their path; the unwrapped base weights are matched, not lost.
    assert "LOST their gradient path (12)" in p.text("gradviz-diff-summary")
    assert "modules unwrapped" in p.text("gradviz-diff-summary")
    # The legend folds to its title line (it sits over the canvas's bottom-left corner).
    p.page.click("[data-testid=gradviz-legend-fold]")
    assert p.page.locator(".gradviz-legend-items").is_hidden()
    assert p.page.locator("[data-testid=gradviz-legend-title]").is_visible()
    p.page.click("[data-testid=gradviz-legend-fold]")
    p.page.click("[data-testid=gradviz-fit]")
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(tmp_path / "diff_removed.png"))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "diff_removed.png"))
    assert p.errors == []


def test_box_only_before_had_is_red_as_a_whole(browser: Any, tmp_path: Path) -> None:
    data = load_fixture("diff_lora.json")["checkpointed"]  # reentrant checkpoint hides each block's inside
    p = Page(browser, tmp_path, data, expanded=[c["id"] for c in data["graph"]["calls"] if c["size"]])
    assert "df-removed" in p.classes("c:blocks.0.attn")
    assert p.errors == []


def test_fit_keeps_nodes_clear_of_the_legend(browser: Any, tmp_path: Path) -> None:
    data = load_fixture("diff_lora.json")["added"]
    p = Page(browser, tmp_path, data)
    p.page.click("[data-testid=gradviz-fit]")
    legend = p.page.locator("[data-testid=gradviz-legend]").bounding_box()
    boxes = p.js(
        "() => { const r = gv.hook.cy.container().getBoundingClientRect();"
        " return gv.hook.cy.nodes().map((n) => { const b = n.renderedBoundingBox({includeLabels: true});"
        " return [r.left + b.x1, r.top + b.y1, r.left + b.x2, r.top + b.y2]; }); }"
    )
    lx1, ly1, lx2, ly2 = legend["x"], legend["y"], legend["x"] + legend["width"], legend["y"] + legend["height"]
    overlaps = [b for b in boxes if b[0] < lx2 and b[2] > lx1 and b[1] < ly2 and b[3] > ly1]
    assert overlaps == []
    assert p.errors == []


def test_toolbar_image_export_and_svg_hook(browser: Any, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    data = load_fixture("diff_lora.json")["added"]
    p = Page(browser, tmp_path, data, expanded=["blocks.0"])
    svg = p.js("() => gv.hook.toSVG()")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    texts = " ".join("".join(t.itertext()) for t in root.iter(ns + "text"))
    assert "blocks.0" in texts and "Δ 36 added · 3 changed" in texts
    assert len(list(root.iter(ns + "polyline"))) == p.js("() => gv.hook.cy.edges().length")
    assert len(list(root.iter(ns + "marker"))) >= 1
    png = p.js("() => gv.hook.toPNG()")
    assert png.startswith("data:image/png;base64,") and len(png) > 10_000
    for button, suffix in (("gradviz-svg", ".svg"), ("gradviz-png", ".png")):
        p.page.click("[data-testid=gradviz-more]")  # the toolbar's "⋯" menu
        with p.page.expect_download() as info:
            p.page.click(f"[data-testid={button}]")
        saved = tmp_path / ("view" + suffix)
        info.value.save_as(saved)
        assert info.value.suggested_filename == "gradviz" + suffix and saved.stat().st_size > 1000
    ET.parse(tmp_path / "view.svg")
    assert (tmp_path / "view.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert p.errors == []

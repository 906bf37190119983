"""The big view (``js/src/view/bigview/``) on a flat 20,000-node chain, in the built bundle: what it does,
not how fast (timings are printed; ``benchmarks/bench_bigview.py`` measures them against today's renderer).

- after the first render Cytoscape holds only what is near the viewport, and zoomed out the overview
  layer draws the nodes (pixels on its canvas);
- at a readable zoom the nodes near the viewport centre are mounted with their labels, far fewer than
  20,000, and panning moves the mounted set;
- a click on a mounted node, and on a node the overview drew (zoomed out), selects it and the details
  panel names it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import BUNDLE, HARNESS, SCREENSHOTS, MountedPage
from test_frontend_details import DARK, SET_THEME_JS

import gradviz_nb as gv
from gradviz_nb.widgets.page import graph as graph_payload

pytestmark = pytest.mark.browser
browser = pagekit.browser

NODES = 20_000
SYNC_COUNT = "Number(gv.hook.cy.container().dataset.bigSyncs || 0)"
# Mounted nodes: id, rendered centre, label, and whether Cytoscape shows it.
MOUNTED = """() => gv.hook.cy.nodes().map((n) => ({ id: n.id(), x: n.renderedPosition('x'),
  y: n.renderedPosition('y'), label: n.data('label'), kind: n.data('kind'), visible: n.visible() }))"""
OVERVIEW = "() => gv.el.querySelector('[data-testid=gradviz-overview]')"
# Pixels the overview layer painted (alpha > 0) and the nodes it says it drew in its last frame.
PAINTED = """() => { const c = gv.el.querySelector('[data-testid=gradviz-overview]');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
  return { pixels: n, drawn: Number(c.dataset.drawnNodes) }; }"""


def chain_of(nodes: int) -> dict[str, Any]:
    """A traced flat chain: one leaf, Mul after Mul, a Sum and the loss; no module boxes."""
    w = torch.ones(3, requires_grad=True)
    x = w
    for _ in range(nodes - 2):
        x = x * 1.0
    return dict(graph_payload(gv.trace(x.sum())))


@pytest.fixture(scope="module")
def chain() -> dict[str, Any]:
    return chain_of(NODES)


class ChainPage(MountedPage):
    """MountedPage with the state sent as JSON text: Playwright's own argument encoding takes minutes
    for a 7.5 MB payload on a busy machine, JSON.parse a fraction of a second."""

    def __init__(self, browser: Any, tmp_path: Path, state: dict[str, Any]) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page = browser.new_page(viewport={"width": 1040, "height": 900})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        html = tmp_path / "index.html"
        host = '<div id="host" style="width:1000px"></div>'
        html.write_text(f'<!doctype html><html><body style="margin:10px">{host}</body></html>')
        self.page.goto(html.as_uri())
        mount = f"([source, text]) => ({HARNESS})([source, JSON.parse(text), null])"
        self.page.evaluate(mount, [BUNDLE.read_text(), json.dumps(state)])


SYNCED_HERE = """() => { const cy = gv.hook.cy;
  return cy.container().dataset.bigSynced === `${cy.zoom()} ${cy.pan().x} ${cy.pan().y}`; }"""


def settle(p: MountedPage, before: int) -> None:
    """Wait until the big view has re-synced after a viewport change (it waits for the motion to stop),
    for the viewport as it is now (a sync an earlier event had scheduled may come first on a busy machine)."""
    p.page.wait_for_function(f"() => {SYNC_COUNT} > {before}", timeout=10_000)
    p.page.wait_for_function(SYNCED_HERE, timeout=10_000)


def move(p: MountedPage, viewport_js: str) -> None:
    """Change the viewport with `viewport_js` (using `cy`) and wait for the re-sync."""
    before = p.js(f"() => {SYNC_COUNT}")
    p.js(f"() => {{ const cy = gv.hook.cy; {viewport_js}; }}")
    settle(p, before)


def test_flat_20k_chain_draws_mounts_near_the_viewport_and_selects(
    browser: Any, tmp_path: Path, chain: dict[str, Any]
) -> None:
    p = ChainPage(browser, tmp_path, {"graph_data": chain, "height": 600})
    root = "document.querySelector('.gradviz-root').dataset"
    assert p.js(f"() => {root}.bigView") == "true"
    assert int(p.js(f"() => {root}.visibleNodes")) == len(chain["nodes"]) > NODES - 5
    assert "plain shapes" in p.js("() => document.querySelector('[data-testid=gradviz-message]').textContent")
    first = p.js("() => ({ zoom: gv.hook.cy.zoom(), elements: gv.hook.cy.elements().length })")
    print(f"\nfirst view: zoom {first['zoom']:.2f}, {first['elements']} elements in Cytoscape")
    assert 0 < first["elements"] < 2000

    # Zoomed out below a readable zoom: nothing but the loss stays in Cytoscape, the overview draws the chain.
    move(p, "cy.zoom({ level: 0.1, renderedPosition: { x: cy.width() / 2, y: cy.height() / 2 } })")
    far = p.js(MOUNTED)
    assert [n["kind"] for n in far] == ["root"]
    painted = p.js(PAINTED)
    assert painted["drawn"] > 20 and painted["pixels"] > 500, painted

    # Readable again, in the middle of the chain: labelled nodes near the centre, far fewer than 20,000.
    loss = p.js("() => gv.hook.cy.nodes('[kind = \"root\"]').position()")
    mid = f"{{ x: cy.width() / 2 - {loss['x']}, y: cy.height() / 2 - {loss['y'] / 2} }}"
    move(p, f"cy.viewport({{ zoom: 1, pan: {mid} }})")
    near = [n for n in p.js(MOUNTED) if n["kind"] != "root"]
    w, h = p.js("() => [gv.hook.cy.width(), gv.hook.cy.height()]")
    print(f"mounted at 100% mid-chain: {len(near)} nodes")
    assert 5 < len(near) < 500
    assert all(-w <= n["x"] <= 2 * w and -h <= n["y"] <= 2 * h for n in near), "mounted far from the viewport"
    centre = min(near, key=lambda n: (n["x"] - w / 2) ** 2 + (n["y"] - h / 2) ** 2)
    assert abs(centre["y"] - h / 2) < 60 and centre["label"].startswith("Mul") and centre["visible"]

    # A click on a mounted node selects it and the details panel names it.
    node_id = centre["id"][2:]
    pt = p.js("(id) => gv.hook.nodePoint(id)", node_id)
    p.page.mouse.click(pt["x"], pt["y"])
    p.page.wait_for_function("(id) => gv.model.state.selected === id", arg=node_id)
    assert p.js("() => gv.hook.cy.$(':selected').map((n) => n.id())") == [centre["id"]]
    title = p.js("() => document.querySelector('[data-testid=gradviz-details-title]').textContent")
    assert title.startswith("Mul"), title

    # Panning two screens down the chain mounts other nodes; the selection stays mounted.
    ids = {n["id"] for n in near}
    move(p, "cy.panBy({ x: 0, y: -2 * cy.height() })")
    after = {n["id"] for n in p.js(MOUNTED) if n["kind"] != "root"}
    assert centre["id"] in after and 5 < len(after) < 500
    assert len(after - ids) > len(after) // 3, "the mounted set did not follow the pan"
    assert p.errors == []


def test_click_on_a_node_the_overview_drew_selects_it(browser: Any, tmp_path: Path, chain: dict[str, Any]) -> None:
    p = ChainPage(browser, tmp_path, {"graph_data": chain, "height": 600})
    move(p, "cy.zoom({ level: 0.2, renderedPosition: { x: cy.width() / 2, y: cy.height() / 2 } })")
    # A node some way up the chain, drawn by the overview only (nothing but the loss is mounted).
    target = p.js(
        """() => { const big = gv.el.querySelector('[data-testid=gradviz-overview]').__gradvizBig;
        const cy = gv.hook.cy;
        const pan = cy.pan(), z = cy.zoom();
        for (const id of gv.model.state.graph_data.nodes.map((n) => n.id)) {
          const r = big.rectOf('n:' + id);
          const y = r ? pan.y + z * (r.y1 + r.y2) / 2 : -1;
          if (y > cy.height() * 0.3 && y < cy.height() * 0.6)
            return { id, x: pan.x + z * (r.x1 + r.x2) / 2, y, h: z * (r.y2 - r.y1) };
        }
        return null; }"""
    )
    assert target is not None and target["h"] >= 4
    assert p.js("() => gv.hook.cy.nodes().map((n) => n.data('kind'))") == ["root"]
    box = p.page.locator("[data-testid=gradviz-canvas]").bounding_box()
    p.page.mouse.click(box["x"] + target["x"], box["y"] + target["y"])
    p.page.wait_for_function("(id) => gv.model.state.selected === id", arg=target["id"])
    title = p.js("() => document.querySelector('[data-testid=gradviz-details-title]').textContent")
    assert title.startswith("Mul") or title.startswith("Sum"), title
    assert p.errors == []


def test_images_are_of_the_whole_graph(browser: Any, tmp_path: Path) -> None:
    """An image is of the whole graph, not of what happens to be mounted (3,000 nodes: past the big
    view's threshold, and an export of 20,000 takes minutes on a busy machine)."""
    p = ChainPage(browser, tmp_path, {"graph_data": chain_of(3000), "height": 600})
    assert p.js("() => document.querySelector('.gradviz-root').dataset.bigView") == "true"
    mounted = p.js("() => gv.hook.cy.nodes().length")
    svg = p.js("() => gv.hook.toSVG()")
    assert svg.count(">Mul<") >= 3000 - 3, svg.count(">Mul<")
    again = p.js("() => gv.hook.cy.nodes().length")
    assert mounted < 100 and again < 100, (mounted, again)  # only the view's part again
    assert p.errors == []


def test_screenshots_far_and_near_light_and_dark(browser: Any, tmp_path: Path, chain: dict[str, Any]) -> None:
    """Zoomed out (overview only) and at 100% (mounted, labelled), in both themes: look at the PNGs."""
    p = ChainPage(browser, tmp_path, {"graph_data": chain, "height": 600})
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    root = p.page.locator("[data-testid=gradviz-root]")
    loss = p.js("() => gv.hook.cy.nodes('[kind = \"root\"]').position()")
    for theme in ("light", "dark"):
        if theme == "dark":
            p.js(SET_THEME_JS, DARK)
            p.page.wait_for_function("() => document.querySelector('.gradviz-root').dataset.theme === 'dark'")
        for name, zoom in (("far", 0.15), ("near", 1.0)):
            move(p, f"cy.viewport({{ zoom: {zoom}, pan: {{ x: cy.width() / 2 - {zoom} * {loss['x']}, "
                    f"y: cy.height() - 40 - {zoom} * {loss['y']} }} }})")
            p.page.wait_for_timeout(100)
            if name == "far":
                assert p.js(PAINTED)["drawn"] > 20
            else:
                assert p.js("() => gv.hook.cy.nodes().length") > 5
            root.screenshot(path=str(SCREENSHOTS / f"bigview-{name}-{theme}.png"))
    assert p.errors == []


# The overview's pixel at the centre of a node (by element key), and the node's model rectangle.
PIXEL = """(key) => { const c = gv.el.querySelector('[data-testid=gradviz-overview]'); const big = c.__gradvizBig;
  const cy = gv.hook.cy, r = big.rectOf(key), z = cy.zoom(), pan = cy.pan();
  const x = Math.round(pan.x + z * (r.x1 + r.x2) / 2), y = Math.round(pan.y + z * (r.y1 + r.y2) / 2);
  return { x, y, rgba: [...c.getContext('2d').getImageData(x, y, 1, 1).data] }; }"""
CENTRE_ON = """(key) => { const cy = gv.hook.cy, r = gv.el.querySelector('[data-testid=gradviz-overview]')
  .__gradvizBig.rectOf(key); const z = cy.zoom();
  cy.pan({ x: cy.width() / 2 - z * (r.x1 + r.x2) / 2, y: cy.height() / 2 - z * (r.y1 + r.y2) / 2 }); }"""


def _rgb(css: str) -> list[int]:
    return [int(v) for v in css.removeprefix("rgb(").removesuffix(")").split(",")]


def test_decorations_show_zoomed_out_as_they_do_mounted(browser: Any, tmp_path: Path) -> None:
    """What-if on a 3,000-node chain cut in the middle: zoomed out, the overview draws the lost leaf in the
    colour Cytoscape gives it once mounted (asked of Cytoscape, light and dark) and the nodes whose backward
    no longer runs faded as Cytoscape fades them; the nodes that still lead to a leaf stay as they were."""
    w, w2 = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    x = w
    for i in range(3000):
        x = x * (w2 if i == 2990 else 1.0)  # a second leaf near the loss: the ops after it still run backward
    chain = dict(graph_payload(gv.trace(x.sum(), names={"w": w, "w2": w2})))
    p = ChainPage(browser, tmp_path, {"graph_data": chain, "height": 600})
    leaf = next(n["id"] for n in chain["nodes"] if n["names"] == ["w"])
    consumer = {e["source"]: e["target"] for e in chain["edges"]}
    forward = [consumer[leaf]]  # the ops in forward order, from the leaf's consumer to the loss
    while forward[-1] in consumer and not consumer[forward[-1]].startswith("root"):
        forward.append(consumer[forward[-1]])
    assert len(forward) > 2900
    cut, pruned, kept = forward[len(forward) // 2], forward[10], forward[-4]
    p.js("(d) => gv.model.set('toggles', {detach: [d], freeze: []})", f"{cut}:0")
    for theme in ("light", "dark"):
        if theme == "dark":
            p.js(SET_THEME_JS, DARK)
            p.page.wait_for_function("() => document.querySelector('.gradviz-root').dataset.theme === 'dark'")
        seen = {}
        for node in (leaf, pruned, kept):
            move(p, "cy.zoom(0.2)")
            p.js(CENTRE_ON, f"n:{node}")
            p.page.wait_for_timeout(250)
            assert p.js("() => gv.hook.cy.nodes().map((n) => n.data('kind'))") == ["root"]  # drawn by the overview
            seen[node] = p.js(PIXEL, f"n:{node}")["rgba"]
        move(p, "cy.zoom(1)")
        p.js(CENTRE_ON, f"n:{leaf}")
        p.page.wait_for_function("(k) => gv.hook.cy.$id(k).nonempty()", arg=f"n:{leaf}")
        mounted = _rgb(p.js("(k) => gv.hook.cy.$id(k).style('background-color')", f"n:{leaf}"))
        print(f"\n{theme}: leaf {seen[leaf]} (mounted {mounted}), pruned {seen[pruned]}, kept {seen[kept]}")
        assert all(abs(a - b) <= 3 for a, b in zip(seen[leaf][:3], mounted, strict=True)), (seen[leaf], mounted)
        assert seen[leaf][3] == 255
        # Cytoscape's opacity for a pruned node (features/whatif/feature.ts PRUNED_OPACITY: 0.4 light, 0.55 dark)
        faded = round(255 * {"light": 0.4, "dark": 0.55}[theme])
        assert abs(seen[pruned][3] - faded) <= 18, (seen[pruned], faded)
        assert seen[kept][3] == 255 and seen[kept][:3] != seen[leaf][:3]
    assert p.errors == []

"""Known answers for the pure helpers of the canvas checks (tests/lab/canvas_checks.py): segment/rectangle
intersection, colour parsing, compositing, WCAG contrast and hue, in Python and, through node, in the
JavaScript the page runs (one table, both implementations). The edge-crossing check itself runs in node on
a small fake Cytoscape graph, so its exclusions (own endpoints, open boxes holding an endpoint) are pinned."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest
from lab import canvas_checks as cc

pytestmark = pytest.mark.unit

R = {"x1": 0.0, "y1": 0.0, "x2": 10.0, "y2": 10.0}
# (a, b, rect, hits?)
SEGMENTS: list[tuple[tuple[float, float], tuple[float, float], dict[str, float], bool]] = [
    ((-5, 5), (15, 5), R, True),  # straight through
    ((2, 2), (3, 3), R, True),  # wholly inside
    ((-5, -5), (-1, 20), R, False),  # left of it
    ((-5, 11), (15, 11), R, False),  # passes just below
    ((-5, 10), (15, 10), R, True),  # along the bottom edge (closed rectangle)
    ((-5, 6), (6, -5), R, True),  # cuts the corner: x + y = 1 passes (0, 1) and (1, 0)
    ((-5, 4), (4, -5), R, False),  # x + y = -1 passes outside the corner
    ((5, -5), (5, -1), R, False),  # stops short, above
    ((5, -5), (5, 0), R, True),  # touches the top edge
    ((12, 12), (20, 0), R, False),  # beyond the far corner
    ((0, 20), (20, 0), R, True),  # through the far corner region: x + y = 20 meets (10, 10)
    ((3, 3), (3, 3), R, True),  # a point inside
    ((3, 3), (8, 8), {"x1": 5.0, "y1": 5.0, "x2": 5.0, "y2": 9.0}, False),  # an empty rectangle is never hit
]

COLOURS: list[tuple[str, list[float]]] = [
    ("#fff", [255, 255, 255, 1]),
    ("#1976d2", [25, 118, 210, 1]),
    ("rgb(10, 20, 30)", [10, 20, 30, 1]),
    ("rgba(255, 179, 0, 0.2)", [255, 179, 0, 0.2]),
    ("rgba(255,255,255,0.87)", [255, 255, 255, 0.87]),
    ("rgb(1 2 3 / 50%)", [1, 2, 3, 0.5]),
]
# (fg, bg, WCAG ratio to 2 decimals): the WCAG reference pairs.
CONTRASTS: list[tuple[list[float], list[float], float]] = [
    ([0, 0, 0], [255, 255, 255], 21.0),
    ([255, 255, 255], [255, 255, 255], 1.0),
    ([0x76, 0x76, 0x76], [255, 255, 255], 4.54),  # the lightest grey that passes AA on white
    ([0x77, 0x77, 0x77], [255, 255, 255], 4.48),  # and the first that fails
    ([255, 0, 0], [255, 255, 255], 4.0),
    ([0, 0, 255], [0, 0, 0], 2.44),
]
HUES: list[tuple[list[float], float, float]] = [
    ([255, 0, 0], 0.0, 1.0),
    ([0, 255, 0], 120.0, 1.0),
    ([0, 0, 255], 240.0, 1.0),
    ([0xF9, 0xA8, 0x25], 37.1, 0.95),  # the banner's amber bar: 60 * (168 - 37) / (249 - 37)
    ([0xE8, 0xF5, 0xE9], 124.6, 0.39),  # JupyterLab's success-color3 (the green banner)
    ([128, 128, 128], 0.0, 0.0),
]


@pytest.mark.parametrize(("a", "b", "r", "hits"), SEGMENTS)
def test_segment_rectangle(a: tuple[float, float], b: tuple[float, float], r: dict[str, float], hits: bool) -> None:
    assert cc.seg_hits_rect(a, b, r) is hits
    assert cc.seg_hits_rect(b, a, r) is hits  # direction does not matter


def test_polyline_and_inset() -> None:
    around = [(-5.0, -5.0), (-5.0, 15.0), (15.0, 15.0)]  # an L around the box: no hit
    assert not cc.polyline_hits_rect(around, R)
    assert cc.polyline_hits_rect([(-5.0, -5.0), (5.0, 5.0), (15.0, 15.0)], R)
    # a line along the border grazes it: a hit for the closed box, not once shrunk by 1
    along = [(-5.0, 0.0), (15.0, 0.0)]
    assert cc.polyline_hits_rect(along, R, inset=0) and not cc.polyline_hits_rect(along, R, inset=1)
    assert cc.polyline_hits_rect([(-5.0, 1.5), (15.0, 1.5)], R, inset=1)


@pytest.mark.parametrize(("text", "rgba"), COLOURS)
def test_parse_color(text: str, rgba: list[float]) -> None:
    assert list(cc.parse_color(text)) == pytest.approx(rgba)


def test_parse_color_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="unparsed colour"):
        cc.parse_color("color-mix(in srgb, red, blue)")


def test_compositing() -> None:
    # 20% amber over white, and 87% white text over black
    assert cc.over((255, 179, 0, 0.2), (255, 255, 255)) == pytest.approx((255, 239.8, 204, 1))  # 0.2 * 179 + 0.8 * 255
    assert cc.over((255, 255, 255, 0.87), (0, 0, 0)) == pytest.approx((221.85, 221.85, 221.85, 1))
    assert cc.over((10, 20, 30, 1), (0, 0, 0), alpha=0) == pytest.approx((0, 0, 0, 1))


@pytest.mark.parametrize(("fg", "bg", "ratio"), CONTRASTS)
def test_contrast(fg: list[float], bg: list[float], ratio: float) -> None:
    assert round(cc.contrast(fg, bg), 2) == ratio
    assert cc.contrast(bg, fg) == cc.contrast(fg, bg)


@pytest.mark.parametrize(("rgb", "hue", "sat"), HUES)
def test_hue_and_amber(rgb: list[float], hue: float, sat: float) -> None:
    h, s = cc.hue_sat(rgb)
    assert (round(h, 1), round(s, 2)) == (pytest.approx(hue, abs=0.1), pytest.approx(sat, abs=0.01))


def test_amber_is_told_from_green_and_red() -> None:
    assert cc.is_amber(cc.parse_color("#f9a825")) and cc.is_amber(cc.over((255, 179, 0, 0.2), (255, 255, 255)))
    assert cc.is_amber(cc.over((255, 179, 0, 0.2), (17, 17, 17)))  # on the dark theme's background too
    for not_amber in ("#e8f5e9", "#1b5e20", "#ffebee", "#c62828", "#ffffff", "#212121"):
        assert not cc.is_amber(cc.parse_color(not_amber)), not_amber


# ------------------------------------------------------------------------------------------------
# The same table through node: the JavaScript the page runs gives the same answers.
# ------------------------------------------------------------------------------------------------

def _node(script: str) -> Any:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found (the JS half of the checks is tested with it)")
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_javascript_helpers_agree_with_python() -> None:
    cases = {"segments": [[a, b, r] for a, b, r, _ in SEGMENTS], "colours": [t for t, _ in COLOURS],
             "contrasts": [[f, b] for f, b, _ in CONTRASTS], "hues": [c for c, _, _ in HUES]}
    got = _node(cc.HELPERS_JS + f"""
const C = GVCHECK, cases = {json.dumps(cases)};
console.log(JSON.stringify({{
  segments: cases.segments.map(([a, b, r]) => [C.segHitsRect(a[0], a[1], b[0], b[1], r),
                                                C.segHitsRect(b[0], b[1], a[0], a[1], r)]),
  colours: cases.colours.map((s) => C.parseColor(s)),
  contrasts: cases.contrasts.map(([f, b]) => C.contrast(f, b)),
  hues: cases.hues.map((c) => C.hueSat(c)),
  over: C.over([255, 179, 0, 0.2], [255, 255, 255, 1]),
  polyline: [0, 1].map((inset) => C.polylineHitsRect([[-5, 0], [15, 0]], {json.dumps(R)}, inset)),
}}));""")
    assert got["segments"] == [[hits, hits] for *_, hits in SEGMENTS]
    for js, (_, rgba) in zip(got["colours"], COLOURS, strict=True):
        assert js == pytest.approx(rgba)
    assert [round(x, 2) for x in got["contrasts"]] == [r for *_, r in CONTRASTS]
    for js, (c, _, _) in zip(got["hues"], HUES, strict=True):
        assert js == pytest.approx(list(cc.hue_sat(c)))
    assert got["over"] == pytest.approx(list(cc.over((255, 179, 0, 0.2), (255, 255, 255))))
    assert got["polyline"] == [True, False]


# A fake Cytoscape with just what EDGE_CROSSING_JS reads: an open box "blocks.0" holding node a, a closed
# box b beside it, node c far right, a loss below. Edges: a -> loss (leaves the open box it starts in:
# fine), c -> a routed straight through b (a crossing), c -> loss around b (bent: fine), and b -> loss.
FAKE_CY = """
const mk = (id, kind, label, x1, y1, x2, y2, box) => ({
  id: () => id, data: (k) => ({ kind, box })[k], style: (k) => (k === 'label' ? label : ''),
  boundingBox: () => ({ x1, y1, x2, y2 }), position: () => ({ x: (x1 + x2) / 2, y: (y1 + y2) / 2 }),
  visible: () => true,
});
const N = {
  open: mk('c:blocks.0', 'expanded', 'blocks.0', 0, 0, 100, 100, undefined),
  a: mk('n:a', 'op', 'AddBackward0', 40, 40, 60, 60, 'c:blocks.0'),
  b: mk('c:blocks.1', 'collapsed', 'blocks.1\\nBlock', 150, 40, 200, 60, undefined),
  c: mk('n:c', 'leaf', 'wte.weight', 300, 40, 340, 60, undefined),
  loss: mk('n:loss', 'root', 'loss', 40, 200, 60, 220, undefined),
};
const pt = (x, y) => ({ x, y });
const ed = (id, s, t, sp, bends, tp) => ({ id: () => id, source: () => s, target: () => t,
  sourceEndpoint: () => sp, targetEndpoint: () => tp, segmentPoints: () => bends });
const E = [
  ed('e1', N.a, N.loss, pt(50, 60), [], pt(50, 200)),
  ed('e2', N.c, N.a, pt(300, 50), [], pt(60, 50)),
  ed('e3', N.c, N.loss, pt(320, 60), [pt(320, 210)], pt(60, 210)),
  ed('e4', N.b, N.loss, pt(175, 60), [pt(175, 205)], pt(60, 205)),
];
const nodes = { toArray: () => Object.values(N), [Symbol.iterator]: () => Object.values(N)[Symbol.iterator]() };
const cy = { nodes: () => nodes, edges: () => E };
const root = { __gradviz: { cy } };
"""


def test_edge_crossing_check_on_a_fake_graph() -> None:
    got = _node(FAKE_CY + f"console.log(JSON.stringify(({cc.EDGE_CROSSING_JS})(root, 1)));")
    assert got["checked"] == 4 and got["nodes"] == 5
    # only c -> a crosses: it runs through closed box blocks.1 (its entry into blocks.0, which holds a, is fine)
    assert [(c["edge"], c["crossed"]) for c in got["crossing"]] == [("wte.weight -> AddBackward0",
                                                                     ["collapsed blocks.1"])]

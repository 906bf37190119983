"""Checks of what a person sees on the graph canvas, measured in the page.

Each check is a JavaScript function evaluated on one widget's `.gradviz-root` element (through
`root.__gradviz.cy`, the Cytoscape instance), with a small Python wrapper that runs it on a Playwright
locator. The pure parts (segment/rectangle intersection, colour parsing, alpha compositing, WCAG
contrast) live in ONE JavaScript string, `HELPERS_JS`, used by every check, and are ported to Python
below (`seg_hits_rect`, `contrast`, ...) so the unit tests (tests/unit/test_canvas_checks.py) can pin
both to the same known answers (the JS through node).

Coordinates: Cytoscape's model units (what ELK and the stylesheet speak) for geometry; rendered
(container) pixels only for "is it on screen" and "how big is the text".
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

# ------------------------------------------------------------------------------------------------
# Pure helpers, in JavaScript (run in the page and in node) and in Python (same answers).
# ------------------------------------------------------------------------------------------------

HELPERS_JS = r"""
const GVCHECK = (() => {
  // Does segment a-b meet the closed rectangle r = {x1, y1, x2, y2}? (Liang-Barsky clipping.)
  function segHitsRect(ax, ay, bx, by, r) {
    if (!(r.x2 > r.x1 && r.y2 > r.y1)) return false;
    let t0 = 0, t1 = 1;
    const dx = bx - ax, dy = by - ay;
    const clip = (p, q) => {
      if (p === 0) return q >= 0;
      const t = q / p;
      if (p < 0) { if (t > t1) return false; if (t > t0) t0 = t; }
      else { if (t < t0) return false; if (t < t1) t1 = t; }
      return true;
    };
    return clip(-dx, ax - r.x1) && clip(dx, r.x2 - ax) && clip(-dy, ay - r.y1) && clip(dy, r.y2 - ay) && t0 <= t1;
  }
  // A polyline [[x, y], ...] against a rectangle shrunk by `inset` on every side (grazing is not crossing).
  function polylineHitsRect(pts, r, inset) {
    const s = { x1: r.x1 + inset, y1: r.y1 + inset, x2: r.x2 - inset, y2: r.y2 - inset };
    for (let i = 0; i + 1 < pts.length; i++) {
      if (segHitsRect(pts[i][0], pts[i][1], pts[i + 1][0], pts[i + 1][1], s)) return true;
    }
    return false;
  }
  // "rgb(1, 2, 3)", "rgba(1, 2, 3, 0.5)", "#abc", "#aabbcc" -> [r, g, b, a] (a in 0..1).
  function parseColor(s) {
    s = String(s).trim();
    let m = s.match(/^#([0-9a-f]{3}|[0-9a-f]{6})$/i);
    if (m) {
      const h = m[1].length === 3 ? m[1].split("").map((c) => c + c).join("") : m[1];
      return [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16)).concat([1]);
    }
    m = s.match(/^rgba?\(\s*([\d.]+)[\s,]+([\d.]+)[\s,]+([\d.]+)(?:[\s,/]+([\d.]+%?))?\s*\)$/i);
    if (!m) throw new Error("unparsed colour " + s);
    let a = m[4] === undefined ? 1 : m[4].endsWith("%") ? parseFloat(m[4]) / 100 : parseFloat(m[4]);
    return [parseFloat(m[1]), parseFloat(m[2]), parseFloat(m[3]), a];
  }
  // fg (with alpha a) over an opaque bg.
  function over(fg, bg, a) {
    const alpha = a === undefined ? fg[3] : a;
    return [0, 1, 2].map((i) => fg[i] * alpha + bg[i] * (1 - alpha)).concat([1]);
  }
  function luminance(c) {
    const lin = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    const [r, g, b] = c.slice(0, 3).map(lin);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }
  function contrast(a, b) {
    const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  }
  // Hue in degrees (0..360) and saturation (0..1, HSL) of an opaque colour.
  function hueSat(c) {
    const [r, g, b] = c.slice(0, 3).map((v) => v / 255);
    const mx = Math.max(r, g, b), mn = Math.min(r, g, b), d = mx - mn, l = (mx + mn) / 2;
    if (d === 0) return [0, 0];
    let h = mx === r ? ((g - b) / d) % 6 : mx === g ? (b - r) / d + 2 : (r - g) / d + 4;
    h *= 60; if (h < 0) h += 360;
    return [h, d / (1 - Math.abs(2 * l - 1))];
  }
  return { segHitsRect, polylineHitsRect, parseColor, over, luminance, contrast, hueSat };
})();
"""


def seg_hits_rect(a: Sequence[float], b: Sequence[float], r: dict[str, float]) -> bool:
    """Does segment a-b meet the closed rectangle r ({x1, y1, x2, y2})? Liang-Barsky, as `segHitsRect`."""
    if not (r["x2"] > r["x1"] and r["y2"] > r["y1"]):
        return False
    t0, t1 = 0.0, 1.0
    dx, dy = b[0] - a[0], b[1] - a[1]
    for p, q in ((-dx, a[0] - r["x1"]), (dx, r["x2"] - a[0]), (-dy, a[1] - r["y1"]), (dy, r["y2"] - a[1])):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            if t > t1:
                return False
            t0 = max(t0, t)
        else:
            if t < t0:
                return False
            t1 = min(t1, t)
    return t0 <= t1


def polyline_hits_rect(pts: Sequence[Sequence[float]], r: dict[str, float], inset: float = 1.0) -> bool:
    """A polyline against r shrunk by `inset` on every side, as `polylineHitsRect`."""
    s = {"x1": r["x1"] + inset, "y1": r["y1"] + inset, "x2": r["x2"] - inset, "y2": r["y2"] - inset}
    return any(seg_hits_rect(pts[i], pts[i + 1], s) for i in range(len(pts) - 1))


_HEX = re.compile(r"^#([0-9a-f]{3}|[0-9a-f]{6})$", re.I)
_RGB = re.compile(r"^rgba?\(\s*([\d.]+)[\s,]+([\d.]+)[\s,]+([\d.]+)(?:[\s,/]+([\d.]+%?))?\s*\)$", re.I)


def parse_color(s: str) -> tuple[float, float, float, float]:
    """CSS colour (hex or rgb()/rgba()) to (r, g, b, alpha 0..1), as `parseColor`."""
    s = s.strip()
    if m := _HEX.match(s):
        h = m[1] if len(m[1]) == 6 else "".join(c + c for c in m[1])
        return (int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16), 1.0)
    m = _RGB.match(s)
    if not m:
        raise ValueError(f"unparsed colour {s!r}")
    a = 1.0 if m[4] is None else float(m[4][:-1]) / 100 if m[4].endswith("%") else float(m[4])
    return (float(m[1]), float(m[2]), float(m[3]), a)


def over(fg: Sequence[float], bg: Sequence[float], alpha: float | None = None) -> tuple[float, float, float, float]:
    """fg with its alpha composited over an opaque bg, as `over`."""
    a = fg[3] if alpha is None else alpha
    r, g, b = (fg[i] * a + bg[i] * (1 - a) for i in range(3))
    return (r, g, b, 1.0)


def luminance(c: Sequence[float]) -> float:
    """WCAG 2 relative luminance of an sRGB colour (0..255 channels)."""
    def lin(v: float) -> float:
        v /= 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2])


def contrast(a: Sequence[float], b: Sequence[float]) -> float:
    """WCAG 2 contrast ratio, 1..21."""
    x, y = sorted((luminance(a), luminance(b)), reverse=True)
    return (x + 0.05) / (y + 0.05)


def hue_sat(c: Sequence[float]) -> tuple[float, float]:
    """HSL hue (degrees) and saturation (0..1), as `hueSat`."""
    r, g, b = (v / 255 for v in c[:3])
    mx, mn = max(r, g, b), min(r, g, b)
    d, lum = mx - mn, (mx + mn) / 2
    if d == 0:
        return (0.0, 0.0)
    if mx == r:
        h = math.fmod((g - b) / d, 6)
    elif mx == g:
        h = (b - r) / d + 2
    else:
        h = (r - g) / d + 4
    h *= 60
    if h < 0:
        h += 360
    return (h, d / (1 - abs(2 * lum - 1)))


AMBER_HUE = (30.0, 55.0)  # #f9a825 is 40 degrees, #ffb300 42; green (#e8f5e9) is 125, red 0-10


def is_amber(c: Sequence[float]) -> bool:
    """A warm yellow-orange with some saturation: what the partial-verification banner must look like."""
    h, s = hue_sat(c)
    return AMBER_HUE[0] <= h <= AMBER_HUE[1] and s >= 0.3


# ------------------------------------------------------------------------------------------------
# The checks, each `(root, arg) => result`, evaluated on a `.gradviz-root` element.
# ------------------------------------------------------------------------------------------------

# Visible nodes drawn as text in a box. Open boxes ("expanded") put their header above the box: only its
# width is checked against the box. Ghosts are dashed forward-only tensors, boxes all the same.
_NODES = "cy.nodes(':visible')"
_LABEL = "(n) => String(n.style('label') || '').split('\\n')[0]"

# Check 1: each visible node's label lines, measured with the node's own font in a 2d canvas, against
# the node's width/height in model units (font-size is in model units too). Uses Cytoscape's wrapped
# lines when it has drawn them (text-wrap: wrap breaks lines over text-max-width).
LABEL_OVERFLOW_JS = (
    "(root, tol) => {\n"
    "  const cy = root.__gradviz.cy; const name = " + _LABEL + ";\n"
    """  const ctx = document.createElement('canvas').getContext('2d');
  const out = [];
  let n_checked = 0;
  for (const n of """ + _NODES + """) {
    const label = String(n.style('label') || '');
    if (!label) continue;
    const cached = n._private.rscratch && n._private.rscratch.labelWrapCachedLines;
    const lines = Array.isArray(cached) && cached.length ? cached : label.split('\\n');
    const size = parseFloat(n.style('font-size'));
    ctx.font = `${n.style('font-style')} ${n.style('font-weight')} ${size}px ${n.style('font-family')}`;
    const textW = Math.max(...lines.map((l) => ctx.measureText(l).width));
    const textH = lines.length * size * parseFloat(n.style('line-height'));
    const w = n.width(), h = n.height(), kind = n.data('kind');
    n_checked++;
    const overW = textW - w, overH = kind === 'expanded' ? 0 : textH - h;
    if (overW > tol || overH > tol) {
      out.push({ id: n.id(), kind, label: label.replace(/\\n/g, ' | '), textW: +textW.toFixed(1), w: +w.toFixed(1),
                 textH: +textH.toFixed(1), h: +h.toFixed(1), font: ctx.font });
    }
  }
  return { checked: n_checked, overflow: out };
}"""
)

# Check 2: every visible edge's drawn polyline (source endpoint, bend points, target endpoint, model
# units) against every visible node's box, except the edge's own endpoints and any open box holding
# an endpoint (by membership, data('box') up the chain, or by geometry). Open boxes count with their
# header label; a 1-unit inset lets a line graze a border.
EDGE_CROSSING_JS = (
    "(root, inset) => {\n" + HELPERS_JS + "\n  const cy = root.__gradviz.cy; const name = " + _LABEL + ";\n"
    """  const nodes = """ + _NODES + """.toArray();
  const rect = (n) => n.boundingBox({ includeLabels: n.data('kind') === 'expanded', includeOverlays: false });
  const boxes = nodes.map((n) => ({ n, r: rect(n) }));
  const byId = new Map(nodes.map((n) => [n.id(), n]));
  const inside = (p, r) => p.x >= r.x1 && p.x <= r.x2 && p.y >= r.y1 && p.y <= r.y2;
  const holders = (end) => {
    const ids = new Set([end.id()]);
    for (let b = end.data('box'); b; ) {  // membership: the open boxes around a member
      const id = String(b).startsWith('c:') ? String(b) : 'c:' + b;
      if (ids.has(id)) break;
      ids.add(id);
      const box = byId.get(id);
      b = box ? box.data('box') : null;
    }
    const c = end.position();
    for (const { n, r } of boxes) if (n.data('kind') === 'expanded' && inside(c, r)) ids.add(n.id());
    return ids;
  };
  const out = [];
  let checked = 0;
  for (const e of cy.edges(':visible')) {
    const s = e.source(), t = e.target();
    if (!s.visible() || !t.visible()) continue;
    const pts = [e.sourceEndpoint(), ...(e.segmentPoints() || []), e.targetEndpoint()]
      .filter((p) => p && Number.isFinite(p.x) && Number.isFinite(p.y)).map((p) => [p.x, p.y]);
    if (pts.length < 2) continue;
    checked++;
    const skip = new Set([...holders(s), ...holders(t)]);
    const crossed = boxes.filter(({ n, r }) => !skip.has(n.id()) && GVCHECK.polylineHitsRect(pts, r, inset));
    if (crossed.length) {
      out.push({ edge: `${name(s)} -> ${name(t)}`, id: e.id(), points: pts.length,
                 crossed: crossed.map(({ n }) => `${n.data('kind')} ${name(n)}`) });
    }
  }
  return { checked, nodes: nodes.length, crossing: out };
}"""
)

# Checks 3 and 4: the first view. The loss's box (rendered pixels) inside the canvas, and the smallest
# node text in rendered pixels (font-size x zoom).
FIRST_VIEW_JS = (
    "(root) => {\n  const cy = root.__gradviz.cy; const name = " + _LABEL + ";\n"
    """  const loss = cy.nodes('[kind = "root"]').filter(':visible');
  const sizes = """ + _NODES + """.map((n) => [parseFloat(n.style('font-size')) * cy.zoom(), name(n)]);
  sizes.sort((a, b) => a[0] - b[0]);
  const msg = root.querySelector('[data-testid=gradviz-message]');
  return {
    zoom: cy.zoom(), w: cy.width(), h: cy.height(),
    loss: loss.length ? loss.first().renderedBoundingBox({ includeLabels: false, includeOverlays: false }) : null,
    lossLabel: loss.length ? name(loss.first()) : null,
    minFontPx: sizes.length ? sizes[0][0] : null, smallest: sizes.slice(0, 3),
    nodes: sizes.length, message: msg ? msg.textContent : '',
    selected: (root.querySelector('[data-testid=gradviz-details-title]') || {}).textContent || '',
    canvas: root.querySelector('.gradviz-canvas').getBoundingClientRect().toJSON(),
  };
}"""
)

# Check 6: WCAG contrast of every visible node's text against what is behind it, as the eye gets it: its
# own fill (alpha composited over the canvas background), or for an open box's header (drawn above the box)
# the fill of the open box around it, else the canvas background; the text colour's alpha and text-opacity
# composited on that, then both faded by the element's effective opacity. `inactive` marks what-if's pruned
# nodes (faded on purpose: "does not run"), which WCAG exempts as inactive components; the test skips them.
CONTRAST_JS = (
    "(root) => {\n" + HELPERS_JS + "\n  const cy = root.__gradviz.cy; const name = " + _LABEL + ";\n"
    """  const C = GVCHECK;
  let bgEl = root.querySelector('.gradviz-canvas'), bg = null;
  while (bgEl && !bg) {
    const c = C.parseColor(getComputedStyle(bgEl).backgroundColor);
    if (c[3] > 0) bg = c[3] < 1 ? C.over(c, [255, 255, 255, 1]) : c;
    bgEl = bgEl.parentElement;
  }
  bg = bg || [255, 255, 255, 1];
  const byId = new Map(cy.nodes().map((n) => [n.id(), n]));
  const fill = (n) => C.over(C.parseColor(n.style('background-color')), bg,
                             C.parseColor(n.style('background-color'))[3] * parseFloat(n.style('background-opacity')));
  const out = [];
  for (const n of """ + _NODES + """) {
    if (!String(n.style('label') || '')) continue;
    let behind = bg;
    if (n.data('kind') === 'expanded') {
      const b = n.data('box'), parent = b && (byId.get(String(b)) || byId.get('c:' + b));
      if (parent) behind = fill(parent);
    } else behind = fill(n);
    const fg = C.parseColor(n.style('color'));
    const o = n.effectiveOpacity();
    const text = C.over(C.over(fg, behind, fg[3] * parseFloat(n.style('text-opacity'))), bg, o);
    const under = n.data('kind') === 'expanded' ? behind : C.over(behind, bg, o);
    out.push({ label: name(n), kind: n.data('kind'), ratio: +C.contrast(text, under).toFixed(2),
               color: n.style('color'), opacity: o, inactive: n.hasClass('wi-pruned'),
               fill: `rgb(${under.slice(0, 3).map(Math.round).join(', ')})` });
  }
  return { background: bg, nodes: out, theme: root.dataset.theme || null };
}"""
)

# Check 7: the verification banner's classes and colours (background composited over the widget's).
BANNER_JS = (
    "(root) => {\n" + HELPERS_JS + "\n"
    """  const C = GVCHECK;
  const el = root.querySelector('[data-testid=gradviz-verified]');
  if (!el || el.hidden) return null;
  let bgEl = el.parentElement, bg = null;
  while (bgEl && !bg) {
    const c = C.parseColor(getComputedStyle(bgEl).backgroundColor);
    if (c[3] > 0) bg = c;
    bgEl = bgEl.parentElement;
  }
  bg = bg || [255, 255, 255, 1];
  const cs = getComputedStyle(el);
  const own = C.parseColor(cs.backgroundColor);
  const shown = C.over(own, bg);
  const text = C.parseColor(cs.color);
  return { cls: el.className, text: el.innerText, background: shown, bar: C.parseColor(cs.borderLeftColor),
           barWidth: parseFloat(cs.borderLeftWidth), contrast: C.contrast(C.over(text, shown), shown) };
}"""
)

# Check 5: every Bokeh figure view inside an output element (Bokeh draws in shadow DOM; BokehJS keeps
# the views in `Bokeh.index`), its width against the output's.
BOKEH_WIDTHS_JS = """(out) => {
  const r = out.getBoundingClientRect();
  const figs = [];
  const B = window.Bokeh;
  if (!B || !B.index) return { output: r.width, figures: figs };
  for (const v of B.index.all_views()) {
    if (!(v.frame && v.canvas_view && v.model)) continue;  // a plot's view: it has a frame and a canvas
    const fr = v.el.getBoundingClientRect();
    const inOut = fr.width > 0 && fr.left >= r.left - 1 && fr.right <= r.right + 1 && fr.top >= r.top - 1
      && fr.bottom <= r.bottom + 1;
    const title = v.model.title ? v.model.title.text : '';
    if (inOut) figs.push({ name: v.model.name || '(unnamed)', width: fr.width, title });
  }
  return { output: r.width, figures: figs };
}"""


# Check 8: the subject in view. Rendered boxes of what each view is about, found by what the canvas paints
# (not by asking the camera): what-if's lost leaves (or the closed boxes holding them), a diff's changes,
# the doctor's marks, plus `extra` element ids (boxes opened from Python); and the whole graph's box.
SUBJECT_SEL = {
    "whatif": "node.wi-lost, node.wi-haslost",
    "diff": "node.df-added, node.df-changed, node.df-removed, node.df-box",
    "doctor": "node.ov-nan, node.ov-no-grad, node.ov-flag",
    "stepper": "node.st-run, node.st-runbox",
    # A detach that cuts parameters off (its "from detach() in ..." stub): the page's first view is about the cut.
    "cut": 'node[kind = "ghost"][label ^= "from detach"]',
}
SUBJECT_VIEW_JS = """(root, [sel, extra]) => {
  const cy = root.__gradviz.cy;
  const box = (e) => e.renderedBoundingBox({ includeLabels: false, includeOverlays: false });
  const eles = sel ? cy.$(sel) : cy.collection();
  const more = extra.map((id) => cy.getElementById(id)).filter((e) => e.nonempty());
  return { w: cy.width(), h: cy.height(), zoom: cy.zoom(), graph: box(cy.elements()),
           subject: [...eles.toArray(), ...more].map((e) => ({ id: e.id(), ...box(e) })) };
}"""


def subject_view(root: Any, kinds: Sequence[str], extra: Sequence[str] = ()) -> dict[str, Any]:
    """Check 8: the canvas size and zoom, the graph's and the subject's (of any of `kinds`) rendered boxes."""
    sel = ", ".join(SUBJECT_SEL[k] for k in kinds)
    result: dict[str, Any] = root.evaluate(SUBJECT_VIEW_JS, [sel, list(extra)])
    return result


def on_canvas(b: dict[str, float], view: dict[str, Any], tol: float = 1.0) -> bool:
    """A rendered box lies wholly inside the canvas."""
    return bool(b["x1"] >= -tol and b["y1"] >= -tol and b["x2"] <= view["w"] + tol and b["y2"] <= view["h"] + tol)


def graph_shown(view: dict[str, Any], share: float = 0.15) -> bool:
    """At least `share` of the graph's box (of the canvas, for a bigger graph) is on the canvas on each axis."""
    g = view["graph"]
    ow = min(g["x2"], view["w"]) - max(g["x1"], 0.0)
    oh = min(g["y2"], view["h"]) - max(g["y1"], 0.0)
    need_w = share * min(g["x2"] - g["x1"], view["w"]) - 1
    return bool(ow >= need_w and oh >= share * min(g["y2"] - g["y1"], view["h"]) - 1)


def label_overflow(root: Any, tol: float = 1.0) -> dict[str, Any]:
    """Check 1 on one `.gradviz-root` locator: {'checked': n, 'overflow': [...]}."""
    result: dict[str, Any] = root.evaluate(LABEL_OVERFLOW_JS, tol)
    return result


def edge_crossings(root: Any, inset: float = 1.0) -> dict[str, Any]:
    """Check 2: {'checked': n, 'nodes': n, 'crossing': [{'edge', 'crossed': [...]}, ...]}."""
    result: dict[str, Any] = root.evaluate(EDGE_CROSSING_JS, inset)
    return result


def first_view(root: Any) -> dict[str, Any]:
    """Checks 3 and 4: zoom, canvas size, the loss's rendered box, the smallest node text in px."""
    result: dict[str, Any] = root.evaluate(FIRST_VIEW_JS)
    return result


def loss_inside(view: dict[str, Any], tol: float = 1.0) -> bool:
    """The loss's rendered box lies inside the canvas (0..w, 0..h)."""
    b = view["loss"]
    if b is None:
        return False
    return bool(b["x1"] >= -tol and b["y1"] >= -tol and b["x2"] <= view["w"] + tol and b["y2"] <= view["h"] + tol)


def text_contrast(root: Any) -> dict[str, Any]:
    """Check 6: per visible node, the text/fill contrast ratio."""
    result: dict[str, Any] = root.evaluate(CONTRAST_JS)
    return result


def banner(root: Any) -> dict[str, Any] | None:
    """Check 7: the verification banner's class, text and colours, or None when none is shown."""
    result: dict[str, Any] | None = root.evaluate(BANNER_JS)
    return result


def bokeh_widths(output: Any) -> dict[str, Any]:
    """Check 5: the Bokeh figures drawn inside one output element and that element's width."""
    result: dict[str, Any] = output.evaluate(BOKEH_WIDTHS_JS)
    return result

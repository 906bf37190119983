"""The current view as PNG or SVG, from Python, with no front end attached.

The widget's state is exported as a self-contained page (:mod:`gradviz_nb.export.html`), opened in
headless Chromium (Playwright), laid out by the real front end, then
- PNG: Cytoscape's own ``cy.png({full: true, scale})``;
- SVG: positions, sizes and colours read from Cytoscape and written here as plain SVG (boxes, text
  labels escaped, edges as polylines), so no extra JavaScript dependency is needed.
"""

from __future__ import annotations

import base64
import os
import pathlib
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

from gradviz_nb.errors import GradvizError
from gradviz_nb.export.html import export_html

if TYPE_CHECKING:
    from gradviz_nb.tracing.graph import AutogradGraph
    from gradviz_nb.widgets.graph_widget import GraphWidget

CHROMIUM = os.environ.get("GRADVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 60_000

# Everything the SVG writer needs, read from Cytoscape after layout (model coordinates).
READ_VIEW = """() => {
  const cy = document.querySelector('.gradviz-root').__gradviz.cy;
  const num = (v) => parseFloat(v) || 0;
  const nodes = cy.nodes(':visible').map((n) => {
    const b = n.boundingBox({ includeLabels: false, includeOverlays: false });
    return { id: n.id(), label: String(n.data('label') ?? ''), parent: n.isParent(),
             x1: b.x1, y1: b.y1, w: b.w, h: b.h, depth: n.ancestors().length,
             fill: n.style('background-color'), fillOpacity: num(n.style('background-opacity')),
             stroke: n.style('border-color'), strokeWidth: num(n.style('border-width')),
             dashed: n.style('border-style') === 'dashed', color: n.style('color'),
             fontSize: num(n.style('font-size')) || 10, valign: n.style('text-valign'),
             opacity: num(n.style('opacity')) };
  });
  const edges = cy.edges(':visible').map((e) => {
    const pts = [e.sourceEndpoint(), ...(e.segmentPoints() || e.controlPoints() || []), e.targetEndpoint()];
    return { points: pts.map((p) => [p.x, p.y]), color: e.style('line-color'),
             width: num(e.style('width')), dashed: e.style('line-style') !== 'solid',
             label: String(e.style('label') || ''), opacity: num(e.style('opacity')) };
  });
  return { nodes, edges };
}"""


def in_page(widget: GraphWidget | AutogradGraph, script: str, arg: Any = None, width: int = 1200) -> Any:
    """Export the view as a page, lay it out in headless Chromium, and return ``script(arg)`` evaluated there.

    Playwright's sync API refuses to run where an asyncio loop is running (a Jupyter kernel), so the
    browser is driven from a short-lived worker thread.
    """
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as err:
        raise GradvizError(
            "image export renders the view in headless Chromium through Playwright: "
            "`pip install playwright` and `apt-get install -y chromium` (or set GRADVIZ_CHROMIUM)."
        ) from err
    if not pathlib.Path(CHROMIUM).exists():
        raise GradvizError(
            f"image export needs Chromium at {CHROMIUM}: `apt-get install -y chromium`, or set GRADVIZ_CHROMIUM "
            "to a Chromium/Chrome executable. Or save the page with save_html and use the browser."
        )
    with tempfile.TemporaryDirectory(prefix="gradviz_") as tmp:
        page_file = export_html(widget, pathlib.Path(tmp) / "view.html")
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(_evaluate, page_file, script, arg, width).result()


def _evaluate(page_file: pathlib.Path, script: str, arg: Any, width: int) -> Any:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_file.as_uri())
            page.wait_for_function("() => window.gradvizReady !== undefined", timeout=TIMEOUT_MS)
            page.evaluate("() => window.gradvizReady")
            if errors:
                raise GradvizError(f"the exported page failed to render: {errors[0]}")
            return page.evaluate(script, arg)
        finally:
            browser.close()


def save_png(widget: GraphWidget | AutogradGraph, path: str | os.PathLike[str], scale: float = 2) -> pathlib.Path:
    """Write the whole current view (all of it, not just what fits) as PNG at ``scale`` x resolution."""
    data = in_page(
        widget,
        "(scale) => document.querySelector('.gradviz-root').__gradviz.cy"
        ".png({ full: true, scale, bg: '#ffffff', output: 'base64' })",
        scale,
    )
    out = pathlib.Path(path)
    out.write_bytes(base64.b64decode(data))
    return out


def save_svg(widget: GraphWidget | AutogradGraph, path: str | os.PathLike[str]) -> pathlib.Path:
    """Write the current view as SVG: module boxes, nodes with their labels as text, edges as polylines."""
    out = pathlib.Path(path)
    out.write_text(svg_text(in_page(widget, READ_VIEW)), encoding="utf-8")
    return out


def svg_text(view: dict[str, Any], margin: float = 20) -> str:
    """SVG for the nodes and edges read from Cytoscape (see ``READ_VIEW``); every label escaped."""
    nodes, edges = view["nodes"], view["edges"]
    xs = [n["x1"] for n in nodes] + [n["x1"] + n["w"] for n in nodes] + [p[0] for e in edges for p in e["points"]]
    ys = [n["y1"] for n in nodes] + [n["y1"] + n["h"] for n in nodes] + [p[1] for e in edges for p in e["points"]]
    x0, y0 = (min(xs) - margin, min(ys) - margin) if xs else (0.0, 0.0)
    w, h = ((max(xs) - x0 + margin), (max(ys) - y0 + margin)) if xs else (100.0, 100.0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
        f'viewBox="{x0:.1f} {y0:.1f} {w:.1f} {h:.1f}" font-family="Helvetica, Arial, sans-serif">',
        f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" fill="#ffffff"/>',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#888888"/></marker></defs>',
    ]
    for n in sorted((n for n in nodes if n["parent"]), key=lambda n: n["depth"]):  # boxes, outermost first
        parts.append(_node_svg(n))
    for e in edges:
        parts.append(_edge_svg(e))
    for n in nodes:
        if not n["parent"]:
            parts.append(_node_svg(n))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _node_svg(n: dict[str, Any]) -> str:
    dash = ' stroke-dasharray="4 3"' if n["dashed"] else ""
    rect = (
        f'<rect x="{n["x1"]:.1f}" y="{n["y1"]:.1f}" width="{n["w"]:.1f}" height="{n["h"]:.1f}" rx="4" '
        f'fill={quoteattr(n["fill"] or "#eeeeee")} fill-opacity="{n["fillOpacity"]:.2f}" '
        f'stroke={quoteattr(n["stroke"] or "#888888")} stroke-width="{n["strokeWidth"]:.1f}"{dash}/>'
    )
    lines = n["label"].split("\n")
    size = n["fontSize"]
    cx = n["x1"] + n["w"] / 2
    top = n["y1"] - 4 if n["parent"] and n["valign"] == "top" else (
        n["y1"] + n["h"] / 2 - (len(lines) - 1) * size * 0.6 + size * 0.35)
    tspans = "".join(
        f'<tspan x="{cx:.1f}" dy="{0 if i == 0 else size * 1.2:.1f}">{escape(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    text = (f'<text x="{cx:.1f}" y="{top:.1f}" font-size="{size:.0f}" text-anchor="middle" '
            f'fill={quoteattr(n["color"] or "#222222")}>{tspans}</text>')
    return f'<g opacity="{n["opacity"]:.2f}">{rect}{text}</g>'


def _edge_svg(e: dict[str, Any]) -> str:
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in e["points"])
    dash = ' stroke-dasharray="5 4"' if e["dashed"] else ""
    line = (f'<polyline points="{points}" fill="none" stroke={quoteattr(e["color"] or "#888888")} '
            f'stroke-width="{max(e["width"], 0.5):.1f}"{dash} marker-end="url(#arrow)"/>')
    label = ""
    if e["label"]:
        (ax, ay), (bx, by) = e["points"][len(e["points"]) // 2 - 1], e["points"][len(e["points"]) // 2]
        label = (f'<text x="{(ax + bx) / 2 + 3:.1f}" y="{(ay + by) / 2:.1f}" font-size="8" fill="#666666">'
                 f"{escape(e['label'])}</text>")
    return f'<g opacity="{e["opacity"]:.2f}">{line}{label}</g>'

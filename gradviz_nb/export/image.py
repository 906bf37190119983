"""The current view as PNG or SVG, from Python, with no front end attached.

A view's state (a ``page.Snapshot``: a widget's, or one built from anything ``GraphWidget`` accepts) is
written as a self-contained page (:mod:`gradviz_nb.export.html`), opened in
headless Chromium (Playwright), laid out by the real front end, and the page's own exporters answer
(the same the toolbar's PNG / SVG buttons use, so there is one SVG writer, ``js/src/view/svg.ts``):
- PNG: ``__gradviz.toPNG(scale)``, Cytoscape's ``cy.png({full: true, scale})``;
- SVG: ``__gradviz.toSVG()``: module boxes, nodes with their fill and border colours, labels as
  escaped ``<text>``, edges as polylines along their routes with arrowheads.
"""

from __future__ import annotations

import base64
import os
import pathlib
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gradviz_nb.errors import GradvizError
from gradviz_nb.export.html import write_html
from gradviz_nb.files import target, write_atomic
from gradviz_nb.validate import finite_number
from gradviz_nb.widgets.page.state import page_snapshot

CHROMIUM = os.environ.get("GRADVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 60_000

HOOK = "document.querySelector('.gradviz-root').__gradviz"


def in_page(view: Any, script: str, arg: Any = None, width: int = 1200) -> Any:
    """Export ``view`` (a ``page.Snapshot``, a widget, or anything ``GraphWidget`` accepts) as a page, lay
    it out in headless Chromium, and return ``script(arg)`` evaluated there.

    Playwright's sync API refuses to run where an asyncio loop is running (a Jupyter kernel), so the
    browser is driven from a short-lived worker thread.
    """
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as err:
        raise GradvizError(
            "image export renders the view in headless Chromium through Playwright: "
            "`pip install gradviz_nb[image]` and `apt-get install -y chromium` (or set GRADVIZ_CHROMIUM)."
        ) from err
    if not pathlib.Path(CHROMIUM).exists():
        raise GradvizError(
            f"image export needs Chromium at {CHROMIUM}: `apt-get install -y chromium`, or set GRADVIZ_CHROMIUM "
            "to a Chromium/Chrome executable. Or save the page with save_html and use the browser."
        )
    snap = page_snapshot(view)
    with tempfile.TemporaryDirectory(prefix="gradviz_") as tmp:
        page_file = write_html(snap, pathlib.Path(tmp) / "view.html")
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


MAX_SCALE = 10
"""``save_png``'s largest ``scale``: beyond it even a small graph's canvas outgrows what Chromium draws."""
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _check_aspect(aspect: object) -> float | None:
    if aspect is None:
        return None
    return finite_number("aspect", aspect, lo=0.1, hi=10,
                         hint="aspect is the picture's width / height (e.g. 16 / 9), or None for the view's own.")


def _check_scale(scale: object) -> float:
    return finite_number("scale", scale, lo=0, lo_open=True, hi=MAX_SCALE,
                         hint="scale multiplies the resolution (2: twice the on-screen size).")


# With an aspect, the view is laid out again in columns (ELK's graph wrapping) before the picture.
_WRAP = f"if (aspect) await {HOOK}.wrap(aspect);"


def save_png(view: Any, path: str | os.PathLike[str], scale: float = 2, aspect: float | None = None) -> pathlib.Path:
    """Write the whole current view (all of it, not just what fits) as PNG at ``scale`` x resolution.
    ``aspect`` (width / height, e.g. ``16 / 9``) lays a long graph out in columns that fit a slide,
    instead of one tall strip.

    ``scale`` must be finite, > 0 and <= :data:`MAX_SCALE`; ``aspect`` finite, 0.1 to 10; ``path`` a ``.png`` file
    in an existing directory. All three are checked before the browser starts, and the file is written
    atomically: a refused argument or a failed render leaves an existing file byte for byte."""
    try:
        scale, aspect = _check_scale(scale), _check_aspect(aspect)
    except GradvizError as err:
        raise GradvizError(f"save_png: {err}") from None
    out = target("path", path, (".png",), "save_png")
    script = f"async ([scale, aspect]) => {{ {_WRAP} return {HOOK}.toPNG(scale); }}"
    data_url: str = in_page(view, script, [scale, aspect])
    png = base64.b64decode(data_url.split(",", 1)[1]) if isinstance(data_url, str) and "," in data_url else b""
    if not png.startswith(_PNG_SIGNATURE):  # "data:," when the canvas is larger than the browser draws
        raise GradvizError(f"save_png: the browser drew no picture at scale={scale:g} (the view is too large "
                           "for its canvas); try a smaller scale. Nothing was written.")
    return write_atomic(out, png, "save_png")


def save_svg(view: Any, path: str | os.PathLike[str], aspect: float | None = None) -> pathlib.Path:
    """Write the whole current view as SVG: module boxes, nodes with their labels as text, edges with arrows.
    ``aspect`` as in :func:`save_png`."""
    try:
        aspect = _check_aspect(aspect)
    except GradvizError as err:
        raise GradvizError(f"save_svg: {err}") from None
    out = target("path", path, (".svg",), "save_svg")
    svg = in_page(view, f"async (aspect) => {{ {_WRAP} return {HOOK}.toSVG(); }}", aspect)
    if not isinstance(svg, str) or "<svg" not in svg:
        raise GradvizError("save_svg: the page returned no SVG. Nothing was written.")
    return write_atomic(out, svg.encode("utf-8", "backslashreplace"), "save_svg")

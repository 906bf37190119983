"""A saved notebook keeps its pictures: nbconvert's HTML offline, and JupyterLab reopening it.

The notebook is executed by nbclient with ``store_widget_state=True`` (the widget state, each widget's
small ``_esm`` loader and the one runtime model holding the canvas code, lands in the notebook's
metadata), converted by nbconvert's HTML exporter with its defaults, and opened in headless Chromium
with every request but ``file:`` and ``data:`` blocked. nbconvert's page asks a CDN for
``@jupyter-widgets/html-manager``; blocked, the widget output stays empty, and the static SVG that
``GraphWidget`` displays after itself (``gradviz_nb/widgets/static_fallback.py``) must show the graph
instead: every box with its text. Where the widget does draw (the live JupyterLab and Notebook 7
tests), the same output must stay hidden: checked in ``test_jupyterlab_widget.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from nbformat.sign import NotebookNotary
from playwright.sync_api import Page, Route

from .jupyterlab import ConsoleLog, JupyterLabServer, LabNotebook

CELLS = [
    """\
import torch
from torch import nn
import gradviz_nb as gv

class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(3, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))

torch.manual_seed(0)
model = TinyMLP()
with gv.capture(model) as cap:
    loss = model(torch.randn(2, 3)).pow(2).mean()
gv.GraphWidget(loss, model=model, capture=cap)  # small: every box open""",
    """\
closed = gv.GraphWidget(loss, model=model, capture=cap)
closed.expanded = []  # both module boxes closed
closed""",
]
# What each picture must show: the open view's leaves and ops, the closed view's two boxes.
OPEN_TEXTS = ["hidden.weight", "hidden.bias", "out.weight", "Tanh", "Mean"]
CLOSED_TEXTS = ["▸ hidden · Linear", "▸ out · Linear", "Tanh", "Mean"]


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, nbformat.NotebookNode]]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    base = tmp_path_factory.mktemp("saved")
    t0 = time.monotonic()
    NotebookClient(nb, store_widget_state=True, timeout=180, resources={"metadata": {"path": str(base)}}).execute()
    print(f"\nnbclient ran the notebook in {time.monotonic() - t0:.1f} s")
    path = base / "saved.ipynb"
    nbformat.write(nb, path)
    yield path, nb


def _texts(page: Page, scope: str) -> list[list[str]]:
    """The text of every box in each visible static picture, in page order."""
    return list(
        page.evaluate(
            """(scope) => [...document.querySelectorAll(scope + ' .gradviz-static')]
                .filter((el) => el.getBoundingClientRect().height > 0)
                .map((el) => [...el.querySelectorAll('svg text')].map((t) => t.textContent))""",
            scope,
        )
    )


def test_saved_state_holds_the_widget(executed: tuple[Path, Any]) -> None:
    """nbclient kept both GraphWidgets' state (each with the small loader as `_esm`), the one runtime model
    holding the canvas code that both reference, and the hidden pictures."""
    _, nb = executed
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    graphs = [m["state"] for m in state.values() if m["model_name"] == "AnyModel"]
    runtimes = [k for k, m in state.items() if "code" in m["state"] and m["model_name"] == "WidgetModel"]
    assert len(graphs) == 2 and all(len(g["_esm"]) < 10_000 for g in graphs)
    assert len(runtimes) == 1 and len(state[runtimes[0]]["state"]["code"]) > 100_000
    assert {g["_runtime"] for g in graphs} == {f"IPY_MODEL_{runtimes[0]}"}
    assert sorted(len(g["expanded"]) for g in graphs) == [0, 2]
    for cell in nb.cells:
        kinds = [list(o.get("data", {})) for o in cell.outputs]
        assert kinds == [["text/plain", "application/vnd.jupyter.widget-view+json"], ["text/html", "text/plain"]]


def test_nbconvert_html_offline_shows_the_graphs(
    executed: tuple[Path, Any], chromium: Any, screenshot_dir: Path, stopwatch: dict[str, float]
) -> None:
    path, nb = executed
    t0 = time.monotonic()
    body, _ = HTMLExporter().from_notebook_node(nb)
    html_path = path.with_suffix(".html")
    html_path.write_text(body, encoding="utf-8")
    stopwatch["nbconvert"] = time.monotonic() - t0
    assert "@jupyter-widgets/html-manager" in body  # what nbconvert's page would fetch, if it could

    blocked: list[str] = []

    def offline(route: Route) -> None:
        url = route.request.url
        if url.startswith(("file:", "data:")):
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    context = chromium.new_context(viewport={"width": 1000, "height": 1400})
    try:
        context.route("**/*", offline)
        page = context.new_page()
        console = ConsoleLog()
        console.attach(page)
        page.goto(html_path.as_uri(), wait_until="load")
        page.wait_for_timeout(500)  # let the (blocked) widget script settle
        pictures = _texts(page, "body")
        page.screenshot(path=str(screenshot_dir / "nbconvert_offline.png"), full_page=True)
    finally:
        context.close()
    print("blocked requests:", *blocked, sep="\n  ")
    assert any("html-manager" in u for u in blocked), blocked  # the page really was cut off
    assert len(pictures) == 2, pictures
    for want, got in zip([OPEN_TEXTS, CLOSED_TEXTS], pictures, strict=True):
        missing = [t for t in want if not any(t in g for g in got)]
        assert not missing, f"not in the picture: {missing}; it shows {got}"
    assert not any("hidden.weight" in g for g in pictures[1])  # the closed view hides the box's leaves
    # The only errors allowed: the blocked scripts, reported as failed loads.
    assert all("ERR_FAILED" in e or "net::" in e for e in console.errors), console.errors


def _write_signed(nb_node: Any, path: Path, server: JupyterLabServer) -> None:
    """Sign as JupyterLab signs a notebook its user saves (the server's own JUPYTER_DATA_DIR secret)."""
    signed = nbformat.from_dict(nb_node)
    NotebookNotary(data_dir=str(server.base / "data")).sign(signed)
    nbformat.write(signed, path)


def _shown_as(nb: LabNotebook, index: int) -> str | None:
    """"canvas" or "picture" once exactly one of them is visible in the output of cell ``index``."""
    out = nb.cell(index).locator(".jp-OutputArea")
    canvas = out.locator(".gradviz-canvas canvas").first
    picture = out.locator(".gradviz-static").first
    drawn = canvas.count() > 0 and canvas.is_visible()
    fallback = picture.count() > 0 and picture.is_visible()
    assert not (drawn and fallback), f"cell {index} shows its graph twice"
    return "canvas" if drawn else "picture" if fallback else None


def test_jupyterlab_reopens_saved_notebooks(
    executed: tuple[Path, Any], jupyterlab: JupyterLabServer, lab_page: Page, screenshot_dir: Path
) -> None:
    """Two ways a saved notebook comes back in JupyterLab, each with its graphs visible once:

    - with saved widget state (signed, as the user's own): JupyterLab rebuilds the widgets from the
      state, so the canvases draw and the static pictures stay hidden. Not always: ipywidgets 8.1.9
      can mark its restore done when the kernel connects, before the notebook's state is loaded (read
      in its bundle: `restoreWidgets` on "connected"), and then says "model not found" anyway: seen
      in 1 of 5 runs here, on two busy cores.
      So either is accepted per widget, the canvas or the picture, and never both or neither;
    - saved without widget state: "Error displaying widget: model not found", and the static picture
      below each shows the graph instead.

    An unsigned notebook (someone else's) is untrusted: JupyterLab sanitizes the picture's HTML (no
    CSS, no SVG), so the picture never shows there; not asserted, as what the widget output shows
    then varied between runs ("Loading widget..." or its text/plain).
    """
    _, nb_node = executed
    _write_signed(nb_node, jupyterlab.root / "saved.ipynb", jupyterlab)
    without_state = nbformat.from_dict(nb_node)
    del without_state.metadata["widgets"]
    _write_signed(without_state, jupyterlab.root / "nostate.ipynb", jupyterlab)

    saved = LabNotebook(jupyterlab, lab_page, "saved.ipynb").open()
    first = [saved.poll(lambda i=i: _shown_as(saved, i), 60.0, f"cell {i}'s graph shown") for i in (0, 1)]
    time.sleep(2.0)  # settled: a picture shown while a widget still loads would be replaced by now
    shown = [_shown_as(saved, i) for i in (0, 1)]
    print("saved.ipynb reopened, each graph shown as:", first, "then", shown)
    assert None not in shown, shown
    lab_page.screenshot(path=str(screenshot_dir / "jupyterlab_reopened_saved_state.png"))

    nostate = LabNotebook(jupyterlab, lab_page, "nostate.ipynb").open()
    nostate.cell(1).locator(".gradviz-static").wait_for(state="visible", timeout=30_000)
    assert "model not found" in nostate.output_text(0)
    assert lab_page.locator(".jp-NotebookPanel:visible .gradviz-root").count() == 0
    pictures = _texts(lab_page, "body")
    assert len(pictures) == 2 and all(any(t in g for g in pictures[0]) for t in OPEN_TEXTS), pictures
    lab_page.screenshot(path=str(screenshot_dir / "jupyterlab_reopened_fallback.png"))
    # ipywidgets logs each "model not found" as a console error: expected here, and nothing else.
    errors = lab_page.console_log.errors  # type: ignore[attr-defined]
    assert all("model not found" in e for e in errors), errors

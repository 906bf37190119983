"""A notebook saved with widget state draws every graph again when reopened, the canvas code coming from
the ONE runtime model saved in it (`gradviz_nb/widgets/runtime.py`), not from each widget.

nbclient executes a notebook with four GraphWidgets (open, closed, a recorded backward pass, a diff)
and a Dashboard, with `store_widget_state=True`, as a user's saved notebook. JupyterLab and Notebook 7
open it signed (the user's own) on a fresh kernel that never runs a cell: the kernel that made the
widgets is gone, every model comes from the saved state. (JupyterLab with "No Kernel" restores no
widget state at all: ipywidgets 8.1.9 loads the notebook's state only after its kernel restore, which
throws without a kernel; the same before and after the runtime.) Each widget's loader finds the runtime
model through the widget manager, the page decodes the code once, and each canvas draws its nodes.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from playwright.sync_api import Page

from .jupyterlab import JupyterLabServer, LabNotebook
from .test_nbconvert_html import _write_signed

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
x = torch.randn(2, 3)
with gv.capture(model) as cap:
    loss = model(x).pow(2).mean()
gv.GraphWidget(loss, model=model, capture=cap, height=320)""",
    """\
closed = gv.GraphWidget(loss, model=model, capture=cap, height=320)
closed.expanded = []
closed""",
    "gv.GraphWidget(gv.record_backward(loss, model=model, capture=cap), height=320)",
    """\
before = gv.trace(loss, model=model, capture=cap)
with gv.capture(model) as cap2:
    loss2 = model(x).abs().mean()
gv.GraphWidget(gv.diff(before, gv.trace(loss2, model=model, capture=cap2)), height=320)""",
    """\
loss2.backward()
gv.Dashboard(model, loss2, capture=cap2, height=320)""",
]
N_CANVASES = 5  # four GraphWidgets and the Dashboard's

# Every drawn canvas in the open notebook: [nodes, boxes] per `.gradviz-root`, via its Cytoscape instance.
DRAWN_JS = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .gradviz-root')]
    .map((r) => r.__gradviz && r.__gradviz.cy
        ? [r.__gradviz.cy.nodes('[id ^= "n:"]').length, r.__gradviz.cy.nodes().length] : null)"""
RUNTIMES_JS = "() => globalThis.__gradvizRuntimes ? globalThis.__gradvizRuntimes.size : 0"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[nbformat.NotebookNode]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    base = tmp_path_factory.mktemp("saved_runtime")
    t0 = time.monotonic()
    NotebookClient(nb, store_widget_state=True, timeout=300, resources={"metadata": {"path": str(base)}}).execute()
    print(f"\nnbclient ran the notebook in {time.monotonic() - t0:.1f} s")
    nbformat.write(nb, base / "saved.ipynb")
    yield nb


def test_the_saved_state_holds_one_runtime(saved: Any) -> None:
    state = saved.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    runtimes = [k for k, m in state.items() if m["model_name"] == "WidgetModel" and "code" in m["state"]]
    graphs = [m["state"] for m in state.values() if m["model_name"] == "AnyModel"]
    assert len(runtimes) == 1 and len(graphs) == N_CANVASES
    assert {g["_runtime"] for g in graphs} == {f"IPY_MODEL_{runtimes[0]}"}


def test_reopened_saved_notebook_draws_every_graph(
    saved: Any, notebook_server: JupyterLabServer, notebook_page: Page, screenshot_dir: Path
) -> None:
    server, page = notebook_server, notebook_page
    name = f"saved_runtime_{server.frontend}.ipynb"
    _write_signed(saved, server.root / name, server)
    t0 = time.monotonic()
    nb = LabNotebook(server, page, name).open()

    drawn = nb.poll(lambda: _all_drawn(page, N_CANVASES), 90.0, f"{N_CANVASES} canvases drawn from the saved state")
    seconds = time.monotonic() - t0
    print(f"\n{server.frontend}: {N_CANVASES} canvases drawn {seconds:.1f} s after opening; [ops, items] each: {drawn}")
    # The open view shows the MLP's leaves and ops; the closed one only its two boxes and the ops between.
    assert drawn[0][0] > drawn[1][0]
    assert page.evaluate(RUNTIMES_JS) == 1  # the code was decoded and imported once for all of them
    assert page.locator("[data-testid=gradviz-load-error]").count() == 0
    assert page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .gradviz-static:visible").count() == 0
    page.screenshot(path=str(screenshot_dir / f"saved_runtime_{server.frontend}_top.png"))
    last = nb.cell(len(CELLS) - 1).locator(".jp-OutputArea")
    last.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    last.screenshot(path=str(screenshot_dir / f"saved_runtime_{server.frontend}_dashboard.png"))
    errors = page.console_log.errors  # type: ignore[attr-defined]
    assert not [e for e in errors if "gradviz" in e.lower()], errors


# ipywidgets' JupyterLab manager saves widget state with the notebook only when this setting is on.
WIDGET_MANAGER = "/lab/api/settings/@jupyter-widgets/jupyterlab-manager:plugin"
GRAPH_CELLS = CELLS[:4]  # the four GraphWidgets (the Dashboard adds BokehJS, not ours)


def _all_drawn(page: Page, n: int) -> list[Any] | None:
    """[nodes, items] of each of the `n` canvases once every one has drawn nodes, else None."""
    drawn: list[Any] = page.evaluate(DRAWN_JS)
    return drawn if len(drawn) == n and all(d and d[0] > 0 for d in drawn) else None


def _save_state(server: JupyterLabServer, on: bool) -> None:
    body = json.dumps({"raw": json.dumps({"saveState": on})}).encode()
    req = urllib.request.Request(server.url + WIDGET_MANAGER, data=body, method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30):
        pass


def test_a_notebook_jupyterlab_saves_with_widget_state_is_small_and_draws_again(
    jupyterlab: JupyterLabServer, lab_page: Page, screenshot_dir: Path
) -> None:
    """JupyterLab itself runs and saves four graph widgets with their state (saveState on): the file holds
    the canvas code once (in the runtime model) and stays under 1.5 MB, and reopened on a fresh kernel
    every canvas draws from it."""
    server, page = jupyterlab, lab_page
    name = server.write_notebook("saved_by_lab.ipynb", GRAPH_CELLS)
    _save_state(server, True)
    try:
        nb = LabNotebook(server, page, name).open()
        for i in range(len(GRAPH_CELLS)):
            nb.run_cell(i)
        nb.poll(lambda: _all_drawn(page, 4), 90.0, "4 canvases drawn")
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        path = server.root / name

        def saved_with_state() -> dict[str, Any] | None:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return data if data.get("metadata", {}).get("widgets") else None

        data = nb.poll(saved_with_state, 30.0, "the notebook saved with its widget state")
    finally:
        _save_state(server, False)
    size = path.stat().st_size
    state = data["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    runtimes = [k for k, m in state.items() if m["model_name"] == "WidgetModel" and "code" in m["state"]]
    graphs = [m["state"] for m in state.values() if m["model_name"] == "AnyModel"]
    print(f"\nsaved by JupyterLab: {size / 1e6:.2f} MB, {len(state)} models, {len(graphs)} graphs")
    assert len(runtimes) == 1 and len(graphs) == 4, [m["model_name"] for m in state.values()]
    assert {g["_runtime"] for g in graphs} == {f"IPY_MODEL_{runtimes[0]}"}
    assert size <= 1_500_000, f"{size / 1e6:.2f} MB"

    server.shutdown_sessions()  # the kernel that made the widgets is gone: every model comes from the file
    nb = LabNotebook(server, page, name).open()
    drawn = nb.poll(lambda: _all_drawn(page, 4), 90.0, "4 canvases drawn from the state JupyterLab saved")
    assert drawn[0][0] > drawn[1][0]  # the open view and the closed one, as they were
    assert page.evaluate(RUNTIMES_JS) == 1
    page.screenshot(path=str(screenshot_dir / "saved_by_lab_reopened.png"))

"""End-to-end in the other front ends users have, Jupyter Notebook 7 and Voilà: the same click scenario as in
JupyterLab, with a real mouse. The widget renders; a click opens a module box; in what-if mode a click cuts
an edge; the page's Verify button re-runs PyTorch in the kernel. Every step is checked on the page and in
the kernel, whose state an ipywidgets label beside the graph shows (Voilà has no cell to ask)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import Locator, Page

from .conftest import _require_chromium
from .jupyterlab import ConsoleLog, JupyterLabServer, LabNotebook
from .test_jupyterlab_widget import POINT_JS, STATE_JS, _assert_clean_console
from .voila import VoilaServer

# A small MLP whose what-if answers PyTorch re-runs (from_fn); every box starts closed. The HTML widget
# shows the kernel's side of each step, refreshed by the traits the page writes.
SCENARIO = """\
import json, torch, ipywidgets
from torch import nn
from IPython.display import display
import gradviz_nb as gv

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
x = torch.randn(5, 4)
w = gv.GraphWidget.from_fn(lambda: model(x).sum(), model=model, height=460)
w.expanded = []
relu = next(n for n, d in w.graph.nx.nodes(data=True) if d["op"] == "ReluBackward0")
mm = next(iter(w.graph.nx.successors(relu)))
kernel = ipywidgets.HTML()
kernel.add_class("gv-kernel-state")

def show(_=None):
    kernel.value = json.dumps({"expanded": sorted(w.expanded), "lost": sorted(w.what_if().lost),
                               "agree": (w.verified or {}).get("agree"), "relu": relu, "mm": mm})

w.observe(show, names=["expanded", "toggles", "verified"])
show()
display(kernel)
w"""
BOX = "2"  # the last Linear: opening it shows its addmm, which the ReLU's output feeds
LOST = ["0.bias", "0.weight"]  # cutting ReLU -> addmm leaves the first Linear without a gradient
WI_JS = "(root) => ({lost: root.dataset.whatifLost, mode: root.dataset.whatifMode})"
# The drawn edge into the addmm node from the ReLU (its node, or its closed box).
FONT_AWESOME_CDN = "https://cdn.jsdelivr.net/npm/@fortawesome/fontawesome-free@*/css/*"
EDGE_JS = """(root, ids) => {
    const g = root.__gradviz;
    return g.edgeBetween('n:' + ids.relu, 'n:' + ids.mm) || g.edgeBetween('c:1', 'n:' + ids.mm);
}"""


def _kernel_state(page: Page) -> dict[str, Any]:
    return dict(json.loads(page.locator(".gv-kernel-state").first.inner_text() or "{}"))


def _poll(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    raise TimeoutError(f"{what} not met after {timeout} s; last: {last!r}")


def _steady(root: Locator, js: str, arg: Any) -> Any:
    """A client point from ``js`` once it stayed put for 3 readings (the page may still scroll)."""
    root.scroll_into_view_if_needed()
    readings: list[Any] = []
    for _ in range(60):
        readings = [*readings[-2:], root.evaluate(js, arg)]
        if len(readings) == 3 and readings[0] == readings[1] == readings[2]:
            break
        time.sleep(0.15)
    return readings[-1]


def _click(page: Page, p: dict[str, float]) -> None:
    page.mouse.move(p["x"], p["y"])
    page.mouse.click(p["x"], p["y"])


def run_scenario(page: Page, root: Locator, before_click: Callable[[], None], shot: Path) -> dict[str, float]:
    """Open a box, cut an edge and verify, each by a real click; returns the seconds each step took."""
    marks: dict[str, float] = {}
    t = time.monotonic()
    start = root.evaluate(STATE_JS)
    assert start["layout"] == "idle" and start["counts"]["expanded"] == 0, start
    assert _kernel_state(page)["expanded"] == []

    # Open box "2" with a real click (one retry if the page moved between aiming and clicking).
    for _ in range(2):
        before_click()
        p = _steady(root, POINT_JS, BOX)
        assert p and p["hitsBox"] and p["onWidget"], f"box {BOX} is not clickable: {p}"
        _click(page, p)
        try:
            opened = _poll(lambda: (s := root.evaluate(STATE_JS))["counts"]["expanded"] == 1 and s, 5.0, "box opens")
            break
        except TimeoutError:
            continue
    else:
        raise AssertionError(f"two clicks on box {BOX} did not open it")
    assert opened["counts"]["nodes"] > start["counts"]["nodes"], opened
    _poll(lambda: _kernel_state(page)["expanded"] == [BOX], 10.0, "the kernel's expanded trait")
    marks["open a box"] = time.monotonic() - t

    # What-if mode, then a real click on the edge ReLU -> addmm: the first Linear loses its gradient.
    t = time.monotonic()
    before_click()
    root.locator("[data-testid=gradviz-whatif-toggle]").click()
    _poll(lambda: root.evaluate(WI_JS)["mode"] == "true", 5.0, "what-if mode on")
    ids = _kernel_state(page)
    edge = root.evaluate(EDGE_JS, {"relu": ids["relu"], "mm": ids["mm"]})
    assert edge, "no drawn edge from the ReLU into the addmm"
    _click(page, _steady(root, "(r, e) => r.__gradviz.edgePoint(e)", edge))
    _poll(lambda: root.evaluate(WI_JS)["lost"] == str(len(LOST)), 5.0, "two leaves lost after the click")
    _poll(lambda: _kernel_state(page)["lost"] == LOST, 10.0, "the kernel's what-if answer")
    marks["cut an edge"] = time.monotonic() - t

    # Verify: PyTorch re-runs in the kernel with that tensor detached and agrees.
    t = time.monotonic()
    root.locator("[data-testid=gradviz-verify]").click()
    banner = root.locator("[data-testid=gradviz-verified]")
    _poll(lambda: "Verified" in (banner.text_content() or ""), 30.0, "verification banner")
    _poll(lambda: _kernel_state(page)["agree"] is True, 10.0, "the kernel's verified.agree")
    marks["verify"] = time.monotonic() - t
    page.screenshot(path=str(shot))
    return marks


def test_notebook7_render_open_cut_verify(
    notebook7: JupyterLabServer, chromium: Any, tmp_path: Path, screenshot_dir: Path
) -> None:
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    console = ConsoleLog.for_frontend("notebook")
    console.attach(page)
    page.console_log = console  # type: ignore[attr-defined]
    try:
        t0 = time.monotonic()
        nb = LabNotebook(notebook7, page, notebook7.write_notebook("scenario.ipynb", [SCENARIO])).open()
        nb.run_cell(0)
        root = nb.wait_in_output(0, ".gradviz-root")
        nb.wait_in_output(0, ".gradviz-canvas canvas")
        root.evaluate("async (r) => r.__gradviz.idle()")
        rendered = time.monotonic() - t0
        marks = run_scenario(page, root, lambda: nb.activate_cell(0), tmp_path / "notebook7.png")
        shutil.copy(tmp_path / "notebook7.png", screenshot_dir / "notebook7_open_cut_verify.png")
        print(f"\nNotebook 7: rendered {rendered:.1f} s after opening;", marks)
        _assert_clean_console(page)
    finally:
        context.close()
        notebook7.shutdown_sessions()


@pytest.fixture
def voila(tmp_path: Path) -> Iterator[VoilaServer]:
    _require_chromium()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SCENARIO)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "notebooks" / "scenario.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    server = VoilaServer(tmp_path, path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_voila_render_open_cut_verify(voila: VoilaServer, chromium: Any, tmp_path: Path, screenshot_dir: Path) -> None:
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    console = ConsoleLog.for_frontend("lab")
    console.attach(page)
    page.console_log = console  # type: ignore[attr-defined]
    # Voilà's page template links Font Awesome 5 from a CDN; offline that fails (two console errors). The
    # widget uses none of it: answer those two with an empty style sheet, and fail on any other lost request.
    page.route(FONT_AWESOME_CDN, lambda route: route.fulfill(status=200, content_type="text/css", body=""))
    failed: list[str] = []
    page.on("requestfailed", lambda r: failed.append(f"{r.url} {r.failure}"))
    try:
        t0 = time.monotonic()
        page.goto(voila.url)  # Voilà runs the notebook now, then shows its outputs
        root = page.locator(".gradviz-root").first
        root.wait_for(state="visible", timeout=180_000)
        page.locator(".gradviz-canvas canvas").first.wait_for(state="visible")
        root.evaluate("async (r) => r.__gradviz.idle()")
        rendered = time.monotonic() - t0
        assert "Traceback" not in page.content()
        marks = run_scenario(page, root, lambda: None, tmp_path / "voila.png")
        shutil.copy(tmp_path / "voila.png", screenshot_dir / "voila_open_cut_verify.png")
        print(f"\nVoilà: rendered {rendered:.1f} s after opening (server up in {voila.startup_seconds:.1f} s);", marks)
        _assert_clean_console(page)
        assert not failed, f"requests that failed: {failed}"
    except Exception:
        print("failed requests:", failed, "\nvoila log tail:\n", voila.log()[-3000:])
        raise
    finally:
        context.close()

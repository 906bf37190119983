"""End-to-end in marimo: a GraphWidget wrapped by `mo.ui.anywidget`, served by `marimo run`, clicked in
headless Chromium, with Python (a reactive cell) seeing each trait change.

marimo does not use Jupyter's widget manager: it loads the anywidget ESM itself, inside a shadow DOM,
and syncs traits over its own websocket. So this proves the widget's contract with anywidget alone.
The app starts with both module boxes closed; the test opens one with a real mouse click and steps the
recorded backward pass with the stepper's button. A third cell prints `view.value` and the widget's
own traits; marimo re-runs it whenever the page changes the widget, and the test reads what it prints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Error, Page

from .jupyterlab import ConsoleLog, free_port
from .test_jupyterlab_widget import POINT_JS, STATE_JS

APP = '''\
import marimo

app = marimo.App()


@app.cell
def _():
    import json

    import marimo as mo
    import torch
    from torch import nn

    import gradviz_nb as gv
    return gv, json, mo, nn, torch


@app.cell
def _(gv, mo, nn, torch):
    class TinyMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = nn.Linear(3, 4)
            self.out = nn.Linear(4, 1)

        def forward(self, x):
            return self.out(torch.tanh(self.hidden(x)))

    torch.manual_seed(0)
    model = TinyMLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 3)).pow(2).mean()
    graph_widget = gv.GraphWidget(gv.record_backward(loss, model=model, capture=cap), height=420)
    graph_widget.expanded = []  # both boxes closed, so the test opens one by mouse
    view = mo.ui.anywidget(graph_widget)
    view
    return graph_widget, view


@app.cell
def _(graph_widget, json, mo, view):
    # Re-runs whenever the page changes a trait (marimo's reactivity on the wrapped widget's value).
    mo.plain_text("PYTHON " + json.dumps({
        "value_expanded": sorted(view.value["expanded"]), "value_step": view.value["step"],
        "trait_expanded": sorted(graph_widget.expanded), "trait_step": graph_widget.step,
    }))
    return


if __name__ == "__main__":
    app.run()
'''
BOX = "hidden"


class MarimoServer:
    """`marimo run APP --headless` on a free port, with its own HOME (marimo's config and state live
    there), in its own process group; stop() ends that group."""

    def __init__(self, base: Path, app: Path) -> None:
        self.base, self.app = base, app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / "marimo.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds = 0.0

    def start(self, timeout: float = 60.0) -> None:
        home = self.base / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
               "XDG_STATE_HOME": str(home / ".state"), "XDG_CACHE_HOME": str(home / ".cache"),
               "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "marimo", "-y", "run", str(self.app), "--headless", "--no-token",
               "--host", "127.0.0.1", "--port", str(self.port), "--no-sandbox"]
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=env, cwd=self.base, stdout=self.log_path.open("wb"),
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"marimo exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if json.loads(r.read()).get("status") == "healthy":
                        self.startup_seconds = time.monotonic() - t0
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"marimo not ready after {timeout} s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        except ProcessLookupError:
            pass

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture(scope="module")
def marimo_app(tmp_path_factory: pytest.TempPathFactory, chromium: object) -> Iterator[MarimoServer]:
    base = tmp_path_factory.mktemp("marimo")
    app = base / "gradviz_app.py"
    app.write_text(APP)
    server = MarimoServer(base, app)
    server.start()
    print(f"\nmarimo ready at {server.url} in {server.startup_seconds:.1f} s")
    try:
        yield server
    finally:
        server.stop()


def _poll(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Error as e:  # an evaluate racing a re-render
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    raise TimeoutError(f"{what} not met after {timeout} s; last: {last!r}")


def _python_sees(page: Page) -> dict[str, Any]:
    """What the reactive cell printed last: the widget's value and traits as Python has them."""
    text = page.get_by_text("PYTHON {").first.text_content() or ""
    return dict(json.loads(text.split("PYTHON ", 1)[1]))


def test_marimo_graph_widget_expand_and_step(
    marimo_app: MarimoServer, chromium: Any, screenshot_dir: Path, stopwatch: dict[str, float]
) -> None:
    context = chromium.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    console = ConsoleLog()
    console.attach(page)
    t = time.monotonic()
    try:
        page.goto(marimo_app.url)
        root = page.locator(".gradviz-root").first  # Playwright's CSS pierces marimo's shadow root
        page.locator(".gradviz-canvas canvas").first.wait_for(state="visible")
        start = root.evaluate(STATE_JS)
        stopwatch["app run + widget drawn"] = time.monotonic() - t
        assert start["layout"] == "idle" and start["counts"]["collapsed"] == 2, start
        assert _python_sees(page)["trait_expanded"] == []

        # A real mouse click on the closed "hidden" box opens it, and Python sees it.
        root.scroll_into_view_if_needed()
        point = _poll(lambda: (p := root.evaluate(POINT_JS, BOX)) and p["hitsBox"] and p, 10.0, "a point on the box")
        assert point["onWidget"], f"box {BOX!r} at {point} is covered"
        page.mouse.move(point["x"], point["y"])
        page.mouse.click(point["x"], point["y"])
        opened = _poll(lambda: (s := root.evaluate(STATE_JS))["counts"]["expanded"] == 1 and s, 10.0, "box opened")
        assert opened["counts"]["nodes"] > start["counts"]["nodes"], opened
        seen = _poll(lambda: (s := _python_sees(page))["trait_expanded"] == [BOX] and s, 20.0, "Python sees expanded")
        assert seen["value_expanded"] == [BOX], seen
        stopwatch["expand by click"] = time.monotonic() - t - stopwatch["app run + widget drawn"]

        # Two steps of the recorded backward pass with the stepper's button: cursor 0, then 1.
        step = root.locator("[data-testid=gradviz-step-forward]")
        for i in range(2):
            step.click()
            _poll(lambda i=i: root.evaluate("(r) => r.__gradviz.currentStep()") == i, 5.0, f"page cursor at {i}")
        seen = _poll(lambda: (s := _python_sees(page))["trait_step"] == 1 and s, 20.0, "Python sees step 1")
        assert seen["value_step"] == 1 and seen["trait_expanded"] == [BOX], seen
        page.screenshot(path=str(screenshot_dir / "marimo_widget.png"))
        assert not console.errors, "errors on the browser console:\n" + "\n".join(console.errors)
    except BaseException:
        page.screenshot(path=str(screenshot_dir / "FAILED-marimo_widget.png"))
        print("marimo log tail:\n", marimo_app.log()[-3000:])
        raise
    finally:
        context.close()

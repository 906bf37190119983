"""A real JupyterLab server and a Playwright page driving it, for end-to-end widget tests.

`JupyterLabServer` starts `python -m jupyter lab` in its own process group, with its own config,
user-data, runtime, IPython, settings and workspaces folders under a temp dir, so nothing from the
user's home leaks in (or out). Installed lab extensions (anywidget, ipywidgets) are still found: they
live in `sys.prefix/share/jupyter`, which stays on the data path.

The same class starts Notebook 7 (`frontend="notebook"`: `python -m jupyter notebook`, the `notebook`
package). Notebook 7 is built from JupyterLab's components, so its notebook page has the Lab DOM
(`.jp-NotebookPanel`, `.jp-Cell`, `.jp-InputPrompt`, `window.jupyterapp` with `--expose-app-in-browser`);
what differs is the URL (`/notebooks/<path>` instead of `/lab/tree/<path>`) and the app's option prefix
(`JupyterNotebookApp` instead of `LabApp`).

`LabNotebook` opens one notebook in a page and runs its cells the way a person would (Shift+Enter),
with the waits that made it reliable on a 2-core machine: the kernel must be idle with a websocket
connected before the first key press, and each cell must show an `[n]:` prompt afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pagekit import CHROMIUM, CHROMIUM_ARGS  # noqa: F401  (one place for the launch constants)
from playwright.sync_api import ConsoleMessage, Error, Page

# User settings written before the server starts. `windowingMode: none` keeps off-screen cells in
# the DOM (the default windowing virtualises them away); news and update checks would try the network.
LAB_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
        "doNotDisturbMode": True,
    },
}

# Console errors that JupyterLab itself prints in a clean, offline, headless session, each matched
# narrowly with the reason it is harmless; anything else on the console fails the test. Empty on
# purpose: with the settings above (no news, no update check) JupyterLab 4.6 printed no errors in
# these runs. Add a (pattern, why) pair only for noise actually seen and understood.
BENIGN_CONSOLE_ERRORS: list[tuple[re.Pattern[str], str]] = []

# Notebook 7.6.5 adds one uncaught error of its own, matched with its stack (page errors are matched
# as "message\nstack"): its shortcuts extension reads `registry.plugins[id].schema` in a
# `pluginChanged` handler for a plugin id the registry does not hold. Seen on every page load, with a
# notebook holding only `1+1`, with no user settings and with every third-party lab extension
# (anywidget, ipywidgets, jupyter_bokeh) disabled in page_config.json: Notebook 7's own, and the
# notebook still runs and renders (the widget tests below pass in full).
BENIGN_NOTEBOOK7_ERRORS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"^pageerror: Cannot read properties of undefined \(reading 'schema'\)\n.*"
                   r"/static/notebook/notebook_core\.[0-9a-f]+\.js", re.S),
        "Notebook 7's shortcuts extension on a settings plugin it never loaded; happens without gradviz",
    ),
]


FrontEnd = Literal["lab", "notebook"]
FRONT_ENDS: dict[str, str] = {"lab": "JupyterLab", "notebook": "Notebook 7"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class JupyterLabServer:
    """`python -m jupyter lab` (or `notebook`, Notebook 7) on a free port, isolated under `base`;
    stop() kills its process group."""

    def __init__(self, base: Path, python: str = sys.executable, frontend: FrontEnd = "lab") -> None:
        if frontend not in FRONT_ENDS:
            raise ValueError(f"frontend must be one of {sorted(FRONT_ENDS)}, got {frontend!r}")
        self.base = base
        self.python = python
        self.frontend: FrontEnd = frontend
        self.root = base / "notebooks"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / f"jupyter-{frontend}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds = 0.0

    # --- process -----------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for var, sub in [
            ("JUPYTER_CONFIG_DIR", "config"),
            ("JUPYTER_DATA_DIR", "data"),  # the *user* data dir only; sys.prefix/share/jupyter stays
            ("JUPYTER_RUNTIME_DIR", "runtime"),
            ("IPYTHONDIR", "ipython"),
        ]:
            (self.base / sub).mkdir(parents=True, exist_ok=True)
            env[var] = str(self.base / sub)
        # The venv's share/jupyter first: its python3 kernelspec and lab extensions win over any
        # stray system-wide ones.
        env["JUPYTER_PATH"] = str(Path(sys.prefix) / "share" / "jupyter")
        env["JUPYTER_PLATFORM_DIRS"] = "1"
        env.pop("JUPYTER_TOKEN", None)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _write_settings(self) -> Path:
        settings = self.base / "lab-user-settings"
        for rel, content in LAB_SETTINGS.items():
            path = settings / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(content, indent=2))
        return settings

    def start(self, timeout: float = 90.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        settings = self._write_settings()
        workspaces = self.base / "lab-workspaces"
        workspaces.mkdir(exist_ok=True)
        app = "LabApp" if self.frontend == "lab" else "JupyterNotebookApp"
        cmd = [
            self.python,
            "-m",
            "jupyter",
            self.frontend,
            "--no-browser",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ServerApp.port_retries=0",
            "--ServerApp.token=",
            "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            "--allow-root",
            f"--ServerApp.root_dir={self.root}",
            f"--{app}.user_settings_dir={settings}",
            f"--{app}.workspaces_dir={workspaces}",
            "--expose-app-in-browser",
        ]
        if self.frontend == "lab":  # Notebook 7 has no update check to switch off
            cmd.append("--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")
        t0 = time.monotonic()
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            cmd,
            env=self._env(),
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter {self.frontend} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                self.get("/api/status")
                self.startup_seconds = time.monotonic() - t0
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"jupyter {self.frontend} not ready after {timeout} s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = self.proc.pid  # start_new_session: the server leads its own process group
        try:
            os.killpg(pgid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        except ProcessLookupError:
            pass

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # --- REST ---------------------------------------------------------------------------------
    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read() or b"null")

    def delete(self, path: str) -> None:
        req = urllib.request.Request(self.url + path, method="DELETE")
        with urllib.request.urlopen(req, timeout=30):
            pass

    def shutdown_sessions(self) -> None:
        """End every kernel session, so the next test starts from a quiet server."""
        for s in self.get("/api/sessions"):
            with contextlib.suppress(urllib.error.HTTPError):  # already gone
                self.delete(f"/api/sessions/{s['id']}")

    # --- notebooks ----------------------------------------------------------------------------
    def notebook_url(self, path: str) -> str:
        """The page that opens notebook `path` (relative to the root) in this front end."""
        if self.frontend == "lab":
            # `?reset` drops the saved workspace, so tabs from earlier tests do not reopen.
            return f"{self.url}/lab/tree/{path}?reset"
        return f"{self.url}/notebooks/{path}"  # Notebook 7: one notebook per page, no workspace

    def write_notebook(self, name: str, cells: Iterable[str]) -> str:
        """Write a code-only notebook under the server root; returns its path relative to the root."""
        nb = {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {
                "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                "language_info": {"name": "python"},
            },
            "cells": [
                {
                    "cell_type": "code",
                    "id": f"cell-{i}",
                    "metadata": {},
                    "source": src,
                    "outputs": [],
                    "execution_count": None,
                }
                for i, src in enumerate(cells)
            ],
        }
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(nb, indent=1))
        return name


@dataclass
class ConsoleLog:
    """Console errors and uncaught page exceptions, minus the documented benign ones."""

    errors: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    benign: list[tuple[re.Pattern[str], str]] = field(default_factory=lambda: list(BENIGN_CONSOLE_ERRORS))

    @classmethod
    def for_frontend(cls, frontend: FrontEnd) -> ConsoleLog:
        extra = BENIGN_NOTEBOOK7_ERRORS if frontend == "notebook" else []
        return cls(benign=[*BENIGN_CONSOLE_ERRORS, *extra])

    def attach(self, page: Page) -> None:
        page.on("console", self._on_console)
        page.on("pageerror", self._on_pageerror)

    def _is_benign(self, text: str) -> bool:
        return any(p.search(text) for p, _why in self.benign)

    def _on_pageerror(self, exc: Error) -> None:
        text = f"pageerror: {exc}\n{exc.stack or ''}"
        if self._is_benign(text):
            self.ignored.append(text.splitlines()[0])
        else:
            self.errors.append(f"pageerror: {exc}")

    def _on_console(self, msg: ConsoleMessage) -> None:
        if msg.type != "error":
            return
        text = msg.text
        if self._is_benign(text):
            self.ignored.append(text)
        else:
            self.errors.append(f"console.error: {text}")


PROMPT_DONE = re.compile(r"^\[(\d+)\]:?$")


class LabNotebook:
    """One notebook open in a JupyterLab (or Notebook 7) page."""

    def __init__(self, server: JupyterLabServer, page: Page, path: str) -> None:
        self.server = server
        self.page = page
        self.path = path

    # --- open and wait for the kernel ---------------------------------------------------------
    def open(self, timeout: float = 60.0) -> LabNotebook:
        self.page.goto(self.server.notebook_url(self.path), timeout=timeout * 1000)
        self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for(timeout=timeout * 1000)
        self.wait_kernel_ready(timeout)
        return self

    def kernel_id(self) -> str | None:
        for s in self.server.get("/api/sessions"):
            if s.get("path") == self.path and s.get("kernel"):
                return str(s["kernel"]["id"])
        return None

    def wait_kernel_ready(self, timeout: float = 60.0) -> None:
        """Poll until this notebook's kernel is idle with a websocket attached.

        Keys pressed before the page's websocket is connected can be lost. `/api/kernels` may
        answer 500 while a kernel is still starting; that just means "not yet".
        """
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                kid = self.kernel_id()
                if kid:
                    k = self.server.get(f"/api/kernels/{kid}")
                    last = k
                    if k.get("execution_state") == "idle" and k.get("connections", 0) >= 1:
                        # The page's own status indicator too, when it shows one.
                        self._wait_page_kernel_idle(deadline)
                        return
            except (urllib.error.HTTPError, urllib.error.URLError, ConnectionError) as e:
                last = e
            time.sleep(0.25)
        raise TimeoutError(f"kernel for {self.path} not ready after {timeout} s; last: {last}")

    def _wait_page_kernel_idle(self, deadline: float) -> None:
        js = """() => {
            const app = window.jupyterapp;
            const w = app && app.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session &&
                      w.sessionContext.session.kernel;
            return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
        }"""
        while time.monotonic() < deadline:
            if self.page.evaluate(js):
                return
            time.sleep(0.1)
        raise TimeoutError("the page never saw its kernel connected and idle")

    # --- cells --------------------------------------------------------------------------------
    def cell(self, index: int):  # -> Locator
        return self.page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell").nth(index)

    def cell_count(self) -> int:
        return self.page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell").count()

    def prompt(self, index: int) -> str:
        return (self.cell(index).locator(".jp-InputPrompt").first.inner_text() or "").strip()

    def run_cell(self, index: int, timeout: float = 180.0, attempts: int = 3) -> str:
        """Run one cell from the keyboard; wait for its `[n]:` prompt; returns its output text.

        Ctrl+Enter (run in place) rather than Shift+Enter: Shift+Enter on the last cell inserts a new
        cell and scrolls the notebook, which moves widgets under a mouse click being aimed at them.
        A key press can be lost while the kernel connects: if the prompt is still blank (not `[*]`)
        a few seconds later, press again. Raises if the output holds a Python traceback.
        """
        for attempt in range(attempts):
            before = self.prompt(index)
            editor = self.cell(index).locator(".jp-InputArea-editor").first
            editor.click()
            self.page.keyboard.press("Control+Enter")
            if self._wait_prompt_changed(index, before, timeout, grace=5.0 + 5.0 * attempt):
                break
        else:
            raise TimeoutError(f"cell {index} never ran (prompt {self.prompt(index)!r})")
        text = self.output_text(index)
        if "Traceback (most recent call last)" in text or re.search(r"^\w+Error\b", text, re.M):
            raise AssertionError(f"cell {index} raised:\n{text}")
        return text

    def _wait_prompt_changed(self, index: int, before: str, timeout: float, grace: float) -> bool:
        """True once the cell shows a finished `[n]` different from `before`.

        False if it never even started (`[*]`) within `grace` seconds: the key press was lost.
        """
        t0 = time.monotonic()
        started = False
        while time.monotonic() - t0 < timeout:
            p = self.prompt(index)
            if "*" in p:
                started = True
            elif PROMPT_DONE.match(p) and p != before:
                return True
            if not started and time.monotonic() - t0 > grace:
                return False
            time.sleep(0.1)
        raise TimeoutError(f"cell {index} still running after {timeout} s (prompt {p!r})")

    def activate_cell(self, index: int) -> None:
        """Make a cell the active one by clicking its input prompt, as a person would.

        Clicking inside an output activates its cell too, and JupyterLab then scrolls that cell
        into view *between mousedown and mouseup*: a canvas sees a drag, not a click. Activate first,
        let the scroll settle, then aim.
        """
        self.cell(index).locator(".jp-InputPrompt").first.click()
        self.poll(
            lambda: "jp-mod-active" in (self.cell(index).get_attribute("class") or ""),
            what=f"cell {index} active",
        )

    def run_all(self, timeout: float = 300.0) -> list[str]:
        return [self.run_cell(i, timeout=timeout) for i in range(self.cell_count())]

    def output_text(self, index: int) -> str:
        out = self.cell(index).locator(".jp-OutputArea")
        return out.first.inner_text() if out.count() else ""

    def run_cell_json(self, index: int, tag: str) -> Any:
        """Run cell ``index`` and parse the JSON its output prints after ``tag`` (``print(tag, json)``)."""
        out = self.run_cell(index)
        line = next(ln for ln in out.splitlines() if ln.startswith(tag))
        return json.loads(line.removeprefix(tag))

    def click(self, point: dict[str, float]) -> None:
        """A real mouse click at a client point (moving there first, so hover handlers run as for a user)."""
        self.page.mouse.move(point["x"], point["y"])
        self.page.mouse.click(point["x"], point["y"])

    def wait_in_output(self, index: int, selector: str, timeout: float = 60.0):  # -> Locator
        loc = self.cell(index).locator(".jp-OutputArea").locator(selector).first
        loc.wait_for(state="visible", timeout=timeout * 1000)
        return loc

    def poll(self, fn: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
        """Call fn until it returns something truthy."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = fn()
            except Error as e:  # a page evaluate racing a re-render
                last = e
            if last and not isinstance(last, Exception):
                return last
            time.sleep(0.1)
        raise TimeoutError(f"{what} not met after {timeout} s; last: {last!r}")

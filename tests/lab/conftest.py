"""Fixtures for end-to-end tests in a real JupyterLab with headless Chromium.

Browser tests are skipped (with the reason) when the browser is missing, unless CI is set: in CI a
missing browser is a failure, so a broken image cannot pass silently.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .jupyterlab import CHROMIUM, CHROMIUM_ARGS, FRONT_ENDS, ConsoleLog, FrontEnd, JupyterLabServer

REPO = Path(__file__).resolve().parents[2]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _require_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    msg = f"headless Chromium not found at {CHROMIUM} (install: apt-get install -y chromium)"
    if _in_ci():
        pytest.fail(f"CI is set and {msg}", pytrace=False)
    pytest.skip(msg)


def _serve(tmp_path_factory: pytest.TempPathFactory, frontend: FrontEnd) -> Iterator[JupyterLabServer]:
    _require_chromium()
    server = JupyterLabServer(tmp_path_factory.mktemp(f"jupyter-{frontend}"), frontend=frontend)
    server.start()
    print(f"\n{FRONT_ENDS[frontend]} ready at {server.url} in {server.startup_seconds:.1f} s")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLabServer]:
    yield from _serve(tmp_path_factory, "lab")


@pytest.fixture(scope="session")
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLabServer]:
    """Notebook 7 (`jupyter notebook`), started on first use and kept for the session."""
    yield from _serve(tmp_path_factory, "notebook")


@pytest.fixture(params=["lab", "notebook"], ids=["jupyterlab", "notebook7"])
def notebook_server(request: pytest.FixtureRequest) -> JupyterLabServer:
    """The same test in JupyterLab and in Notebook 7: one session-scoped server per front end."""
    name = "jupyterlab" if request.param == "lab" else "notebook7"
    server: JupyterLabServer = request.getfixturevalue(name)
    return server


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """Headless Chromium. Module scope, not session: only one Playwright sync API may be live at a
    time, and other test modules (tests/page/test_frontend_bundle.py) start their own."""
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    setattr(item, f"report_{report.when}", report)  # lets fixtures see whether the test failed
    return report


@pytest.fixture
def lab_page(request: pytest.FixtureRequest, chromium, jupyterlab: JupyterLabServer):  # type: ignore[no-untyped-def]
    """A fresh page (own browser context) plus its console log; kernels are shut down afterwards.

    On failure the page is saved to build/screenshots/FAILED-<test>.png and the server log's tail
    is printed.
    """
    yield from _page(request, chromium, jupyterlab)


@pytest.fixture
def notebook_page(request: pytest.FixtureRequest, chromium, notebook_server: JupyterLabServer):  # type: ignore[no-untyped-def]
    """`lab_page` for the server of `notebook_server` (JupyterLab or Notebook 7)."""
    yield from _page(request, chromium, notebook_server)


def _page(request: pytest.FixtureRequest, chromium, jupyterlab: JupyterLabServer):  # type: ignore[no-untyped-def]
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    console = ConsoleLog.for_frontend(jupyterlab.frontend)
    console.attach(page)
    page.console_log = console  # type: ignore[attr-defined]
    try:
        yield page
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            shot = REPO / "build" / "screenshots" / f"FAILED-{request.node.name}.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot))
            print(f"\nscreenshot of the failure: {shot}")
            print("console errors:", console.errors, "\nserver log tail:\n", jupyterlab.log()[-3000:])
    finally:
        context.close()
        jupyterlab.shutdown_sessions()


@pytest.fixture
def screenshot_dir() -> Path:
    """build/screenshots: kept after the run so a person can look at what the test saw."""
    d = REPO / "build" / "screenshots"
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def stopwatch() -> Iterator[dict[str, float]]:
    """Named timings (float seconds) and counts (int) a test records; printed at the end (-s)."""
    marks: dict[str, float] = {}
    t0 = time.monotonic()
    yield marks
    marks["total"] = time.monotonic() - t0
    print("timings: " + ", ".join(f"{k} {v:.1f} s" if isinstance(v, float) else f"{k} {v}" for k, v in marks.items()))

"""End-to-end: gradviz_nb's GraphWidget in a real JupyterLab, clicked with a real mouse."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from playwright.sync_api import Page

from .jupyterlab import JupyterLabServer, LabNotebook


def _assert_clean_console(page: Page) -> None:
    errors = page.console_log.errors  # type: ignore[attr-defined]
    assert not errors, "errors on the browser console:\n" + "\n".join(errors)


def test_harness_renders_an_ipywidget(
    jupyterlab: JupyterLabServer, lab_page: Page, stopwatch: dict[str, float]
) -> None:
    """The harness itself: an ipywidgets slider renders and its value reaches the kernel."""
    t0 = time.monotonic()
    path = jupyterlab.write_notebook(
        "harness.ipynb",
        ["import ipywidgets\ns = ipywidgets.IntSlider(value=3)\ns", "print('value', s.value)"],
    )
    nb = LabNotebook(jupyterlab, lab_page, path).open()
    stopwatch["open + kernel"] = time.monotonic() - t0
    nb.run_cell(0)
    nb.wait_in_output(0, ".jupyter-widgets.widget-slider")
    assert "value 3" in nb.run_cell(1)
    stopwatch["run"] = time.monotonic() - t0 - stopwatch["open + kernel"]
    _assert_clean_console(lab_page)

"""One kit for the page tests: the Chromium launch constants (defined once, in
``gradviz_nb/export/image.py``, which drives the same browser), a module-scoped ``browser`` fixture,
and mounting the built bundle in a blank ``file://`` page with THE fake anywidget model (the one
``gradviz_nb/export/html.py`` embeds in exported pages, so both are tested as one).

Use from a test module::

    import pagekit
    from pagekit import MountedPage
    browser = pagekit.browser   # the fixture, under its name
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradviz_nb.export.html import FAKE_MODEL
from gradviz_nb.export.image import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "gradviz_nb" / "static" / "widget.js"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCREENSHOTS = ROOT / "build" / "screenshots"

# Mount the bundle (imported from a Blob URL, as an exported page does) with the fake model; the
# optional third argument is what the fake model answers requests from (``messages.Answers``).
HARNESS = (
    "async ([source, state, answers]) => {\n"
    + FAKE_MODEL
    + """
  const model = gradvizFakeModel(state, answers || null);
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const mod = await import(url);
  const el = document.getElementById("host");
  const cleanup = await mod.default.render({ model, el });
  window.gv = { model, el, cleanup, hook: el.querySelector(".gradviz-root").__gradviz };
  await window.gv.hook.idle();
}
"""
)


def load_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (module scope: one Playwright sync API may be live at a time)."""
    if not BUNDLE.exists():
        pytest.skip("bundle not built: cd js && npm ci && npm run build")
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI is set and there is no Chromium at {CHROMIUM} (apt-get install -y chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class MountedPage:
    """A blank page with the widget mounted on ``state`` (``window.gv``: model, el, cleanup, hook),
    and what it logged: console errors and page errors in ``errors``, dialogs (dismissed) in ``dialogs``.
    ``chunks`` (a lazy ``state``: ``LazyGraph(g).all_chunks()``, call id -> Chunk) lets the fake model answer
    load requests: each becomes the reply body ``{"chunks": [chunk]}`` of a load of that one call, as
    ``gradviz_nb.widgets.page.messages.answers`` embeds them in an exported page. ``values`` (leaf node id ->
    ``ValuesReplyBody``, e.g. ``page.values.export_answers(g)``) answers the details panel's values requests."""

    def __init__(
        self,
        browser: Any,
        tmp_path: Path,
        state: dict[str, Any],
        viewport: tuple[int, int] = (1040, 900),
        width: int = 1000,
        chunks: dict[str, Any] | None = None,
        values: dict[str, Any] | None = None,
    ) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        html = tmp_path / "index.html"
        host = f'<div id="host" style="width:{width}px"></div>'
        html.write_text(f'<!doctype html><html><body style="margin:10px">{host}</body></html>')
        self.page.goto(html.as_uri())
        answers = {"load": {call: {"chunks": [chunk]} for call, chunk in (chunks or {}).items()},
                   "values": values or {}} if chunks or values else None
        self.page.evaluate(HARNESS, [BUNDLE.read_text(), state, answers])

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def js(self, expr: str, arg: Any = None) -> Any:
        return self.page.evaluate(expr, arg)


def gpt2_small_payload() -> dict[str, Any]:
    """The page payload of a captured GPT-2 (`small_test`, batch 2): the camera and view tests' shared graph."""
    import torch

    import gradviz_nb as gv
    from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
    from gradviz_nb.widgets.page import graph as graph_payload

    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=2)
    return graph_payload(gv.trace(loss, model=model, capture=cap))

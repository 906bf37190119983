"""Each GraphWidget's `_esm` loader (`gradviz_nb/static/loader.js`, from `js/src/loader.ts`) in a blank page.

The loader is what anywidget imports for every widget; it finds the kernel's runtime model through
`model.widget_manager.get_model(id)`, decodes the canvas code once per page and hands `render` to it.
Here the models are THE fake model (`gradviz_nb/export/html.py`) plus a `widget_manager` serving one
runtime model built in Python exactly as `GradvizRuntime` syncs it, so the bytes decoded are the
shipped bundle's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import torch

import gradviz_nb as gv
from gradviz_nb.export.html import FAKE_MODEL, exported_state
from gradviz_nb.widgets.runtime import LOADER, encoded_bundle

browser = pagekit.browser

# Mount `n` widgets with the loader: anywidget imports `_esm` per model (a fresh Blob URL each time),
# calls initialize, then render. `runtime` is the runtime model's state, or null for "not found".
MOUNT = "async ([loader, runtime, state, n]) => {\n" + FAKE_MODEL + """
  window.reads = 0;  // how often a widget read the runtime's code (decoding starts there)
  const manager = { async get_model(id) {
    if (!runtime || id !== "rt1") throw new Error("widget model not found");
    return { get: (k) => { if (k === "code") window.reads++; return runtime[k]; } };
  } };
  const roots = [];
  for (let i = 0; i < n; i++) {
    const model = gradvizFakeModel(JSON.parse(JSON.stringify({ ...state, _runtime: "IPY_MODEL_rt1" })), null);
    model.widget_manager = manager;
    const el = document.createElement("div");
    el.style.width = "800px";
    document.body.append(el);
    const url = URL.createObjectURL(new Blob([loader], { type: "text/javascript" }));
    const mod = (await import(url)).default;
    await mod.initialize({ model });
    await mod.render({ model, el });
    const root = el.querySelector(".gradviz-root");
    if (root) await root.__gradviz.idle();
    roots.push(root ? root.__gradviz.cy.nodes().length : el.textContent);
  }
  return { roots, reads: window.reads, cached: globalThis.__gradvizRuntimes ? globalThis.__gradvizRuntimes.size : 0 };
}"""


def _state() -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return exported_state(gv.trace(model(torch.randn(5, 4)).pow(2).mean(), model=model))


def _mount(browser: Any, tmp_path: Path, runtime: dict[str, str] | None, n: int) -> tuple[dict[str, Any], list[str]]:
    page = browser.new_page(viewport={"width": 900, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    html = tmp_path / "index.html"
    html.write_text("<!doctype html><html><body></body></html>")
    page.goto(html.as_uri())
    try:
        result: dict[str, Any] = page.evaluate(MOUNT, [LOADER.read_text(), runtime, _state(), n])
    finally:
        page.close()
    return result, errors


def test_two_widgets_draw_from_one_decoded_runtime(browser: Any, tmp_path: Path) -> None:
    code, digest = encoded_bundle()
    result, errors = _mount(browser, tmp_path, {"code": code, "encoding": "gzip+base64", "digest": digest}, 2)
    assert all(isinstance(n, int) and n > 0 for n in result["roots"]), result
    assert result["reads"] == 1 and result["cached"] == 1  # decoded and imported once for both widgets
    assert errors == []


def test_plain_text_runtime_draws_too(browser: Any, tmp_path: Path) -> None:
    text = pagekit.BUNDLE.read_text()
    result, errors = _mount(browser, tmp_path, {"code": text, "encoding": "text", "digest": "plain"}, 1)
    assert isinstance(result["roots"][0], int) and result["roots"][0] > 0, result
    assert errors == []


def test_a_missing_runtime_says_why_instead_of_drawing(browser: Any, tmp_path: Path) -> None:
    result, errors = _mount(browser, tmp_path, None, 1)
    assert result["roots"] == ["gradviz_nb could not load its canvas: widget model not found"]
    assert result["cached"] == 0
    assert any("could not load the canvas code" in e for e in errors), errors  # also on the console

"""Page payloads for the layout benchmark (``bench_layout.mjs``): writes them to ``build/bench_layout/``.

Run from the repository root, then the node half::

    .venv/bin/python benchmarks/bench_layout.py
    node benchmarks/bench_layout.mjs

Screenshots of the same views in headless Chromium with any bundle (light and dark, 1000 and 1920 px),
each also run through the screenshot suite's checks (tests/lab/canvas_checks.py), into
``build/screenshots/layout-<name>-<view>-<theme>-<width>.png``::

    .venv/bin/python benchmarks/bench_layout.py --shots NAME=path/to/widget.js [NAME=other.js ...]

Graphs: the demo MLP and GPT-2 124M (batch 1, seq 64) with their module calls captured, and a
2,000-node chain (one leaf through 2,000 elementwise ops, no calls). The fixtures in
``tests/fixtures/*.json`` are read by the node half directly.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, gpt2_loss
from gradviz_nb.widgets.page import graph as graph_payload

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "bench_layout"
SHOTS = ROOT / "build" / "screenshots"
DARK = {"--jp-layout-color0": "#111111", "--jp-layout-color1": "#212121", "--jp-layout-color2": "#424242",
        "--jp-ui-font-color0": "rgba(255,255,255,1)", "--jp-ui-font-color1": "rgba(255,255,255,0.87)",
        "--jp-ui-font-color2": "rgba(255,255,255,0.54)", "--jp-brand-color1": "#42a5f5",
        "--jp-border-color1": "#616161"}
SET_DARK_JS = """(vars) => {
  for (const [k, v] of Object.entries(vars)) document.body.style.setProperty(k, v);
  document.body.style.background = vars['--jp-layout-color0'];
  document.body.dataset.jpThemeLight = 'false';
}"""


def mlp() -> dict[str, Any]:
    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4)).pow(2).mean()
    return dict(graph_payload(gv.trace(loss, model=model, capture=cap)))


def gpt2() -> dict[str, Any]:
    torch.manual_seed(0)
    model = GPT2(GPT2Config())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=1, seq=64)
    return dict(graph_payload(gv.trace(loss, model=model, capture=cap)))


def chain(n: int = 2000) -> dict[str, Any]:
    x = torch.randn(4, requires_grad=True)
    y = x
    for _ in range(n):
        y = y * 1.0001
    return dict(graph_payload(gv.trace(y.sum())))


def views() -> dict[str, dict[str, Any]]:
    """The photographed views: page states (graph data plus opened calls)."""
    def all_calls(p: dict[str, Any]) -> list[str]:
        return [c["id"] for c in p.get("calls", [])]

    mlp_p = json.loads((OUT / "mlp.json").read_text())
    gpt = json.loads((OUT / "gpt2.json").read_text())
    diff = json.loads((ROOT / "tests" / "fixtures" / "diff_lora.json").read_text())["added"]
    return {
        "mlp-open": {"graph_data": mlp_p, "expanded": all_calls(mlp_p)},
        "gpt2-blocks-open": {"graph_data": gpt, "expanded": ["blocks.0", "blocks.1", "blocks.2"]},
        "diff-open": {"graph_data": diff["graph"], "diff": diff["diff"], "expanded": all_calls(diff["graph"])},
    }


def shots(bundles: dict[str, Path]) -> None:
    """Each bundle's views photographed and checked (edges through boxes, labels inside boxes)."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "lab")]
    import canvas_checks as checks  # the test kit, only for this mode
    import pagekit
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as tmp:
        browser = pw.chromium.launch(executable_path=pagekit.CHROMIUM, args=pagekit.CHROMIUM_ARGS)
        for name, bundle in bundles.items():
            pagekit.BUNDLE = bundle
            for view, state in views().items():
                for width in (1000, 1920):
                    page = pagekit.MountedPage(browser, Path(tmp), {"height": 700, **state},
                                               viewport=(width + 40, 900), width=width)
                    root = page.page.locator(".gradviz-root").first
                    found = root.evaluate(checks.EDGE_CROSSING_JS, 1.0)
                    over = root.evaluate(checks.LABEL_OVERFLOW_JS, 1.0)
                    print(f"{name} {view} {width}: {len(found['crossing'])} of {found['checked']} edges through "
                          f"boxes, {len(over['overflow'])} of {over['checked']} labels overflow")
                    for theme in ("light", "dark"):
                        if theme == "dark":
                            page.js(SET_DARK_JS, DARK)
                            page.page.wait_for_timeout(400)
                        root.screenshot(path=str(SHOTS / f"layout-{name}-{view}-{theme}-{width}.png"))
                    page.page.close()
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shots", nargs="*", metavar="NAME=BUNDLE", help="photograph the views with these bundles")
    args = parser.parse_args()
    if args.shots:
        shots({k: Path(v) for k, v in (a.split("=", 1) for a in args.shots)})
        return
    OUT.mkdir(parents=True, exist_ok=True)
    for name, make in (("mlp", mlp), ("gpt2", gpt2), ("chain2000", chain)):
        payload = make()
        (OUT / f"{name}.json").write_text(json.dumps(payload))
        print(f"{name}: {len(payload['nodes'])} nodes, {len(payload['edges'])} edges")


if __name__ == "__main__":
    main()

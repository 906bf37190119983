"""Big-view benchmark: a flat 20,000-node chain in headless Chromium, today's renderer against the big view.

Run from the repository root (needs the built bundle, Playwright and Chromium at /usr/bin/chromium)::

    python benchmarks/bench_bigview.py                 # 20,000 nodes, 30 frames, both renderers
    python benchmarks/bench_bigview.py --nodes 50000   # another size
    python benchmarks/bench_bigview.py --screenshots build/screenshots   # also photograph each view

The graph is a real trace: a leaf times 1.0, ``nodes - 2`` times, summed (``MulBackward0`` nodes labelled
"Mul", no module boxes), drawn by the widget bundle in a blank page with the fake model of exported pages
(as the page tests do). In ONE run, each renderer gets its own page at 1200 x 800:

- **cytoscape**: today's renderer, every element in Cytoscape (``window.gradvizBigViewItems`` set past any size);
- **bigview**: the default, past ``BIG_VIEW_ITEMS`` items (``js/src/view/bigview/``).

and is measured, in the page's ``performance.now()``:

| column | what |
|---|---|
| first render | from ``render()`` to the layout idle plus two animation frames (the first frame drawn) |
| layout | the plain layout's own time (``lastLayoutMs``), the same work for both |
| frames | 30 viewport changes, each timed from the change to the second ``requestAnimationFrame`` after |
| | it (the frame that shows it has been drawn): 10 pans of 120 px at the first view's zoom (100%, |
| | labels), 10 zoom-outs by 0.75 about the centre (to 5.6%, no labels), 10 pans at that zoom; |
| | median and max over all 30 and per phase |
| sync | the big view only: mounting what the viewport needs once it settles (zoom back to 100%) |

The load average is printed at start and end: on a busy 2-core machine timings spread widely.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trace import load_note  # noqa: E402

BUNDLE = ROOT / "gradviz_nb" / "static" / "widget.js"
RENDERERS: dict[str, float | None] = {"cytoscape": 1e12, "bigview": None}

# Mount the bundle with the fake model (as tests/pagekit.py does) and time the first drawn frame.
MOUNT = """async ([source, text, limit]) => {
  window.gradvizBigViewItems = limit;
  const state = JSON.parse(text);  // Playwright's own argument encoding takes minutes for 7.5 MB
  __FAKE_MODEL__
  const raf2 = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const model = gradvizFakeModel(state, null);
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const t0 = performance.now();
  const mod = await import(url);
  const t1 = performance.now();
  const el = document.getElementById("host");
  await mod.default.render({ model, el });
  const hook = el.querySelector(".gradviz-root").__gradviz;
  await hook.idle();
  await raf2();
  const t2 = performance.now();
  window.gv = { model, el, hook };
  return { importMs: t1 - t0, renderMs: t2 - t1, layoutMs: hook.lastLayoutMs(), zoom: hook.cy.zoom(),
           inCytoscape: hook.cy.elements().length };
}"""

FRAMES = """async (n) => {
  const cy = window.gv.hook.cy;
  const raf2 = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const out = { pan: [], zoom: [], far: [] };
  const centre = { x: cy.width() / 2, y: cy.height() / 2 };
  for (const phase of ["pan", "zoom", "far"]) {
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      if (phase === "zoom") cy.zoom({ level: cy.zoom() * 0.75, renderedPosition: centre });
      else cy.panBy({ x: 0, y: i % 2 ? 120 : -120 });
      await raf2();
      out[phase].push(performance.now() - t);
    }
  }
  out.zoomEnd = cy.zoom();
  return out;
}"""

# Back to 100% about the centre, let the big view re-sync, then read what it mounted.
SETTLE = """async () => {
  const cy = window.gv.hook.cy;
  cy.zoom({ level: 1, renderedPosition: { x: cy.width() / 2, y: cy.height() / 2 } });
  await new Promise((r) => setTimeout(r, 600));
  const c = cy.container().dataset;
  return { syncMs: c.bigSyncMs ? Number(c.bigSyncMs) : null, mounted: c.bigMounted ? Number(c.bigMounted) : null,
           inCytoscape: cy.elements().length };
}"""


def chain_payload(nodes: int) -> dict[str, Any]:
    """The page payload of a traced flat chain of ``nodes`` autograd nodes (a leaf, Mul ops, a Sum)."""
    import torch

    import gradviz_nb as gv
    from gradviz_nb.widgets.page import graph as graph_payload

    w = torch.ones(3, requires_grad=True)
    x = w
    for _ in range(nodes - 2):
        x = x * 1.0
    return dict(graph_payload(gv.trace(x.sum())))


def stats(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} / {max(values):.1f}"


def run(
    renderer: str, payload: dict[str, Any], frames: int, shots: Path | None, browser: Any, tmp: Path
) -> dict[str, Any]:
    from gradviz_nb.export.html import FAKE_MODEL

    page = browser.new_page(viewport={"width": 1240, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    html = tmp / "index.html"
    host = '<div id="host" style="width:1200px"></div>'
    html.write_text(f'<!doctype html><html><body style="margin:10px">{host}</body></html>')
    page.goto(html.as_uri())
    state = {"graph_data": payload, "height": 800}
    t0 = time.perf_counter()
    mount = MOUNT.replace("__FAKE_MODEL__", FAKE_MODEL)
    first = page.evaluate(mount, [BUNDLE.read_text(), json.dumps(state), RENDERERS[renderer]])
    wall = time.perf_counter() - t0
    if shots:
        page.screenshot(path=str(shots / f"bigview_bench_{renderer}_first.png"))
    res = page.evaluate(FRAMES, frames // 3)
    if shots:
        page.screenshot(path=str(shots / f"bigview_bench_{renderer}_far.png"))
    settle = page.evaluate(SETTLE)
    page.close()
    return {"first": first, "wall_s": wall, "frames": res, "settle": settle, "errors": errors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=20_000, help="autograd nodes in the chain (default 20000)")
    ap.add_argument("--frames", type=int, default=30, help="viewport frames, split over pan, zoom-out, far pan")
    ap.add_argument("--only", choices=sorted(RENDERERS), default=None, help="measure one renderer only")
    ap.add_argument("--screenshots", default="", help="directory for a first-view and a zoomed-out PNG per renderer")
    args = ap.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from gradviz_nb.export.image import CHROMIUM, CHROMIUM_ARGS

    print(f"## bench_bigview: flat chain of {args.nodes:,} nodes\n\n{load_note()} at start", flush=True)
    t0 = time.perf_counter()
    payload = chain_payload(args.nodes)
    print(f"trace + payload {time.perf_counter() - t0:.1f} s, {len(json.dumps(payload)) / 1e6:.1f} MB", flush=True)
    shots = Path(args.screenshots) if args.screenshots else None
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
    rows = []
    with sync_playwright() as p, tempfile.TemporaryDirectory(prefix="gradviz_bigview_") as tmp:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for renderer in [args.only] if args.only else list(RENDERERS):
            r = run(renderer, payload, args.frames, shots, browser, Path(tmp))
            rows.append((renderer, r))
            print(f"- {renderer}: {json.dumps(r['settle'])}; errors {r['errors'][:2]}; {load_note()}", flush=True)
        browser.close()
    print(
        "\n| renderer | first render ms | layout ms | elements in Cytoscape | frames median / max ms "
        "| pan @100% | zoom out | pan @5.6% | sync ms (mounted at 100%) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for renderer, r in rows:
        f = r["frames"]
        every = f["pan"] + f["zoom"] + f["far"]
        s = r["settle"]
        sync = f"{s['syncMs']:.0f} ({s['mounted']})" if s["syncMs"] is not None else "-"
        print(
            f"| {renderer} | {r['first']['renderMs']:.0f} | {r['first']['layoutMs']:.0f} | "
            f"{r['first']['inCytoscape']:,} | {stats(every)} | {stats(f['pan'])} | {stats(f['zoom'])} | "
            f"{stats(f['far'])} | {sync} |"
        )
    print(f"\n{load_note()} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

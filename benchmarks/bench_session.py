"""Long-session benchmark: does the canvas get slower as a session goes on? GPT-2 124M in headless Chromium.

Run from the repository root (needs the built bundle, Playwright and Chromium at /usr/bin/chromium)::

    python benchmarks/bench_session.py                     # trace GPT-2 124M, fresh page vs after 10 opens
    python benchmarks/bench_session.py --state s.json      # reuse (or write) the page state
    python benchmarks/bench_session.py --profile out/      # also a CPU profile of each timed action
    python benchmarks/bench_session.py --bundle dev/widget.js  # e.g. an unminified build (function names)
    python benchmarks/bench_session.py --style-cost        # also the stylesheet's cost per element

Two pages of the same widget state (GPT-2 124M, batch 1, seq 64, the stack of blocks unfolded):

- fresh: open blocks.3, then the timed actions;
- session: 10 opens by mouse click (blocks.0 .. blocks.9; with ``--nested`` each block's attn and mlp
  too), each followed by a click on a node inside it so the details panel is shown, then the same actions;
- same view at mount: the session's open boxes as the ``expanded`` trait at mount (no history), then the
  same actions: a session slower than this page carries something from its history.

Timed actions, each from the click (a DOM ``click()`` on the toolbar button, or the hook call) to the view
drawn (``idle()`` plus two animation frames), in the page's ``performance.now()``:
Collapse all, search -> reveal (``search('c_fc')`` then ``reveal`` of ``blocks.7.mlp.c_fc``), Expand all,
Collapse all again. For each it also says whether the spinner was up right after the click (synchronously)
and at the first animation frame (what the first painted frame shows). With ``--profile`` each action runs
under Chrome's sampling profiler (CDP ``Profiler``), and the top self-time functions are printed; the
``.cpuprofile`` files open in Chrome DevTools.

With ``--style-cost`` each page, after its actions, expands all again and re-adds its elements 5 times
(the same definitions, removed and added in one batch, every element's style then read): Cytoscape's cost
of styling one element with the page's stylesheet (min of 5, microseconds per element), without layout.

Nothing is asserted: this prints numbers (``tests/page/test_frontend_incremental.py`` holds the checks).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

OPENS = [f"blocks.{i}" for i in range(10)]
ACTIONS = (("collapse all", "button", "gradviz-collapse-all"), ("search -> reveal", "reveal", "blocks.7.mlp.c_fc"),
           ("expand all", "button", "gradviz-expand-all"), ("collapse all again", "button", "gradviz-collapse-all"))

TIMED_JS = """async ([what, arg]) => {
  const h = gv.hook;
  const root = document.querySelector('.gradviz-root');
  const spinner = root.querySelector('[data-testid=gradviz-spinner]');
  let atFrame = null;
  const t0 = performance.now();
  requestAnimationFrame(() => { atFrame = !spinner.hidden; });
  let done;
  if (what === 'button') done = (root.querySelector(`[data-testid=${arg}]`).click(), null);
  else done = h.reveal((h.search('c_fc').find((x) => x.key.endsWith(arg)) || { key: arg }).key.replace(/^[nc]:/, ''));
  const atClick = !spinner.hidden;
  await done;
  await h.idle();
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const items = gv.hook.cy.elements().length;
  return { ms: performance.now() - t0, atClick, atFrame, items, layoutMs: +root.dataset.layoutMs };
}"""

# What a session accumulates: listeners on the canvas, Cytoscape's style sheet, elements, scratch data.
COUNTS_JS = """() => {
  const cy = gv.hook.cy;
  const on = (x) => ((x._private.emitter && x._private.emitter.listeners) || x._private.listeners || []).length;
  const ls = on(cy) + cy.elements().toArray().reduce((s, e) => s + on(e), 0);
  return { elements: cy.elements().length, cyListeners: ls, styleRules: cy.style().length,
           domNodes: document.getElementsByTagName('*').length,
           heapMB: performance.memory ? Math.round(performance.memory.usedJSHeapSize / 1e6) : null };
}"""


STYLE_COST_JS = """async () => {
  const root = document.querySelector('.gradviz-root');
  root.querySelector('[data-testid=gradviz-expand-all]').click();
  await gv.hook.idle();
  const cy = gv.hook.cy;
  const defs = cy.elements().jsons();
  let best = Infinity;
  for (let r = 0; r < 5; r++) {
    cy.elements().remove();
    const t0 = performance.now();
    let added;
    cy.batch(() => { added = cy.add(defs); });
    added.forEach((e) => { e.pstyle('label'); });
    best = Math.min(best, performance.now() - t0);
  }
  return { elements: defs.length, usPerElement: Math.round(1000 * best / defs.length) };
}"""


def gpt2_state(path: Path | None) -> dict[str, Any]:
    if path and path.exists():
        state: dict[str, Any] = json.loads(path.read_text())
        return state
    import torch

    import gradviz_nb as gv
    from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
    from gradviz_nb.widgets.graph_widget import GraphWidget

    torch.manual_seed(0)
    model = GPT2(GPT2Config())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=1, seq=64)
    w = GraphWidget(loss, model=model, capture=cap)
    state = dict(w.page_state())
    w.close()
    if path:
        path.write_text(json.dumps(state))
    return state


def top_functions(profile: dict[str, Any], n: int = 8) -> list[tuple[str, float]]:
    """Self time per function (ms) from a CDP profile: samples x interval, by callFrame."""
    nodes = {node["id"]: node for node in profile["nodes"]}
    counts = Counter(profile["samples"])
    dt = (profile["endTime"] - profile["startTime"]) / 1000 / max(1, len(profile["samples"]))
    by: Counter[str] = Counter()
    for nid, c in counts.items():
        f = nodes[nid]["callFrame"]
        by[f"{f['functionName'] or '(anonymous)'}:{f['lineNumber']}"] += c * dt
    return [(k, round(v, 1)) for k, v in by.most_common(n)]


def timed(page: Any, what: str, arg: str, cdp: Any, out: Path | None, tag: str) -> dict[str, Any]:
    if cdp:
        cdp.send("Profiler.start")
    r: dict[str, Any] = page.evaluate(TIMED_JS, [what, arg])
    if cdp:
        prof = cdp.send("Profiler.stop")["profile"]
        r["top"] = top_functions(prof)
        if out:
            (out / f"{tag}.cpuprofile").write_text(json.dumps(prof))
    return r


def run(browser: Any, state: dict[str, Any], opens: list[str], profile: Path | None, tag: str,
        preopened: list[str] | None = None, style_cost: bool = False) -> dict[str, Any]:
    from pagekit import MountedPage

    state = {**state, "expanded": preopened or []}
    page = MountedPage(browser, Path(tempfile.mkdtemp()), state, viewport=(1240, 900), width=1200)
    p = page.page
    cdp = None
    if profile:
        cdp = p.context.new_cdp_session(p)
        cdp.send("Profiler.enable")
        cdp.send("Profiler.setSamplingInterval", {"interval": 200})
    for call in opens:
        point = page.js("(id) => gv.hook.boxPoint(id)", call)
        p.mouse.click(point["x"], point["y"])
        page.js("() => gv.hook.idle()")
        inside = page.js("(id) => gv.hook.cy.nodes(`[box = 'c:${id}']`).filter((n) => n.data('kind') !== 'expanded')"
                         ".map((n) => n.id())[0]", call)
        if inside:  # select a node in the block: the details panel shows
            point = page.js("(k) => gv.hook.nodePoint(k.slice(2))", inside)
            if point:
                p.mouse.click(point["x"], point["y"])
                page.js("() => gv.hook.idle()")
    result: dict[str, Any] = {"before": page.js(COUNTS_JS)}
    for name, what, arg in ACTIONS:
        result[name] = timed(p, what, arg, cdp, profile, f"{tag}-{name.replace(' ', '_').replace('>', '')}")
    result["after"] = page.js(COUNTS_JS)
    if style_cost:
        result["style"] = page.js(STYLE_COST_JS)
    result["errors"] = page.errors
    p.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state", type=Path, default=None, help="page state JSON to reuse (written when missing)")
    ap.add_argument("--opens", type=int, default=10)
    ap.add_argument("--nested", action="store_true", help="each open also opens the block's attn and mlp")
    ap.add_argument("--profile", type=Path, default=None, help="folder for .cpuprofile files (and top functions)")
    ap.add_argument("--bundle", type=Path, default=None, help="another widget.js (an unminified build names functions)")
    ap.add_argument("--style-cost", action="store_true", help="also time styling the expanded view's elements")
    args = ap.parse_args()
    if args.bundle:
        import pagekit

        pagekit.BUNDLE = args.bundle
    from playwright.sync_api import sync_playwright

    from gradviz_nb.export.image import CHROMIUM, CHROMIUM_ARGS

    state = gpt2_state(args.state)
    state["unfolded"] = [f["id"] for f in state["graph_data"].get("folds", [])]
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, "--enable-precise-memory-info"])
        opens = [c for b in OPENS[: args.opens] for c in ([b, f"{b}.attn", f"{b}.mlp"] if args.nested else [b])]
        sc = args.style_cost
        runs = {"fresh": run(browser, state, ["blocks.3"], args.profile, "fresh", style_cost=sc),
                f"after {len(opens)} opens": run(browser, state, opens, args.profile, "session", style_cost=sc),
                # The same view drawn at mount, without the history: what is left is the view's own cost.
                f"same view at mount ({len(opens)} open)": run(browser, state, [], args.profile, "same", opens, sc)}
        browser.close()
    for tag, r in runs.items():
        print(f"\n{tag}: {r['before']} -> {r['after']}" + (f"  errors: {r['errors']}" if r["errors"] else ""))
        for name, _, _ in ACTIONS:
            x = r[name]
            print(f"  {name:20s} {x['ms']:7.0f} ms  spinner at click {x['atClick']!s:5s} at first frame "
                  f"{x['atFrame']!s:5s} elements {x['items']} (layout {x['layoutMs']} ms)")
            for fn, ms in x.get("top", [])[:5]:
                print(f"      {ms:7.1f} ms  {fn}")
        if "style" in r:
            st = r["style"]
            print(f"  style cost {st['usPerElement']} us per element ({st['elements']} elements, min of 5)")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

"""Browser benchmark: the exported widget page in headless Chromium, at growing graph sizes.

Run from the repository root (needs the built bundle, Playwright and Chromium at /usr/bin/chromium)::

    python benchmarks/bench_browser.py                       # 48x256, ~500, ~5,000, ~50,000 nodes
    python benchmarks/bench_browser.py --sizes 500,5000      # chosen sizes only
    python benchmarks/bench_browser.py --sizes 48x256        # the big-graph target model only

A size is a target number of autograd nodes (GPT-2 with d_model 32, 2 heads, n_layer picked to hit it,
as in ``bench_scale.py``) or ``LAYERSxWIDTH`` (e.g. ``48x256``: 48 blocks, d_model 256, 4 heads: issue
7's target model, about 2,100 nodes; width changes shapes, not the node count). Batch 1, seq 8.

For each size it exports two pages with ``gv.export_html`` and opens them from ``file://``:

- the graph page: ``gv.GraphWidget(loss, model=m, capture=cap)`` (boxes exist, the default first view);
- the recording page: ``gv.GraphWidget(gv.record_backward(loss, model=m, capture=cap))``.

and measures (wall clock, in the page's ``performance.now()`` except the first render):

| column | what |
|---|---|
| first render | from ``page.goto`` to ``.gradviz-root`` ``data-layout === 'idle'`` (parse, bundle import, layout) |
| unfold | ``__gradviz.unfold(<the folded stack>)`` then ``idle()``: the "N x Block" stack into its blocks |
| expand | ``await __gradviz.expand('blocks.3'); await __gradviz.idle()`` (``lastLayoutMs()``, and whether the
  layout was incremental); lazy pages include loading the block's nodes |
| max stall | the longest gap between 5 ms timer ticks in the page during unfold, expand and reveal |
| search | one ``__gradviz.search('c_fc.weight')`` over every node and box (after a first query built the index) |
| reveal | ``__gradviz.reveal('blocks.<n-2>.mlp.c_fc')``: load, open and centre a box two levels deep |
| what-if mode | ``setWhatIfMode(true)`` then two animation frames |
| toggle | ``gradvizModel.set('toggles', {detach: ['call:blocks.3']})`` then two animation frames (median of on/off) |
| step | on the recording page, ``__gradviz.stepTo(i)`` then two animation frames, 9 cursors spread over the pass |

Each size runs in a child process; each measurement has a timeout in the page (``--op-timeout``) and the
child has a wall-clock limit (``--size-timeout``): a page whose main thread hangs is killed and its
remaining cells are reported as ``timeout`` instead of hanging the script. Python-side export time and
page sizes are printed too. The browser is single-threaded for layout (ELK runs in a worker), so on a
busy 2-core machine the load average matters: it is printed at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trace import load_note  # noqa: E402

BLOCK = "blocks.3"
IDLE = "() => document.querySelector('.gradviz-root')?.dataset.layout === 'idle'"
RAF2 = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"

# Every in-page measurement races a timer, so a slow step reports "timeout" while the page still answers.
JS_EXPAND = """async ([what, id, limit]) => {
  const h = document.querySelector('.gradviz-root').__gradviz;
  // Heartbeat: the longest gap between 5 ms timer ticks is the longest main-thread stall.
  let last = performance.now(), stall = 0;
  const beat = setInterval(() => { const t = performance.now(); stall = Math.max(stall, t - last); last = t; }, 5);
  const t = performance.now();
  const run = what === 'unfold' ? h.unfold(id) : what === 'reveal' ? h.reveal(id) : h.expand(id);
  const done = run.then(() => h.idle()).then(() => 'ok', (e) => 'error: ' + e);
  const r = await Promise.race([done, new Promise((res) => setTimeout(() => res('timeout'), limit))]);
  const ms = performance.now() - t;
  clearInterval(beat);
  stall = Math.max(stall, performance.now() - last);
  const root = document.querySelector('.gradviz-root');
  return { r, ms, stall, layout: h.lastLayoutMs(), counts: h.visibleCounts(),
           incremental: root.dataset.layoutIncremental === 'true', loaded: h.loaded().length };
}"""

JS_SEARCH = """(q) => {
  const h = document.querySelector('.gradviz-root').__gradviz;
  h.search(q);  // the first query builds the index
  const t = performance.now();
  const hits = h.search(q);
  return { ms: performance.now() - t, hits: hits.length };
}"""

JS_FRAMES = """async ([what, arg, limit]) => {
  const h = document.querySelector('.gradviz-root').__gradviz;
  const raf2 = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const t = performance.now();
  if (what === 'mode') h.setWhatIfMode(arg);
  else if (what === 'toggles') window.gradvizModel.set('toggles', arg);
  else if (what === 'step') h.stepTo(arg);
  const r = await Promise.race([raf2().then(() => 'ok'),
                                new Promise((res) => setTimeout(() => res('timeout'), limit))]);
  return { r, ms: performance.now() - t, whatif: h.whatIf(), lastStep: h.lastStepMs ? h.lastStepMs() : null };
}"""


def emit(**record: Any) -> None:
    """One result line for the parent (flushed at once, so a killed child keeps what it measured)."""
    print("RESULT " + json.dumps(record), flush=True)


def parse_size(spec: str) -> tuple[int, int, int]:
    """``'5000'`` -> (n_layer, d_model, n_head) of the small GPT-2; ``'48x256'`` -> (48, 256, 4)."""
    from bench_scale import n_layer_for

    if "x" in spec:
        layers, width = spec.split("x")
        return int(layers), int(width), 4
    return n_layer_for(int(spec)), 32, 2


def child(spec: str, outdir: Path, op_timeout_ms: int, steps: int) -> None:
    """Build, export and measure one size; results go to stdout as ``RESULT {json}`` lines."""
    import torch
    from bench_trace import count_autograd_nodes

    import gradviz_nb as gv
    from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
    from gradviz_nb.export.image import CHROMIUM, CHROMIUM_ARGS
    from gradviz_nb.widgets.graph_widget import GraphWidget

    torch.set_num_threads(1)
    n_layer, d_model, n_head = parse_size(spec)
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=n_layer, n_head=n_head, d_model=d_model, vocab=101, block_size=16))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=1, seq=8)
    emit(key="nodes", value=count_autograd_nodes(loss), n_layer=n_layer, d_model=d_model)

    t0 = time.perf_counter()
    widget = GraphWidget(loss, model=model, capture=cap)
    widget_lazy = widget.lazy
    graph_page = gv.export_html(widget, outdir / f"graph_{spec}.html")
    emit(key="export_graph_s", value=time.perf_counter() - t0, bytes=graph_page.stat().st_size)
    del widget
    t0 = time.perf_counter()
    rec = gv.record_backward(loss, model=model, capture=cap)
    rwidget = GraphWidget(rec)
    recording: dict[str, Any] = rwidget.recording
    n_steps = len(recording.get("steps", []))
    rec_page = gv.export_html(rwidget, outdir / f"record_{spec}.html")
    emit(key="export_record_s", value=time.perf_counter() - t0, bytes=rec_page.stat().st_size, steps=n_steps)
    del rwidget, rec

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        t0 = time.perf_counter()
        page.goto(graph_page.as_uri(), wait_until="commit", timeout=op_timeout_ms)
        try:
            page.wait_for_function(IDLE, timeout=op_timeout_ms, polling=20)
        except Exception:  # playwright TimeoutError
            emit(key="first_render", status="timeout", errors=errors[:2])
            return
        first = time.perf_counter() - t0
        info = page.evaluate(
            "() => { const r = document.querySelector('.gradviz-root');"
            " return { layout: Number(r.dataset.layoutMs), nodes: r.dataset.visibleNodes,"
            " boxes: r.dataset.visibleBoxes }; }"
        )
        emit(key="first_render", status="ok", ms=first * 1e3, lazy=widget_lazy, **info)

        def box_op(key: str, what: str, target: str) -> None:
            res = page.evaluate(JS_EXPAND, [what, target, op_timeout_ms])
            emit(key=key, status=res["r"], ms=res["ms"], layout=res["layout"], stall=res["stall"],
                 counts=res["counts"], incremental=res["incremental"], loaded=res["loaded"])
            if res["r"] == "timeout":  # the page may still be laying out: let it finish first
                page.wait_for_function(IDLE, timeout=op_timeout_ms, polling=50)

        folded = page.evaluate("() => document.querySelector('.gradviz-root').__gradviz.folded()")
        if folded:
            box_op("unfold", "unfold", folded[0])
        box_op("expand", "expand", BLOCK)
        res = page.evaluate(JS_SEARCH, "c_fc.weight")
        emit(key="search", status="ok", ms=res["ms"], hits=res["hits"])
        box_op("reveal", "reveal", f"blocks.{n_layer - 2}.mlp.c_fc")

        res = page.evaluate(JS_FRAMES, ["mode", True, op_timeout_ms])
        emit(key="whatif_mode", status=res["r"], ms=res["ms"])
        on = {"detach": ["call:" + BLOCK], "freeze": []}
        off: dict[str, list[str]] = {"detach": [], "freeze": []}
        on_ms: list[float] = []
        off_ms: list[float] = []
        status, lost = "ok", None
        for _ in range(3):
            for toggles, bucket in ((on, on_ms), (off, off_ms)):
                res = page.evaluate(JS_FRAMES, ["toggles", toggles, op_timeout_ms])
                bucket.append(res["ms"])
                if toggles is on:
                    lost = res["whatif"]["lost"] if res["whatif"] else None
                if res["r"] != "ok":
                    status = res["r"]
        emit(
            key="toggle",
            status=status,
            ms=statistics.median(on_ms),
            off_ms=statistics.median(off_ms),
            lost=len(lost) if lost is not None else None,
        )
        page.close()

        page = browser.new_page(viewport={"width": 1200, "height": 900})
        t0 = time.perf_counter()
        page.goto(rec_page.as_uri(), wait_until="commit", timeout=op_timeout_ms)
        try:
            page.wait_for_function(IDLE, timeout=op_timeout_ms, polling=20)
        except Exception:
            emit(key="record_render", status="timeout")
            return
        emit(key="record_render", status="ok", ms=(time.perf_counter() - t0) * 1e3)
        cursors = sorted({round(i * (n_steps - 1) / max(1, steps - 1)) for i in range(steps)}) if n_steps else []
        step_ms, status = [], "ok"
        for c in cursors:
            res = page.evaluate(JS_FRAMES, ["step", c, op_timeout_ms])
            step_ms.append(res["ms"])
            if res["r"] != "ok":
                status = res["r"]
                break
        if step_ms:
            emit(key="step", status=status, ms=statistics.median(step_ms), max_ms=max(step_ms), n=len(step_ms))
        else:
            emit(key="step", status="no steps")
        browser.close()


def run_size(spec: str, args: argparse.Namespace, outdir: Path) -> dict[str, dict[str, Any]]:
    """Run one size in a child process with a wall-clock limit; returns its results by key."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        spec,
        "--outdir",
        str(outdir),
        "--op-timeout",
        str(args.op_timeout),
        "--steps",
        str(args.steps),
    ]
    results: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.size_timeout)
        out, err, killed = proc.stdout, proc.stderr, False
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        killed = True
    for line in out.splitlines():
        if line.startswith("RESULT "):
            rec = json.loads(line[7:])
            results[rec.pop("key")] = rec
    results["_meta"] = {
        "killed": killed,
        "seconds": time.perf_counter() - t0,
        "stderr": err.strip().splitlines()[-1:] if err.strip() else [],
    }
    return results


def cell(results: dict[str, dict[str, Any]], key: str, field: str = "ms") -> str:
    """A table cell: milliseconds, or why there is none (timeout, error, not reached)."""
    rec = results.get(key)
    if rec is None:
        return "timeout" if results["_meta"]["killed"] else "n/a"
    if rec.get("status", "ok") != "ok":
        return str(rec["status"])
    value = rec.get(field)
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--sizes",
        default="48x256,500,5000,50000",
        help="comma-separated: target autograd nodes, or LAYERSxWIDTH (default 48x256,500,5000,50000)",
    )
    ap.add_argument("--op-timeout", type=int, default=60_000, help="ms allowed for each page measurement")
    ap.add_argument("--size-timeout", type=int, default=600, help="s allowed for a whole size (child process)")
    ap.add_argument("--steps", type=int, default=9, help="stepper cursors measured per recording")
    ap.add_argument("--outdir", default="", help="where the exported pages go (default: a temp dir)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        sys.setrecursionlimit(100_000)
        child(args.child, Path(args.outdir), args.op_timeout, args.steps)
        return 0

    from gradviz_nb.export.image import CHROMIUM

    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip()
    print("## bench_browser")
    print(f"\n{platform.platform()}, {os.cpu_count()} cores, {version}, python {platform.python_version()}")
    print(f"\n{load_note()} at start\n")
    specs = [s.strip() for s in args.sizes.split(",") if s.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="gradviz_bench_") as tmp:
        outdir = Path(args.outdir or tmp)
        outdir.mkdir(parents=True, exist_ok=True)
        for spec in specs:
            res = run_size(spec, args, outdir)
            meta = res["_meta"]
            print(
                f"- {spec}: {meta['seconds']:.1f} s{' (KILLED at --size-timeout)' if meta['killed'] else ''}; "
                f"{load_note()}" + (f"; stderr: {meta['stderr'][0]}" if meta["stderr"] else ""),
                flush=True,
            )
            rows.append((spec, res))
    print(
        "\n| size | autograd nodes | lazy | page MB | export s | first render ms | visible nodes/boxes "
        "| unfold ms | expand ms | (layout ms, incremental) | max stall ms | search ms | reveal ms "
        "| what-if mode ms | toggle ms | rec page MB | rec render ms | steps | step ms (median) | step ms (max) |"
    )
    print("|---|" + "---:|" * 19)
    for spec, res in rows:
        nodes = res.get("nodes", {})
        eg, er = res.get("export_graph_s", {}), res.get("export_record_s", {})
        fr = res.get("first_render", {})
        vis = f"{fr.get('nodes', '-')}/{fr.get('boxes', '-')}" if fr.get("status") == "ok" else "-"
        page_mb = f"{eg['bytes'] / 1e6:.1f}" if eg else "-"
        rec_mb = f"{er['bytes'] / 1e6:.1f}" if er else "-"
        export_s = f"{eg['value']:.1f}" if eg else "-"
        n_str = f"{nodes['value']:,}" if nodes else "-"
        label = f"{spec} ({nodes.get('n_layer', '?')} layers, d {nodes.get('d_model', '?')})"
        ex = res.get("expand", {})
        layout = f"{cell(res, 'expand', 'layout')}, {'yes' if ex.get('incremental') else 'no'}" if ex else "-"
        stall = max((res.get(k, {}).get("stall") or 0) for k in ("unfold", "expand", "reveal"))
        print(
            f"| {label} | {n_str} | {'yes' if fr.get('lazy') else 'no'} | {page_mb} | {export_s} | "
            f"{cell(res, 'first_render')} | {vis} | {cell(res, 'unfold')} | {cell(res, 'expand')} | {layout} | "
            f"{stall:.0f} | {cell(res, 'search')} | {cell(res, 'reveal')} | {cell(res, 'whatif_mode')} | "
            f"{cell(res, 'toggle')} | {rec_mb} | {cell(res, 'record_render')} | {er.get('steps', '-')} | "
            f"{cell(res, 'step')} | {cell(res, 'step', 'max_ms')} |"
        )
    print(f"\n{load_note()} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

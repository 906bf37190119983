"""Scale benchmark: trace time, Python memory and payload size against graph size.

Run from the repository root::

    python benchmarks/bench_scale.py                    # ~1k, 10k, 50k, 100k autograd nodes
    python benchmarks/bench_scale.py --quick            # ~1k and ~3k nodes, 3 repeats: a smoke test
    python benchmarks/bench_scale.py --max-nodes 20000  # stop before sizes above 20k nodes

The graphs are :class:`gradviz_nb.demo_models.GPT2` with a growing ``n_layer`` and a small width
(``d_model`` 32, 2 heads, vocab 101, batch 1, seq 8): about 43 autograd nodes per block plus 15 around
them, so ``n_layer`` is picked to hit each target size. Each forward runs inside ``gv.capture`` (the
trace attributes nodes to module calls, as the widget needs). For each size it measures, on the same
loss and in one process:

(a) ``gv.trace(loss, model=m, capture=cap)``: median wall and process-CPU time of ``--repeats`` calls
    (GC off while timing), and the peak Python heap of one more call under ``tracemalloc``;
(b) torchviz ``make_dot(loss, params=...)``: the same (the ``Digraph`` object only, no render);
(c) the widget payload: ``len(json.dumps(page.graph(g)))`` and the time of ``page.graph`` + ``dumps``;
    and the lazy skeleton a big graph's widget really sends first (``gradviz_nb.widgets.page.lazy``);
(d) torchview ``draw_graph(model, input_data=tokens, depth=3)``, which builds its graph by running a
    forward itself, against the same work on our side: a forward inside ``gv.capture`` plus
    ``gv.trace`` (row "fwd+trace"); skipped above ``--torchview-max-nodes``.

It prints a table with microseconds per autograd node and the ratio trace/make_dot, then a
least-squares fit ``cpu = a + b * nodes`` per row (``b`` = marginal cost per node, R^2), the
log-log exponent (1.0 = linear, 2.0 = quadratic) and the spread of per-node CPU cost across sizes:
tracing is linear when the per-node cost stays roughly constant as the graph grows.

Run with ``torch.set_num_threads(1)`` (the default here): tracing is single-threaded Python, and on a
busy machine the CPU column is the one to read. torchviz builds its graph recursively, so the run
happens in a thread with a large stack and a high recursion limit.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trace import count_autograd_nodes, fmt_ms, load_note, machine_line

from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss

NODES_FIXED = 15  # autograd nodes outside the blocks (embeddings, ln_f, lm_head, loss)
NODES_PER_BLOCK = 43  # per GPT-2 block at d_model 32, seq 8 (measured: 1 layer 58 nodes, 2 layers 101)


@dataclass(frozen=True)
class Stats:
    """Median wall and process-CPU seconds of ``n`` calls."""

    wall: float
    cpu: float
    n: int


@dataclass
class SizeResult:
    """Everything measured on one graph size."""

    n_layer: int
    nodes: int  # distinct autograd nodes reachable from the loss
    nx_nodes: int = 0
    build_s: float = 0.0  # model + captured forward, for reference
    trace: Stats | None = None
    trace_peak: int = 0  # bytes, tracemalloc peak of one gv.trace call
    dot: Stats | None = None
    dot_peak: int = 0
    dot_note: str = ""
    payload_bytes: int = 0
    payload: Stats | None = None
    lazy_bytes: int = 0  # the lazy skeleton (0 when gradviz_nb.widgets.page.lazy is not there)
    fwd_trace: Stats | None = None  # forward in gv.capture + gv.trace, to set against torchview
    tv: Stats | None = None
    tv_note: str = ""
    notes: list[str] = field(default_factory=list)


def n_layer_for(nodes: int) -> int:
    """Blocks needed for about ``nodes`` autograd nodes."""
    return max(1, round((nodes - NODES_FIXED) / NODES_PER_BLOCK))


def measure(fn: Callable[[], object], repeats: int) -> Stats:
    """Median wall/CPU time of ``repeats`` calls after one warm-up call, GC off while timing."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        finally:
            gc.enable()
    return Stats(statistics.median(walls), statistics.median(cpus), repeats)


def peak_python_bytes(fn: Callable[[], object]) -> int:
    """Peak Python heap allocated during one call (tracemalloc; tensor storage is not counted)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
        del out
    finally:
        tracemalloc.stop()
    return peak


def bench_size(gv: Any, target: int, repeats: int, torchview_max: int) -> SizeResult:
    """Build a GPT-2 of about ``target`` autograd nodes and measure every row on it."""
    from gradviz_nb.widgets import page

    n_layer = n_layer_for(target)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=n_layer, n_head=2, d_model=32, vocab=101, block_size=16))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=1, seq=8)
    res = SizeResult(n_layer=n_layer, nodes=count_autograd_nodes(loss), build_s=time.perf_counter() - t0)

    def trace() -> Any:
        return gv.trace(loss, model=model, capture=cap)

    g = trace()
    res.nx_nodes = g.nx.number_of_nodes()
    res.trace = measure(trace, repeats)
    res.trace_peak = peak_python_bytes(trace)

    def payload() -> int:
        return len(json.dumps(page.graph(g)))

    res.payload_bytes = payload()
    res.payload = measure(payload, repeats)
    try:
        from gradviz_nb.widgets.page.lazy import lazy_payload
    except ImportError:
        pass
    else:
        res.lazy_bytes = len(json.dumps(lazy_payload(g, [""])))

    def fwd_trace() -> Any:
        with gv.capture(model) as c:
            out = gpt2_loss(model, batch=1, seq=8)
        return gv.trace(out, model=model, capture=c)

    tv_repeats = max(1, min(repeats, 3))
    if res.nodes > torchview_max:
        res.tv_note = f"skipped above {torchview_max:,} nodes"
    else:
        try:
            from torchview import draw_graph
        except ImportError as exc:
            res.tv_note = f"skipped: {exc}"
        else:
            tokens = torch.randint(0, 101, (1, 8), generator=torch.Generator().manual_seed(0))
            res.fwd_trace = measure(fwd_trace, tv_repeats)
            try:
                res.tv = measure(lambda: draw_graph(model, input_data=tokens, depth=3), tv_repeats)
            except Exception as exc:  # report, do not die: the other rows stand
                res.tv_note = f"failed: {type(exc).__name__}"

    try:
        from torchviz import make_dot
    except ImportError as exc:
        res.dot_note = f"skipped: {exc}"
    else:
        params = dict(model.named_parameters())

        def dot() -> Any:
            return make_dot(loss, params=params)

        try:
            res.dot = measure(dot, repeats)
            res.dot_peak = peak_python_bytes(dot)
        except RecursionError as exc:
            res.dot_note = f"failed: RecursionError: {exc}"
    return res  # the graph, loss and model are freed with this frame


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares ``y = a + b x``: returns ``(a, b, r2)``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    b = sxy / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return a, b, 1.0 - ss_res / ss_tot if ss_tot else 1.0


def fmt_mb(n: int) -> str:
    return f"{n / 1e6:.1f}" if n >= 1e6 else f"{n / 1e6:.2f}"


def print_tables(results: list[SizeResult]) -> None:
    """The per-size table, then the linearity check of each row."""
    print("\n### Per size (CPU ms = median process time; us/node = CPU us per autograd node)\n")
    print(
        "| n_layer | autograd nodes | gv.trace cpu ms | wall ms | us/node | py peak MB "
        "| make_dot cpu ms | wall ms | us/node | py peak MB | trace/make_dot cpu | payload MB | B/node "
        "| payload cpu ms | lazy first payload B/node | fwd+trace ms | torchview ms | fwd+trace/torchview | n |"
    )
    print("|" + "---:|" * 19)
    for r in results:
        tr, dt, pl = r.trace, r.dot, r.payload
        assert tr is not None and pl is not None
        dot_cells = (
            [
                fmt_ms(dt.cpu),
                fmt_ms(dt.wall),
                f"{dt.cpu / r.nodes * 1e6:.1f}",
                fmt_mb(r.dot_peak),
                f"{tr.cpu / dt.cpu:.2f}x",
            ]
            if dt
            else ["-", "-", "-", "-", r.dot_note or "-"]
        )
        print(
            f"| {r.n_layer} | {r.nodes:,} | {fmt_ms(tr.cpu)} | {fmt_ms(tr.wall)} | "
            f"{tr.cpu / r.nodes * 1e6:.1f} | {fmt_mb(r.trace_peak)} | {' | '.join(dot_cells)} | "
            f"{fmt_mb(r.payload_bytes)} | {r.payload_bytes / r.nodes:.0f} | {fmt_ms(pl.cpu)} | "
            f"{f'{r.lazy_bytes / r.nodes:.0f}' if r.lazy_bytes else '-'} | "
            f"{fmt_ms(r.fwd_trace.cpu) if r.fwd_trace else '-'} | {fmt_ms(r.tv.cpu) if r.tv else r.tv_note or '-'} | "
            f"{f'{r.fwd_trace.cpu / r.tv.cpu:.2f}x' if r.fwd_trace and r.tv else '-'} | {tr.n} |"
        )
    if len(results) < 2:
        print("\n(one size only: no linearity check)")
        return
    print("\n### Linearity (least squares over the sizes above)\n")
    print("| row | fit: a + b*nodes | R^2 | log-log exponent | us/node min..max | max/min |")
    print("|---|---|---:|---:|---|---:|")
    xs = [float(r.nodes) for r in results]
    rows: list[tuple[str, list[float] | None]] = [
        ("gv.trace cpu", [r.trace.cpu for r in results if r.trace]),
        ("make_dot cpu", [r.dot.cpu for r in results] if all(r.dot for r in results) else None),  # type: ignore[union-attr]
        ("gv.trace py peak", [float(r.trace_peak) for r in results]),
        ("make_dot py peak", [float(r.dot_peak) for r in results] if all(r.dot for r in results) else None),
        ("payload bytes", [float(r.payload_bytes) for r in results]),
        ("payload cpu", [r.payload.cpu for r in results if r.payload]),
        ("lazy first payload bytes", [float(r.lazy_bytes) for r in results] if all(r.lazy_bytes for r in results)
         else None),
        ("torchview cpu", [r.tv.cpu for r in results] if all(r.tv for r in results) else None),  # type: ignore[union-attr]
    ]
    for label, ys in rows:
        if not ys:
            print(f"| {label} | - | - | - | - | - |")
            continue
        a, b, r2 = fit(xs, ys)
        _, k, _ = fit([math.log(x) for x in xs], [math.log(max(y, 1e-12)) for y in ys])
        per = [y / x for x, y in zip(xs, ys, strict=True)]
        if label.endswith("cpu"):
            unit, scale = "us", 1e6
            fit_s = f"{a * 1e3:.2f} ms + {b * 1e6:.2f} us/node"
        else:
            unit, scale = "B", 1.0
            fit_s = f"{a / 1e3:.0f} kB + {b:.0f} B/node"
        spread = f"{min(per) * scale:.1f}..{max(per) * scale:.1f} {unit}"
        print(f"| {label} | {fit_s} | {r2:.4f} | {k:.2f} | {spread} | {max(per) / min(per):.2f} |")
    print("\nLinear growth: R^2 near 1, exponent near 1.0, per-node cost roughly constant (max/min near 1).")


def run(args: argparse.Namespace) -> int:
    import gradviz_nb as gv

    torch.set_num_threads(args.threads)
    sizes = [1000, 3000] if args.quick else [1000, 10_000, 50_000, 100_000]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    if args.max_nodes:
        sizes = [s for s in sizes if s <= args.max_nodes]
    print("## bench_scale")
    print(f"\n{machine_line(gv)}")
    print(f"\nGPT2(d_model=32, n_head=2, vocab=101), batch 1, seq 8, captured; {load_note()} at start")
    results = []
    for target in sizes:
        repeats = args.repeats or (3 if args.quick else 5 if target <= 10_000 else 3)
        t0 = time.perf_counter()
        res = bench_size(gv, target, repeats, args.torchview_max_nodes)
        results.append(res)
        print(
            f"- ~{target:,}: n_layer {res.n_layer}, {res.nodes:,} autograd nodes ({res.nx_nodes:,} nx nodes), "
            f"model+forward {res.build_s:.1f} s, size took {time.perf_counter() - t0:.1f} s; {load_note()}",
            flush=True,
        )
    print_tables(results)
    print(f"\n{load_note()} at end")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="~1k and ~3k nodes, 3 repeats (smoke test)")
    ap.add_argument("--sizes", default="", help="comma-separated target node counts (default 1000,10000,50000,100000)")
    ap.add_argument("--max-nodes", type=int, default=0, help="skip target sizes above this many nodes")
    ap.add_argument("--repeats", type=int, default=0, help="timed repeats per row (default 5, 3 above 10k nodes)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--torchview-max-nodes", type=int, default=60_000, help="skip torchview above this size")
    args = ap.parse_args(argv)
    # torchviz's make_dot (and deep module trees) recurse once per node along the graph's depth.
    sys.setrecursionlimit(1_000_000)
    threading.stack_size(1 << 29)
    box: list[int] = []
    worker = threading.Thread(target=lambda: box.append(run(args)))
    worker.start()
    worker.join()
    return box[0] if box else 1


if __name__ == "__main__":
    raise SystemExit(main())

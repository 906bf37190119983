"""Trace-time benchmark: gradviz_nb against torchviz and torchview, in one run on one machine.

Run from the repository root::

    python benchmarks/bench_trace.py            # GPT-2 124M (batch 1, seq 64) and ResNet18Like
    python benchmarks/bench_trace.py --quick    # tiny GPT-2 and a narrow ResNet: a smoke test

For each model it times (median of ``--repeats`` runs, ``time.perf_counter``, GC off while timing;
also the median process CPU time, which stays comparable when the machine is busy):

(a) ``gv.trace(loss, model=model)``                 walk the autograd graph into NetworkX
(b) ``gv.trace(loss, model=model, capture=cap)``    the same, plus module attribution
(c) torchviz ``make_dot(loss, params=...)``         build the graphviz Digraph only (no render)
(c') the same with ``show_attrs=True, show_saved=True``
(d) torchview ``draw_graph(model, input)``          builds its own graph by running a forward
(e) a plain forward (+ loss) against the same forward inside ``with gv.capture(model) as cap:``

and prints a table and the ratios trace/make_dot and capture_forward/plain_forward. Rows whose
library is missing are reported as skipped, with the reason, so the script always finishes.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from gradviz_nb.demo_models import GPT2, GPT2Config, ResNet18Like


@dataclass(frozen=True)
class Stats:
    """Wall-clock median and minimum, and process-CPU median, in seconds."""

    median: float
    best: float
    cpu_median: float


@dataclass
class Timing:
    """Result of timing one callable, or why it was skipped (``stats`` is None)."""

    label: str
    stats: Stats | None = None
    repeats: int = 0
    note: str = ""


def _measure(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and process-CPU time of one call, with the garbage collector off (as in ``timeit``).

    CPU time (summed over torch's threads) barely moves when other processes compete for the cores,
    so its ratios stay meaningful on a shared machine where wall-clock medians do not.
    """
    gc.collect()
    gc.disable()
    try:
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - w0, time.process_time() - c0
    finally:
        gc.enable()


def _stats(samples: list[tuple[float, float]]) -> Stats:
    walls = [w for w, _ in samples]
    return Stats(statistics.median(walls), min(walls), statistics.median(c for _, c in samples))


def time_it(fn: Callable[[], object], repeats: int, warmup: int = 1) -> Stats:
    """Time ``fn()`` over ``repeats`` calls after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    return _stats([_measure(fn) for _ in range(repeats)])


def time_pair(fn_a: Callable[[], object], fn_b: Callable[[], object], repeats: int) -> tuple[Stats, Stats]:
    """Time two callables interleaved (a, b, a, b, ...) so drift on the machine hits both alike."""
    fn_a()
    fn_b()
    samples_a, samples_b = [], []
    for _ in range(repeats):
        samples_a.append(_measure(fn_a))
        samples_b.append(_measure(fn_b))
    return _stats(samples_a), _stats(samples_b)


def load_gradviz() -> tuple[Any, str]:
    """Import gradviz_nb, or return ``(None, reason)`` when its tracing API is not usable yet."""
    try:
        import gradviz_nb as gv
    except Exception as exc:  # a broken import in a package under development
        return None, f"import gradviz_nb failed: {type(exc).__name__}: {exc}"
    missing = [name for name in ("trace", "capture") if not hasattr(gv, name)]
    if missing:
        return None, f"gradviz_nb has no {', '.join(missing)} yet"
    return gv, ""


@dataclass
class Case:
    """One model to benchmark: how to run it to a scalar loss, and an input for torchview."""

    name: str
    model: nn.Module
    loss_fn: Callable[[], Tensor]
    torchview_input: Tensor


def gpt2_case(quick: bool, seq: int) -> Case:
    """GPT-2 124M (or the tiny test config), batch 1, fixed random tokens."""
    torch.manual_seed(0)
    cfg = GPT2Config.small_test() if quick else GPT2Config()
    seq = min(seq, cfg.block_size)
    model = GPT2(cfg)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg.vocab, (1, seq), generator=gen)
    targets = torch.randint(0, cfg.vocab, (1, seq), generator=gen)

    def loss_fn() -> Tensor:
        _, loss = model(idx, targets)
        assert isinstance(loss, Tensor)
        return loss

    label = "GPT-2 tiny" if quick else f"GPT-2 124M (1x{seq})"
    return Case(label, model, loss_fn, idx)


def resnet_case(quick: bool, batch: int, size: int) -> Case:
    """ResNet18Like in train mode (BatchNorm uses batch statistics), cross-entropy loss."""
    torch.manual_seed(0)
    model = ResNet18Like(num_classes=10, width=8 if quick else 64)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, size, size, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)

    def loss_fn() -> Tensor:
        return F.cross_entropy(model(x), y)

    width = "narrow" if quick else "11M"
    return Case(f"ResNet18Like {width} ({batch}x3x{size}x{size})", model, loss_fn, x)


def bench_case(case: Case, gv: Any, gv_reason: str, repeats: int, fwd_repeats: int) -> list[Timing]:
    """Time every variant on one model; returns the rows in a fixed order."""
    rows: list[Timing] = []
    model = case.model
    params = dict(model.named_parameters())
    loss = case.loss_fn()
    n_autograd = count_autograd_nodes(loss)

    # (a), (b): tracing an existing graph. The same loss is traced each time; tracing must not
    # consume it (no backward is run).
    if gv is not None:
        with gv.capture(model) as cap:
            cap_loss = case.loss_fn()
        g = gv.trace(loss, model=model)
        st = time_it(lambda: gv.trace(loss, model=model), repeats)
        rows.append(Timing("(a) gv.trace", st, repeats, f"{g.nx.number_of_nodes()} nx nodes"))
        gc_ = gv.trace(cap_loss, model=model, capture=cap)
        ops = [d for _, d in gc_.nx.nodes(data=True) if d.get("kind") == "op"]
        attributed = sum(1 for d in ops if d.get("module"))
        st = time_it(lambda: gv.trace(cap_loss, model=model, capture=cap), repeats)
        note = f"{attributed}/{len(ops)} op nodes inside a module"
        rows.append(Timing("(b) gv.trace + capture", st, repeats, note))
        del g, gc_, cap, cap_loss
    else:
        rows.append(Timing("(a) gv.trace", note=f"skipped: {gv_reason}"))
        rows.append(Timing("(b) gv.trace + capture", note=f"skipped: {gv_reason}"))

    # (c): torchviz, Digraph object only.
    try:
        from torchviz import make_dot
    except ImportError as exc:
        rows.append(Timing("(c) torchviz make_dot", note=f"skipped: {exc}"))
        rows.append(Timing("(c') make_dot show_attrs", note=f"skipped: {exc}"))
    else:
        dot = make_dot(loss, params=params)
        n_dot = sum(1 for line in dot.body if "[label=" in line)
        st = time_it(lambda: make_dot(loss, params=params), repeats)
        rows.append(Timing("(c) torchviz make_dot", st, repeats, f"{n_dot} dot nodes"))
        st = time_it(lambda: make_dot(loss, params=params, show_attrs=True, show_saved=True), repeats)
        rows.append(Timing("(c') make_dot show_attrs", st, repeats, "+ saved tensors/attrs"))

    # (d): torchview traces by running the model itself, so its time includes a forward.
    try:
        from torchview import draw_graph
    except ImportError as exc:
        rows.append(Timing("(d) torchview draw_graph", note=f"skipped: {exc} (pip install torchview)"))
    else:
        tv_repeats = max(1, min(repeats, 5))
        try:
            st = time_it(lambda: draw_graph(model, input_data=case.torchview_input, depth=3), tv_repeats)
            rows.append(Timing("(d) torchview draw_graph", st, tv_repeats, "depth=3, includes a forward"))
        except Exception as exc:
            rows.append(Timing("(d) torchview draw_graph", note=f"failed: {type(exc).__name__}: {exc}"))

    # (e): forward overhead of capture, interleaved with plain forwards.
    def plain() -> None:
        case.loss_fn()

    if gv is not None:

        def captured() -> None:
            with gv.capture(model):
                case.loss_fn()

        st_plain, st_cap = time_pair(plain, captured, fwd_repeats)
        rows.append(Timing("(e) plain forward+loss", st_plain, fwd_repeats, f"{n_autograd} autograd nodes"))
        rows.append(Timing("(e) forward in gv.capture", st_cap, fwd_repeats))
    else:
        st_plain = time_it(plain, fwd_repeats)
        rows.append(Timing("(e) plain forward+loss", st_plain, fwd_repeats, f"{n_autograd} autograd nodes"))
        rows.append(Timing("(e) forward in gv.capture", note=f"skipped: {gv_reason}"))
    return rows


def count_autograd_nodes(root: Tensor) -> int:
    """Number of distinct autograd nodes reachable from ``root.grad_fn`` (a size reference)."""
    seen: set[object] = set()
    stack = [root.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return len(seen)


def load_note() -> str:
    """The 1-minute load average against the core count: timings are only comparable when idle."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    busy = " (BUSY: wall times are unreliable; prefer --threads 1 and the cpu column)" if load > 0.75 * cores else ""
    return f"load average {load:.2f} on {cores} cores{busy}"


def machine_line(gv: Any) -> str:
    """Platform, torch threads and the versions of everything compared (``gv`` None when not importable)."""
    versions = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    if gv is not None:
        versions.append(f"gradviz_nb {getattr(gv, '__version__', '?')}")
    for dist in ("torchviz", "torchview", "networkx"):
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist} (not installed)")
    return f"{platform.platform()}, {torch.get_num_threads()} torch threads; " + ", ".join(versions)


def fmt_ms(seconds: float) -> str:
    """Milliseconds with sensible precision."""
    ms = seconds * 1e3
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"


def ratio(rows: list[Timing], num: str, den: str) -> str:
    """``num / den`` of two rows' wall-clock medians, and of their CPU-time medians, or ``n/a``."""
    by_label = {r.label: r for r in rows}
    a, b = by_label[num].stats, by_label[den].stats
    if a is None or b is None:
        return "n/a"
    return f"{a.median / b.median:.2f}x wall, {a.cpu_median / b.cpu_median:.2f}x cpu"


def print_table(case_name: str, rows: list[Timing]) -> None:
    """Print one model's rows and the headline ratios as a Markdown table."""
    print(f"\n### {case_name}\n")
    print("| variant | median ms | min ms | cpu ms | n | note |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        st = r.stats
        cells = [fmt_ms(st.median), fmt_ms(st.best), fmt_ms(st.cpu_median)] if st else ["-"] * 3
        print(f"| {r.label} | {' | '.join(cells)} | {r.repeats or '-'} | {r.note} |")
    print()
    print(f"- trace / make_dot: {ratio(rows, '(a) gv.trace', '(c) torchviz make_dot')}")
    print(f"- trace+capture / make_dot: {ratio(rows, '(b) gv.trace + capture', '(c) torchviz make_dot')}")
    print(f"- capture_forward / plain_forward: {ratio(rows, '(e) forward in gv.capture', '(e) plain forward+loss')}")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run every case, print the report."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny models, a few repeats (smoke test)")
    ap.add_argument("--repeats", type=int, default=None, help="repeats of each trace (default 21)")
    ap.add_argument("--fwd-repeats", type=int, default=None, help="repeats of each forward (default 9)")
    ap.add_argument("--seq", type=int, default=64, help="GPT-2 sequence length (default 64)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 21)
    fwd_repeats = args.fwd_repeats or (3 if args.quick else 9)
    if args.threads:
        torch.set_num_threads(args.threads)

    gv, gv_reason = load_gradviz()
    print("## bench_trace")
    print(f"\n{machine_line(gv)}")
    print(f"\n{load_note()} at start")
    if gv is None:
        print(f"\nNOTE: gradviz_nb rows skipped: {gv_reason}")

    makers: list[Callable[[], Case]] = [
        lambda: gpt2_case(args.quick, args.seq),
        lambda: resnet_case(args.quick, batch=8, size=32),
    ]
    for make in makers:
        case = make()
        t0 = time.perf_counter()
        rows = bench_case(case, gv, gv_reason, repeats, fwd_repeats)
        print_table(case.name, rows)
        print(f"- (case took {time.perf_counter() - t0:.1f} s)")
        del case
        gc.collect()
    print(f"\n{load_note()} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The overhead table: every feature's cost as a ratio to the plain operation it wraps, beside peers.

Run ``python -m gradviz_nb.bench`` (``--quick``: tiny model, 2 repeats, only proves it runs;
``--readme README.md --readme docs/guides/costs.md``: also rewrite the Costs table of each file, from at least
``MIN_RUNS`` (3) full runs: each ratio is the median of the runs' ratios, with their range beside it, so no
one run sets the published table; ``--runs N`` for more). Everything
is timed in ONE process at one torch thread, interleaved (each repeat runs every variant of a row once, in
rotating order, garbage collector off); a ratio is the median of the per-round ratios, a time the minimum.
Times are process CPU time: at one torch thread that is the wall time of an idle machine, and on a shared
one it leaves out the time other processes held the cores (wall-clock runs of a 10 ms trace were seen
stalled 40-70 ms by the scheduler at random points).

Rows (``feature / plain``):

- ``gv.trace`` / torchviz ``make_dot`` (graph built, not rendered) on a loss whose graph exists;
- forward inside ``gv.capture(model)`` / the plain forward;
- ``gv.record_backward`` / ``loss.backward(retain_graph=True)``, beside its two parts no recording can skip:
  ``gv.trace`` and the statistics (norm, sum, min and max) of every gradient one backward makes;
- ``gv.find_nonfinite`` (forward + backward) / plain forward + backward, and ``detect_anomaly()`` beside it,
  and a ``TorchDispatchMode`` that does nothing (what watching every op costs before checking anything);
- ten training steps with ``GradientMonitor(every=10)`` / ten plain steps (forward, backward, SGD, zero_grad);
- peers that build a graph by running the model (torchview ``draw_graph``, torchlens ``log_forward_pass``)
  / the plain forward, next to ``gv.capture`` + ``gv.trace`` / the plain forward;
- under the table, capture's fixed costs per module call and per op, and the graph of a model that does not
  fit in memory (a 7B-class Llama on the meta device, :mod:`gradviz_nb.bench.meta_llama`: seconds and peak
  memory against their goals, measured in a fresh process).

The rows live in :mod:`gradviz_nb.bench.rows` (one function per feature), the timing in
:mod:`gradviz_nb.bench.timing`.

A peer that is not installed is reported as skipped. Timings are never asserted anywhere.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import math
import os
import pathlib
import platform
import statistics
from collections.abc import Sequence

import torch

from gradviz_nb.bench import meta_llama
from gradviz_nb.bench.rows import Model, fixed_costs, measure, models
from gradviz_nb.bench.timing import Row, combine, interleaved
from gradviz_nb.files import write_atomic

COMMAND = "python -m gradviz_nb.bench --readme README.md --readme docs/guides/costs.md"
START, END = f"<!-- costs:start ({COMMAND}) -->", "<!-- costs:end -->"
MIN_RUNS = 3  # full runs behind a table written into a file (--readme)


def machine() -> str:
    """Where and on what the table was measured: time, CPU, cores, torch threads, OS, and the versions of python,
    torch and the peers."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    versions = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    for dist in ("torchviz", "torchview", "torchlens"):
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist} not installed")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{when}; {cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread; "
            f"{platform.system()} {platform.release()}; " + ", ".join(versions))


def _ms(s: float) -> str:
    ms = s * 1e3
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"


def _ratio(r: Row) -> str:
    """``0.95x``, or over several runs ``0.95x (0.88-1.02)``: the median run's ratio and the range."""
    spread = f" ({r.low:.2f}-{r.high:.2f})" if r.runs > 1 and not math.isnan(r.low) else ""
    return f"{r.ratio:.2f}x{spread}"


def table(rows: Sequence[Row], reps: int, runs: int = 1) -> str:
    """The Markdown table of ``rows`` (one run's, or :func:`~gradviz_nb.bench.timing.combine`'s of ``runs``)."""
    over = (f"{runs} full runs, each of {reps} interleaved rounds" if runs > 1 else f"{reps} interleaved rounds")
    ratio = ("the median of the runs' ratios, their lowest and highest in brackets; each run's ratio is the "
             "median over rounds of feature / plain timed in the same round" if runs > 1 else
             "the median over rounds of feature / plain timed in the same round")
    ms = "the median of the runs' minima" if runs > 1 else "the minima"
    lines = [f"Measured {machine()}; process CPU time of {over} (monitor rows: 3 rounds, each 10 steps). "
             f"Ratio: {ratio} (this machine's speed drifts over seconds and between runs; a ratio of minima swung "
             f"by 20% between runs); ms: {ms}.", "",
             "| model | feature | / plain | ratio | goal | feature ms | plain ms |",
             "|---|---|---|---:|---|---:|---:|"]
    for r in rows:
        if r.skipped:
            lines.append(f"| {r.model} | {r.feature} | {r.plain} | skipped: {r.skipped} | {r.goal} | | |")
        else:
            lines.append(f"| {r.model} | {r.feature} | {r.plain} | {_ratio(r)} | {r.goal} | {_ms(r.t_feature)} | "
                         f"{_ms(r.t_plain)} |")
    return "\n".join(lines)


README_CAP_BYTES = 10 * 1024**2
"""The largest file ``--readme`` reads (10 MiB; the README is about 30 kB)."""


def _parts(path: str) -> tuple[str, str]:
    """The file's text before and after its table markers; exits with one sentence when it cannot be read
    (missing, a directory, not UTF-8, too large) or has no markers."""
    file = pathlib.Path(path)
    if not file.is_file():
        state = "is a directory" if file.is_dir() else "does not exist"
        raise SystemExit(f"{path}: {state}; --readme takes a Markdown file with the costs markers")
    if file.stat().st_size > README_CAP_BYTES:
        raise SystemExit(f"{path}: larger than {README_CAP_BYTES:,} bytes; --readme takes a Markdown file")
    try:
        readme = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise SystemExit(f"{path}: not UTF-8 text (byte {err.start}); --readme takes a Markdown file") from None
    except OSError as err:
        raise SystemExit(f"{path}: cannot be read ({err.strerror}); --readme takes a Markdown file") from None
    head, sep, rest = readme.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{path}: no '{START}' ... '{END}' markers to put the table between")
    return head, tail


def write_readme(path: str, text: str) -> None:
    """Replace the table between the markers of a Costs section (README.md, docs/guides/costs.md)."""
    head, tail = _parts(path)
    write_atomic(pathlib.Path(path), f"{head}{START}\n{text}\n{END}{tail}".encode(), "python -m gradviz_nb.bench")


def one_run(reps: int, quick: bool, only: str = "") -> tuple[list[Row], tuple[float, float]]:
    """One full run: every row of every model (whose name contains ``only``), and capture's fixed costs
    (seconds per module call, per op)."""
    rows: list[Row] = []
    per_call, per_op = fixed_costs(reps, n=200 if quick else 2000)
    for m in models(quick):
        if only in m.name:
            rows += measure(m, reps, monitor_reps=1 if quick else 3, fixed=(per_call, per_op))
    return rows, (per_call, per_op)


def main(argv: Sequence[str] | None = None) -> str:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gradviz_nb.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 repeats: proves it runs")
    ap.add_argument("--reps", type=int, default=0, help="repeats per row (default 9; --quick 2)")
    ap.add_argument("--only", default="", help="measure only models whose name contains this")
    ap.add_argument("--readme", action="append", default=[],
                    help="also write the table between this file's costs markers (repeat for several files); "
                         f"the table is then the median of at least {MIN_RUNS} full runs")
    ap.add_argument("--runs", type=int, default=0,
                    help=f"full runs, each ratio the median of theirs (default 1; with --readme {MIN_RUNS}, at least)")
    args = ap.parse_args(argv)
    if args.reps < 0:
        ap.error(f"--reps must be 1 or more (0: the default, 9; --quick 2); got {args.reps}")
    if args.runs < 0:
        ap.error(f"--runs must be 1 or more (0: the default); got {args.runs}")
    if not any(args.only in m.name for m in models(args.quick)):
        names = ", ".join(m.name for m in models(args.quick))
        ap.error(f"--only {args.only!r} names no model (the models: {names}); nothing measured, no file written")
    for path in args.readme:
        _parts(path)  # before minutes of measuring: every file has its markers
    runs = args.runs or (MIN_RUNS if args.readme else 1)
    if args.readme and runs < MIN_RUNS:
        raise SystemExit(f"--readme writes the median of at least {MIN_RUNS} full runs: give --runs {MIN_RUNS} or "
                         "more (or leave --runs out).")
    torch.set_num_threads(1)
    reps = args.reps or (2 if args.quick else 9)
    tables, fixed = [], []
    for _ in range(runs):
        rows, costs = one_run(reps, args.quick, args.only)
        tables.append(rows)
        fixed.append(costs)
    per_call = statistics.median(c[0] for c in fixed)
    per_op = statistics.median(c[1] for c in fixed)
    text = table(combine(tables) if runs > 1 else tables[0], reps, runs) + (
        f"\n\nFixed costs of gv.capture: capture per module call {per_call * 1e6:.1f} us (two global hooks, "
        f"nn.Identity calls), capture per op {per_op * 1e6:.1f} us (the ghost and value observer, a "
        "128-element op that makes an autograd node)" + (f"; medians of {runs} runs." if runs > 1 else "."))
    text += "\n\n" + meta_llama.row(repeats=1 if args.quick else 3, quick=args.quick)
    print(text)
    for path in args.readme:
        write_readme(path, text)
    return text


__all__ = ["MIN_RUNS", "Model", "Row", "combine", "interleaved", "main", "measure", "models", "one_run", "table"]

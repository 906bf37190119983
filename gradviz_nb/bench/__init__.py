"""The overhead table: every feature's cost as a ratio to the plain operation it wraps, beside peers.

Run ``python -m gradviz_nb.bench`` (``--quick``: tiny model, 2 repeats, only proves it runs;
``--readme docs/guides/costs.md``: also rewrite the docs' Costs table). Everything is timed in ONE process at
one torch thread, interleaved (each repeat runs every variant of a row once, in rotating order, garbage
collector off), and the minimum of N is kept. Times are process CPU time: at one torch thread that is the
wall time of an idle machine, and on a shared one it leaves out the time other processes held the cores
(wall-clock runs of a 10 ms trace were seen stalled 40-70 ms by the scheduler at random points).

Rows (``feature / plain``):

- ``gv.trace`` / torchviz ``make_dot`` (graph built, not rendered) on a loss whose graph exists;
- forward inside ``gv.capture(model)`` / the plain forward;
- ``gv.record_backward`` / ``loss.backward(retain_graph=True)``;
- ``gv.find_nonfinite`` (forward + backward) / plain forward + backward, and ``detect_anomaly()`` beside it;
- ten training steps with ``GradientMonitor(every=10)`` / ten plain steps (forward, backward, SGD, zero_grad);
- peers that build a graph by running the model (torchview ``draw_graph``, torchlens ``log_forward_pass``)
  / the plain forward, next to ``gv.capture`` + ``gv.trace`` / the plain forward.

A peer that is not installed is reported as skipped. Timings are never asserted anywhere.
"""

from __future__ import annotations

import datetime
import gc
import importlib.metadata
import importlib.util
import math
import os
import platform
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz_nb.demo_models import GPT2, GPT2Config
from gradviz_nb.probes.backward import record_backward
from gradviz_nb.probes.monitor import GradientMonitor
from gradviz_nb.probes.nonfinite import find_nonfinite
from gradviz_nb.tracing import capture, trace

START, END = "<!-- costs:start (python -m gradviz_nb.bench --readme docs/guides/costs.md) -->", "<!-- costs:end -->"


@dataclass
class Model:
    """One model to measure on: how to build it and its batch."""

    name: str
    config: GPT2Config
    seq: int
    batch: int = 1


def models(quick: bool) -> list[Model]:
    if quick:
        return [Model("GPT-2 tiny (2 blocks, width 32)", GPT2Config.small_test(), seq=16)]
    return [
        Model("12-block GPT (width 128)", GPT2Config(n_layer=12, n_head=4, d_model=128, vocab=512, block_size=64),
              seq=64),
        Model("GPT-2 124M (batch 1, 64 tokens)", GPT2Config(), seq=64),
    ]


@dataclass
class Row:
    """One line of the table: ``feature`` against ``plain`` (minimum seconds), or why it was skipped."""

    model: str
    feature: str
    plain: str
    t_feature: float = math.nan
    t_plain: float = math.nan
    goal: str = ""
    skipped: str = ""
    peers: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.t_feature / self.t_plain


def _once(fn: Callable[[], object], before: Callable[[], object] | None) -> float:
    if before is not None:
        before()
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        fn()
        return time.process_time() - t0
    finally:
        gc.enable()


def interleaved(variants: dict[str, Callable[[], object]], reps: int,
                before: Callable[[], object] | None = None) -> dict[str, float]:
    """Minimum process CPU time of each variant over ``reps`` rounds; each round runs every variant once, the
    order rotating from round to round. One warm-up round first (not timed). ``before`` runs untimed
    before every call (e.g. clearing ``.grad``)."""
    keys = list(variants)
    for k in keys:
        _once(variants[k], before)
    best = dict.fromkeys(keys, math.inf)
    for r in range(reps):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            best[k] = min(best[k], _once(variants[k], before))
    return best


def available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _tokens(cfg: GPT2Config, m: Model) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab, (m.batch, m.seq), generator=gen)
    y = torch.randint(0, cfg.vocab, (m.batch, m.seq), generator=gen)
    return x, y


def _loss(model: GPT2, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return nn.functional.cross_entropy(logits.flatten(0, -2), y.flatten())


class _OpCounter(TorchFunctionMode):
    """Counts the torch calls a forward makes (what capture's observer sees)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


def measure(m: Model, reps: int, monitor_reps: int, fixed: tuple[float, float] | None = None) -> list[Row]:
    """Every row for one model; ``fixed`` (capture's cost per module call and per op, :func:`fixed_costs`)
    adds the capture overhead those predict for this model's forward (its calls and ops counted)."""
    torch.manual_seed(0)
    model = GPT2(m.config)
    x, y = _tokens(m.config, m)
    rows: list[Row] = []
    zero = lambda: model.zero_grad(set_to_none=True)  # noqa: E731

    # Trace against make_dot, on the same retained graph.
    traced = _loss(model, x, y)
    if available("torchviz"):
        from torchviz import make_dot

        params = dict(model.named_parameters())
        t = interleaved({"trace": lambda: trace(traced, model=model),
                         "make_dot": lambda: make_dot(traced, params=params)}, reps)
        rows.append(Row(m.name, "gv.trace", "torchviz make_dot", t["trace"], t["make_dot"], "<= 1.0"))
    else:
        rows.append(Row(m.name, "gv.trace", "torchviz make_dot", skipped="torchviz not installed"))

    # Forward inside capture; graph peers that run the model themselves.
    def captured_forward() -> None:
        with capture(model):
            _loss(model, x, y)

    def capture_and_trace() -> None:
        with capture(model) as cap:
            out = _loss(model, x, y)
        trace(out, model=model, capture=cap)

    variants: dict[str, Callable[[], object]] = {"plain": lambda: _loss(model, x, y), "capture": captured_forward,
                                                 "capture+trace": capture_and_trace}
    if available("torchview"):
        from torchview import draw_graph

        variants["torchview"] = lambda: draw_graph(model, input_data=x, depth=3)
    if available("torchlens"):
        import torchlens

        variants["torchlens"] = lambda: torchlens.log_forward_pass(model, x, layers_to_save=None)
    t = interleaved(variants, reps)
    rows.append(Row(m.name, "forward in gv.capture", "plain forward", t["capture"], t["plain"], "<= 1.05"))
    if fixed is not None:
        with capture(model) as cap:
            _loss(model, x, y)
        with _OpCounter() as counter:
            _loss(model, x, y)
        calls = len(cap.calls)
        extra = calls * fixed[0] + counter.n * fixed[1]
        rows.append(Row(m.name, f"forward in gv.capture, predicted ({calls} calls, {counter.n} ops x fixed costs)",
                        "plain forward", t["plain"] + extra, t["plain"], "<= 1.05"))
    rows.append(Row(m.name, "gv.capture + gv.trace", "plain forward", t["capture+trace"], t["plain"]))
    for peer, label in (("torchview", "torchview draw_graph (peer)"),
                        ("torchlens", "torchlens log_forward_pass (peer)")):
        if peer in t:
            rows.append(Row(m.name, label, "plain forward", t[peer], t["plain"]))
        else:
            rows.append(Row(m.name, label, "plain forward", skipped=f"{peer} not installed"))

    # record_backward against backward on the same graph.
    loss = _loss(model, x, y)
    t = interleaved({"backward": lambda: loss.backward(retain_graph=True),  # type: ignore[no-untyped-call]
                     "record": lambda: record_backward(loss, model=model)}, reps, before=zero)
    rows.append(Row(m.name, "gv.record_backward", "loss.backward()", t["record"], t["backward"], "<= 1.5"))

    # find_nonfinite and detect_anomaly against a plain forward + backward.
    def step() -> None:
        _loss(model, x, y).backward()  # type: ignore[no-untyped-call]

    def anomaly() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled ..."
            with torch.autograd.detect_anomaly():
                step()

    t = interleaved({"plain": step, "find": lambda: find_nonfinite(step, model=model), "anomaly": anomaly},
                    reps, before=zero)
    rows.append(Row(m.name, "gv.find_nonfinite", "forward + backward", t["find"], t["plain"], "<= 1.5"))
    rows.append(Row(m.name, "detect_anomaly() (peer)", "forward + backward", t["anomaly"], t["plain"]))

    # GradientMonitor(every=10): ten training steps, one of them recorded.
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    monitor = GradientMonitor(model, every=10)

    def steps(mon: GradientMonitor | None) -> None:
        for _ in range(10):
            _loss(model, x, y).backward()  # type: ignore[no-untyped-call]
            if mon is not None:
                mon.step()
            opt.step()
            opt.zero_grad(set_to_none=True)

    try:
        t = interleaved({"plain": lambda: steps(None), "monitor": lambda: steps(monitor)}, monitor_reps)
    finally:
        monitor.close()
    rows.append(Row(m.name, "10 steps with GradientMonitor(every=10)", "10 plain steps", t["monitor"], t["plain"],
                    "<= 1.05"))
    return rows


def fixed_costs(reps: int, n: int = 2000) -> tuple[float, float]:
    """What capture adds per module call and per torch op, in seconds: ``n`` calls of an ``nn.Identity``
    (no op inside: the hooks alone) and ``n`` ops on a 128-element tensor that requires grad (each makes an
    autograd node; over 64 elements, so no value is recorded), inside ``gv.capture`` against the same
    loops outside it."""
    model = nn.Sequential(*[nn.Identity() for _ in range(n)])
    x = torch.randn(128, requires_grad=True)

    def ops() -> None:
        y = x
        for _ in range(n):
            y = y * 1.0

    def captured(fn: Callable[[], object], m: nn.Module | None) -> Callable[[], None]:
        def run() -> None:
            with capture(m):
                fn()
        return run

    t = interleaved({"calls": lambda: model(x), "calls+capture": captured(lambda: model(x), model),
                     "ops": ops, "ops+capture": captured(ops, None)}, reps)
    return (t["calls+capture"] - t["calls"]) / n, (t["ops+capture"] - t["ops"]) / n


def machine() -> str:
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


def table(rows: Sequence[Row], reps: int) -> str:
    lines = [f"Measured {machine()}; process CPU time, minimum of {reps} interleaved runs "
             "(monitor rows: 2, each run is 10 steps).", "",
             "| model | feature | / plain | ratio | goal | feature ms | plain ms |",
             "|---|---|---|---:|---|---:|---:|"]
    for r in rows:
        if r.skipped:
            lines.append(f"| {r.model} | {r.feature} | {r.plain} | skipped: {r.skipped} | {r.goal} | | |")
        else:
            lines.append(f"| {r.model} | {r.feature} | {r.plain} | {r.ratio:.2f}x | {r.goal} | {_ms(r.t_feature)} | "
                         f"{_ms(r.t_plain)} |")
    return "\n".join(lines)


def write_readme(path: str, text: str) -> None:
    """Replace the table between the markers of the Costs section (docs/guides/costs.md)."""
    with open(path, encoding="utf-8") as f:
        readme = f.read()
    head, sep, rest = readme.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{path}: no '{START}' ... '{END}' markers to put the table between")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{head}{START}\n{text}\n{END}{tail}")


def main(argv: Sequence[str] | None = None) -> str:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gradviz_nb.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 repeats: proves it runs")
    ap.add_argument("--reps", type=int, default=0, help="repeats per row (default 9; --quick 2)")
    ap.add_argument("--only", default="", help="measure only models whose name contains this")
    ap.add_argument("--readme", default="", help="also write the table into this file's costs markers")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    reps = args.reps or (2 if args.quick else 9)
    rows: list[Row] = []
    per_call, per_op = fixed_costs(reps, n=200 if args.quick else 2000)
    for m in models(args.quick):
        if args.only in m.name:
            rows += measure(m, reps, monitor_reps=1 if args.quick else 2, fixed=(per_call, per_op))
    text = table(rows, reps) + (
        f"\n\nFixed costs of gv.capture: capture per module call {per_call * 1e6:.1f} us (two global hooks, "
        f"nn.Identity calls), capture per op {per_op * 1e6:.1f} us (the ghost and value observer, a "
        "128-element op that makes an autograd node).")
    print(text)
    if args.readme:
        write_readme(args.readme, text)
    return text


__all__ = ["Model", "Row", "interleaved", "main", "measure", "models", "table"]

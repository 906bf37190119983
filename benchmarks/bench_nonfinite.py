"""Cost of gv.find_nonfinite against plain forward+backward and torch.autograd.detect_anomaly().

    python benchmarks/bench_nonfinite.py [--repeats 7] [--threads 1] [--layers 12] [--seq 64] [--quick]

On GPT-2 124M (gradviz_nb.demo_models.GPT2, 12 layers by default; --layers to shorten it) and
ResNet18Like, one healthy training step's forward + backward is timed three ways, interleaved in one
process (same caches, same machine load): plain, inside ``torch.autograd.detect_anomaly()``, and as
``gv.find_nonfinite(step, model=model)``. Each repeat runs the three once in rotating order; ``.grad``
is cleared (set to None) before every run. The table gives the median and the minimum wall time
(other processes only ever add time, so the minimum is the least disturbed run), the median process
CPU time, and each median's ratio to plain. Target: find_nonfinite at most 1.5x plain and faster
than anomaly mode. The script also checks that find_nonfinite finds nothing on these healthy models.

First it times the candidate per-op checks on float32 tensors (minimum of 20 runs, result read into
Python as the mode must): ``bool(torch.isfinite(t).all())``, ``math.isfinite(t.sum().item())`` (used;
it can overflow to inf on huge finite values), ``(t * 0).sum()`` (the confirmation: NaN exactly when an
element is NaN/Inf, never overflows), ``t.sum(dtype=torch.float64)`` and ``isnan(t).any() or isinf(t).any()``.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trace import fmt_ms, machine_line

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, ResNet18Like


def _plain(step: Callable[[], None], model: nn.Module) -> None:
    step()


def _anomaly(step: Callable[[], None], model: nn.Module) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled ..."
        with torch.autograd.detect_anomaly():
            step()


def _find(step: Callable[[], None], model: nn.Module) -> None:
    found = gv.find_nonfinite(step, model=model)
    if found is not None:
        raise SystemExit(f"false alarm on a healthy model: {found.summary()}")


VARIANTS: dict[str, Callable[[Callable[[], None], nn.Module], None]] = {
    "plain forward+backward": _plain, "detect_anomaly()": _anomaly, "gv.find_nonfinite": _find}


CHECKS: dict[str, Callable[[torch.Tensor], bool]] = {
    "isfinite(t).all()": lambda t: bool(torch.isfinite(t).all()),
    "t.sum() (used)": lambda t: math.isfinite(t.sum().item()),
    "(t * 0).sum() (confirmation)": lambda t: math.isfinite((t * 0).sum().item()),
    "t.sum(dtype=float64)": lambda t: math.isfinite(t.sum(dtype=torch.float64).item()),
    "isnan.any or isinf.any": lambda t: bool(torch.isnan(t).any()) or bool(torch.isinf(t).any()),
}


def bench_checks(sizes: list[int]) -> None:
    print("\n### Per-op finiteness checks (float32, ms, minimum of 20)\n")
    print("| check | " + " | ".join(f"{n:,} elements" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    tensors = [torch.randn(n, generator=torch.Generator().manual_seed(0)) for n in sizes]
    for name, check in CHECKS.items():
        cells = []
        for t in tensors:
            check(t)
            best = math.inf
            for _ in range(20):
                t0 = time.perf_counter()
                check(t)
                best = min(best, time.perf_counter() - t0)
            cells.append(f"{best * 1e3:.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    huge = torch.full((1_000_000,), 1e35)
    print(f"\n1e6 finite values of 1e35: t.sum() = {huge.sum().item()}, (t * 0).sum() = {(huge * 0).sum().item()}")


def bench(name: str, model: nn.Module, step: Callable[[], None], repeats: int) -> None:
    for run in VARIANTS.values():  # warm-up, and a check that each variant runs
        model.zero_grad(set_to_none=True)
        run(step, model)
    wall: dict[str, list[float]] = {k: [] for k in VARIANTS}
    cpu: dict[str, list[float]] = {k: [] for k in VARIANTS}
    keys = list(VARIANTS)
    for r in range(repeats):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            model.zero_grad(set_to_none=True)
            gc.collect()
            gc.disable()
            t0, c0 = time.perf_counter(), time.process_time()
            VARIANTS[k](step, model)
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
            gc.enable()
    base = statistics.median(wall["plain forward+backward"])
    base_cpu = statistics.median(cpu["plain forward+backward"])
    print(f"\n### {name}\n")
    print("| variant | median ms | min ms | cpu ms | n | median / plain | cpu / plain |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k in keys:
        med, c = statistics.median(wall[k]), statistics.median(cpu[k])
        print(f"| {k} | {fmt_ms(med)} | {fmt_ms(min(wall[k]))} | {fmt_ms(c)} | {len(wall[k])} | "
              f"{med / base:.2f}x | {c / base_cpu:.2f}x |")
    ours, anomaly = statistics.median(wall["gv.find_nonfinite"]), statistics.median(wall["detect_anomaly()"])
    verdict = "met" if ours / base <= 1.5 else "MISSED"
    print(f"\n- find_nonfinite / plain: {ours / base:.2f}x (target <= 1.5x: {verdict})")
    print(f"- find_nonfinite / detect_anomaly: {ours / anomaly:.2f}x "
          f"({'faster' if ours < anomaly else 'NOT faster'} than anomaly mode)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--layers", type=int, default=12, help="GPT-2 blocks (12 = the 124M model)")
    ap.add_argument("--seq", type=int, default=64, help="GPT-2 tokens per sequence (batch 1)")
    ap.add_argument("--batch", type=int, default=8, help="ResNet images per batch (3x32x32)")
    ap.add_argument("--quick", action="store_true", help="tiny models, 2 repeats: checks the script runs")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{machine_line(gv)}\nload average at start: {load}")
    bench_checks([1_000, 1_000_000] if args.quick else [1_000, 100_000, 1_000_000, 10_000_000])

    torch.manual_seed(0)
    cfg = GPT2Config.small_test() if args.quick else GPT2Config(n_layer=args.layers)
    gpt = GPT2(cfg)
    gen = torch.Generator().manual_seed(0)
    seq = min(args.seq, cfg.block_size)
    idx = torch.randint(0, cfg.vocab, (1, seq), generator=gen)
    targets = torch.randint(0, cfg.vocab, (1, seq), generator=gen)

    def gpt_step() -> None:
        gpt(idx, targets)[1].backward()

    repeats = 2 if args.quick else args.repeats
    millions = sum(p.numel() for p in gpt.parameters()) / 1e6
    bench(f"GPT-2 {cfg.n_layer} layers, d_model {cfg.d_model}, {millions:.0f}M parameters (1x{seq} tokens)",
          gpt, gpt_step, repeats)

    torch.manual_seed(0)
    cnn = ResNet18Like()
    batch = 2 if args.quick else args.batch
    x, y = torch.randn(batch, 3, 32, 32, generator=gen), torch.randint(0, 10, (batch,), generator=gen)

    def cnn_step() -> None:
        nn.functional.cross_entropy(cnn(x), y).backward()

    bench(f"ResNet18Like {sum(p.numel() for p in cnn.parameters()) / 1e6:.0f}M ({batch}x3x32x32)", cnn, cnn_step,
          repeats)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nload average at end: {load}")


if __name__ == "__main__":
    main()

"""Overhead of gv.GradientMonitor on a 6-layer GPT-2 training step on CPU (target: under 3%).

    python benchmarks/bench_monitor.py [--steps 30] [--repeats 5] [--threads 1]

Plain and monitored loops run interleaved in the same process (same warm caches, same thermal state),
each repeat timing `steps` full training steps (forward, backward, monitor.step(), AdamW step,
zero_grad), with the monitor with and without optimizer= (which adds the update/weight ratio on recorded
steps). Reports the median and minimum step time per variant and its ratio to the plain loop.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config


def run(model: GPT2, steps: int, make: Callable[[torch.optim.Optimizer], gv.GradientMonitor | None],
        batch: tuple[torch.Tensor, torch.Tensor]) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    monitor = make(opt)
    idx, targets = batch
    t0 = time.perf_counter()
    for _ in range(steps):
        _, loss = model(idx, targets)
        loss.backward()
        if monitor is not None:
            monitor.step()
        opt.step()
        opt.zero_grad()
    elapsed = (time.perf_counter() - t0) / steps
    if monitor is not None:
        monitor.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=6, n_head=4, d_model=128, vocab=1000, block_size=64)
    model = GPT2(cfg)
    gen = torch.Generator().manual_seed(0)
    batch = (torch.randint(0, cfg.vocab, (8, 64), generator=gen), torch.randint(0, cfg.vocab, (8, 64), generator=gen))
    n_params = sum(1 for _ in model.parameters())
    print(f"GPT-2 n_layer=6 d_model=128 ({model.num_parameters() / 1e6:.1f}M params, {n_params} tensors), "
          f"batch 8 x 64, torch {torch.__version__}, {torch.get_num_threads()} threads")
    run(model, 3, lambda opt: None, batch)  # warm-up
    variants: dict[str, Callable[[torch.optim.Optimizer], gv.GradientMonitor | None]] = {
        "plain": lambda opt: None,
        "monitor every=1": lambda opt: gv.GradientMonitor(model, every=1),
        "monitor every=10": lambda opt: gv.GradientMonitor(model, every=10),
        # with the optimizer: the update/weight ratio snapshots the weights on recorded steps
        "+optimizer every=1": lambda opt: gv.GradientMonitor(model, every=1, optimizer=opt),
        "+optimizer every=10": lambda opt: gv.GradientMonitor(model, every=10, optimizer=opt),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeats):
        for name, make in variants.items():
            times[name].append(run(model, args.steps, make, batch))
    # Other processes on a shared machine only ever add time: the minimum is the least disturbed run.
    base, base_min = statistics.median(times["plain"]), min(times["plain"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:20s} median {med * 1e3:8.2f} ms/step (ratio {med / base:.4f})   "
              f"min {min(ts) * 1e3:8.2f} ms/step (ratio {min(ts) / base_min:.4f})")
    # the cost of monitor.step() alone, on real gradients
    mon = gv.GradientMonitor(model, every=1)
    _, loss = model(*batch)
    loss.backward()
    t0 = time.perf_counter()
    for _ in range(200):
        mon.step()
    per = (time.perf_counter() - t0) / 200
    mon.close()
    model.zero_grad()
    print(f"monitor.step() alone (recording): {per * 1e3:.3f} ms = {per / base:.2%} of a plain step")


if __name__ == "__main__":
    main()

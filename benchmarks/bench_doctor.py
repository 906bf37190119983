"""What ``gv.doctor`` costs against the training steps it observes, on Hugging Face GPT-2 124M.

Run from the repository root (by hand; never asserted in tests)::

    python benchmarks/bench_doctor.py                 # 5 rounds, the median ratio
    python benchmarks/bench_doctor.py --runs 9 --steps 2
    python benchmarks/bench_doctor.py --profile       # one doctor call under cProfile: the top functions

The model is ``transformers.GPT2LMHeadModel(GPT2Config())`` with random weights (nothing is downloaded), in
train mode (its dropout on), batch 1, 64 tokens, ``torch.set_num_threads(1)``, AdamW. One step is what a
loop does: ``zero_grad``, forward with ``labels``, ``loss.backward()``, ``opt.step()``.

Each round times, in process CPU seconds (``time.process_time``, which another process on the cores
disturbs less than wall time), ``--steps`` plain steps, then ``gv.doctor(step, model, opt, steps=--steps)``
on the same step function; the ratio of the round is doctor / plain. The printed ratio is the median over
rounds, with the lowest and highest beside it. One warm-up step runs first, so the optimizer's state exists
in both (the doctor puts everything back, so every round starts from an equal state). The load average is
printed at start and end: measure with ``nice -n 0`` on a quiet machine.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import gradviz_nb as gv


def build(tokens: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable[[], torch.Tensor]]:
    """GPT-2 124M with random weights, an AdamW optimizer and one training step over ``tokens`` tokens."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, model.config.vocab_size, (1, tokens))

    def step() -> torch.Tensor:
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    return model, opt, step


def cpu(fn: Callable[[], object]) -> float:
    """Process CPU seconds of one call, the collector run before and off during it."""
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        fn()
        return time.process_time() - start
    finally:
        gc.enable()


def rounds(runs: int, steps: int, tokens: int) -> list[tuple[float, float]]:
    """(plain seconds, doctor seconds) per round."""
    model, opt, step = build(tokens)
    step()  # warm-up: the optimizer's state exists from here on

    def plain() -> None:
        for _ in range(steps):
            step()

    out = []
    for i in range(runs):
        t_plain = cpu(plain)
        t_doctor = cpu(lambda: gv.doctor(step, model, opt, steps=steps))
        out.append((t_plain, t_doctor))
        print(f"round {i + 1}: plain {t_plain:6.2f} s, doctor {t_doctor:6.2f} s, x{t_doctor / t_plain:.2f}", flush=True)
    return out


def profile(steps: int, tokens: int, top: int) -> None:
    """One doctor call under cProfile (timed in process CPU): the top functions by cumulative and by own time."""
    model, opt, step = build(tokens)
    step()
    prof = cProfile.Profile(time.process_time)  # process CPU: wall time charges other processes' load to us
    prof.enable()
    dx = gv.doctor(step, model, opt, steps=steps)
    prof.disable()
    print(f"findings: {[(f.kind, f.target) for f in dx.findings]}")
    stats = pstats.Stats(prof).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds; the ratio is their median (default 5)")
    parser.add_argument("--steps", type=int, default=2, help="steps the doctor observes (its default, 2)")
    parser.add_argument("--tokens", type=int, default=64, help="sequence length, batch 1 (default 64)")
    parser.add_argument("--profile", action="store_true", help="profile one doctor call instead of timing")
    parser.add_argument("--top", type=int, default=30, help="functions listed by --profile (default 30)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; torch {torch.__version__}, "
          f"1 thread, GPT-2 124M, batch 1, {args.tokens} tokens, AdamW, {args.steps} steps")
    if args.profile:
        profile(args.steps, args.tokens, args.top)
    else:
        measured = rounds(args.runs, args.steps, args.tokens)
        ratios = [d / p for p, d in measured]
        print(f"doctor / plain steps: x{statistics.median(ratios):.2f} (median of {len(ratios)}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}); plain {min(p for p, _ in measured):.2f} s, "
              f"doctor {min(d for _, d in measured):.2f} s (minima)")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

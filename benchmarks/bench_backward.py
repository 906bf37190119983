"""Overhead of gv.record_backward against a plain backward, in one run on the same machine.

    python benchmarks/bench_backward.py [--seq 64] [--repeats 5] [--threads 1] [--quick]

Times (process CPU time, median of repeats, interleaved) on the GPT-2 124M demo model:
plain ``loss.backward(retain_graph=True)`` vs ``gv.record_backward(loss, model=model)`` on the same graph,
and the naive per-node ``.norm().item()`` hook recorder (measured at 2.7x on these machines), for reference.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss


def naive_record(loss: torch.Tensor) -> None:
    nodes, stack = {loss.grad_fn}, [loss.grad_fn]
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is not None and nxt not in nodes:
                nodes.add(nxt)
                stack.append(nxt)
    norms: list[float] = []

    def hook(grad_inputs: Any, grad_outputs: Any) -> None:
        norms.extend(g.norm().item() for g in grad_inputs if g is not None)

    handles = [fn.register_hook(hook) for fn in nodes]
    loss.backward(retain_graph=True)
    for h in handles:
        h.remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="tiny model: checks the script runs")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test() if args.quick else GPT2Config())
    loss = gpt2_loss(model, seq=min(args.seq, model.config.block_size))

    def plain() -> None:
        loss.backward(retain_graph=True)
        model.zero_grad(set_to_none=True)

    def record() -> None:
        gv.record_backward(loss, model=model)

    def naive() -> None:
        naive_record(loss)
        model.zero_grad(set_to_none=True)

    runs: dict[str, list[float]] = {"plain backward": [], "gv.record_backward": [], "naive .norm().item() hooks": []}
    fns: dict[str, Callable[[], None]] = dict(zip(runs, (plain, record, naive), strict=True))
    for fn in fns.values():
        fn()  # warm up
    for _ in range(args.repeats):
        for name, fn in fns.items():
            t = time.process_time()
            fn()
            runs[name].append(time.process_time() - t)
    base = statistics.median(runs["plain backward"])
    print(f"GPT-2 {'tiny' if args.quick else '124M'}, seq {args.seq}, {args.threads} thread(s), "
          f"{len(gv.trace(loss))} nodes; median CPU time of {args.repeats}")
    print("| what | ms | ratio to plain |\n|---|---:|---:|")
    for name, times in runs.items():
        med = statistics.median(times)
        print(f"| {name} | {med * 1e3:.0f} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()

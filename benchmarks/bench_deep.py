"""Deep-graph benchmark: trace a chain of autograd nodes and free it, with time and peak memory.

Run from the repository root (by hand; never asserted in tests)::

    python benchmarks/bench_deep.py                  # a 1,000,002-node chain
    python benchmarks/bench_deep.py --nodes 100000   # smaller
    python benchmarks/bench_deep.py --capture        # the forward inside gv.capture (ghost observer on)

The chain is ``x = tanh(x * a + b)`` on a 4-element tensor, three autograd nodes per step, so the graph is
as deep as it is big: the case where freeing a graph Python has read recursed once per node and crashed
(see ``gradviz_nb/tracing/walk.py``, "freeing deep graphs"). Rows, each in wall seconds (``perf_counter``)
and process CPU seconds:

- ``forward``: building the chain (inside ``gv.capture(None)`` with ``--capture``);
- ``trace``: ``gv.trace(loss)``;
- ``free``: ``del loss`` plus the ``gc.collect()`` that releases the last anchors;

then the peak resident memory of the process (``ru_maxrss``) and the anchors held before and after freeing.
The process exits normally: a crash while freeing is the failure this measures.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import gradviz_nb as gv
from gradviz_nb.tracing import walk as walk_module


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def timed(label: str, fn: Callable[[], Any]) -> Any:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    print(f"| {label} | {time.perf_counter() - wall:.2f} | {time.process_time() - cpu:.2f} | {peak_rss_mb():.0f} |",
          flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000_000, help="about this many autograd nodes")
    parser.add_argument("--capture", action="store_true", help="run the forward inside gv.capture(None)")
    args = parser.parse_args()
    steps = max(1, args.nodes // 3)
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.1f}; chain of {steps:,} steps ({3 * steps + 2:,} nodes)")
    print("\n| row | wall s | cpu s | peak RSS MB |\n|---|---|---|---|")
    w = torch.randn(4, requires_grad=True)
    holder: dict[str, Any] = {}

    def forward() -> torch.Tensor:
        x = w
        for i in range(steps):
            x = (x * 1.0001 + 0.1).tanh()
            if i == steps // 2:
                holder["mid"] = weakref.ref(x)
        return x.sum()

    if args.capture:
        with gv.capture(None):
            loss = timed("forward (captured)", forward)
    else:
        loss = timed("forward", forward)
    graph = timed("trace", lambda: gv.trace(loss, names={"w": w}))
    anchors = walk_module.anchored()

    def free() -> None:
        nonlocal loss
        del loss
        gc.collect()

    timed("free", free)
    print(f"\n{len(graph):,} nodes traced; anchors {anchors} before freeing, {walk_module.anchored()} after; "
          f"activation freed: {holder['mid']() is None}; peak RSS {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()

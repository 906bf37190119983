"""Lazy payload benchmark: skeleton size and build time, chunk time, against the eager payload.

Run from the repository root::

    python benchmarks/bench_lazy.py              # ~5k and ~50k autograd nodes
    python benchmarks/bench_lazy.py --layers 20  # one size, ~900 nodes

The graphs are ``bench_scale.py``'s: :class:`gradviz_nb.demo_models.GPT2` with d_model 32, 2 heads,
vocab 101, batch 1, seq 8 and a growing ``n_layer``, traced with ``gv.capture``. Per size it prints the
eager payload (``page.graph`` + ``json.dumps``: bytes per node, ms), the ``LazyGraph`` index build, the
skeleton the widget sends first (the calls ``initial_expanded`` opens: bytes per node, ms with dumps),
fold groups, and one chunk (a block, and the top level): median ms and bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.widgets import page
from gradviz_nb.widgets.page.lazy import LazyGraph
from gradviz_nb.widgets.page.payload import fold_groups, initial_expanded


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def bench(n_layer: int, repeats: int) -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=n_layer, n_head=2, d_model=32, vocab=101, block_size=16))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=1, seq=8)
    g = gv.trace(loss, model=model, capture=cap)
    n = len(g)
    eager_bytes = len(json.dumps(page.graph(g)))
    eager_ms = median_ms(lambda: json.dumps(page.graph(g)), repeats)
    index_ms = median_ms(lambda: LazyGraph(g), repeats)
    lazy = LazyGraph(g)
    loaded = ["", *initial_expanded(g)]
    lazy.skeleton(loaded)  # folds computed once, as in the widget
    skeleton_bytes = len(json.dumps(lazy.skeleton(loaded)))
    skeleton_ms = median_ms(lambda: json.dumps(LazyGraph(g).skeleton(loaded)), repeats)
    folds_ms = median_ms(lambda: fold_groups(g), repeats)
    block = f"blocks.{n_layer // 2}"
    chunk_ms = median_ms(lambda: json.dumps(lazy.chunks([block])), 20 * repeats)
    top_ms = median_ms(lambda: json.dumps(lazy.chunks([""])), 20 * repeats)
    chunk_bytes = len(json.dumps(lazy.chunks([block])))
    all_bytes = len(json.dumps(lazy.all_chunks()))
    print(f"n_layer {n_layer}: {n} nodes, {len(lazy.wiring()['edges']) // 4} edge slots, {len(g.calls)} calls")
    print(f"  eager payload        {eager_bytes / n:7.0f} B/node  {eager_bytes / 1e6:6.2f} MB  {eager_ms:8.1f} ms")
    print(f"  LazyGraph index                                  {index_ms:8.1f} ms")
    print(f"  skeleton (+index)    {skeleton_bytes / n:7.0f} B/node  {skeleton_bytes / 1e6:6.2f} MB  "
          f"{skeleton_ms:8.1f} ms  (loaded: {loaded[:4]}{'...' if len(loaded) > 4 else ''})")
    print(f"  fold_groups                                      {folds_ms:8.1f} ms  {len(fold_groups(g))} group(s)")
    print(f"  chunk {block:<14} {chunk_bytes:7d} B                  {chunk_ms:8.2f} ms")
    print(f"  chunk '' (top level)                             {top_ms:8.2f} ms")
    print(f"  all chunks + skeleton: {(all_bytes + skeleton_bytes) / eager_bytes:.2f}x the eager payload")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="*", default=[116, 1162], help="n_layer values")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for n_layer in args.layers:
        bench(n_layer, args.repeats)


if __name__ == "__main__":
    main()

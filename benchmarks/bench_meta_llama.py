"""The graph of a model that does not fit in memory: a 7B-class Llama built on the meta device.

    python benchmarks/bench_meta_llama.py [--layers 32] [--hidden 4096] [--seq 64] [--repeats 3]

What is built and measured: :mod:`gradviz_nb.bench.meta_llama` (also a line under the Costs table of
``python -m gradviz_nb.bench``). Goals: forward in ``gv.capture`` + ``gv.trace`` <= 10 s and peak RSS
<= 2 GB; the lazy first payload (``page.build(graph, lazy=True)``, the Python side) <= 2 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from gradviz_nb.bench.meta_llama import GOALS, main

if __name__ == "__main__":
    r = main(sys.argv[1:])
    print(f"meta Llama: {r['parameters'] / 1e9:.2f}e9 parameters, {r['nodes']:,.0f} graph nodes, "
          f"{r['calls']:,.0f} module calls")
    print(f"  build on meta {r['build s']:.2f} s; forward in gv.capture {r['capture s']:.2f} s; gv.trace "
          f"{r['trace s']:.2f} s; capture + trace {r['capture+trace s']:.2f} s (goal <= {GOALS['capture+trace s']:g})")
    print(f"  lazy first payload (page.build) {r['first payload s']:.2f} s (goal <= {GOALS['first payload s']:g}), "
          f"{r['first payload MB']:.2f} MB JSON")
    print(f"  peak RSS {r['peak MB']:.0f} MB (goal <= {GOALS['peak MB']:g}; "
          f"{r['MB after imports']:.0f} MB after imports)")

"""Many parameters in one module: ``gv.gradient_flow`` and ``gv.doctor`` on a ``ParameterList``.

Run from the repository root (by hand; never asserted in tests)::

    python benchmarks/bench_params.py                          # 5,000 and 50,000 parameters, flow only
    python benchmarks/bench_params.py --sizes 2000 4000 --doctor

One ``nn.ParameterList`` holds ``n`` two-element parameters; the loss is the sum of ``(p * x).sum()``. Both
tools must be linear in ``n``: a membership test on a list of per-parameter records made ``gradient_flow``
quadratic (8,000 parameters: 22.7 s), and a walk over every parameter per ``detach()`` (an optimizer step
detaches each parameter) made the doctor quadratic too. Each row prints process CPU seconds and the ratio
to the first size, beside the ratio of sizes (linear: the two ratios are close).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import nn

import gradviz_nb as gv


class Many(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.ps = nn.ParameterList([nn.Parameter(torch.randn(2)) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([(p * x).sum() for p in self.ps]).sum()


def measure(n: int, doctor: bool) -> dict[str, float]:
    torch.manual_seed(0)
    model, x = Many(n), torch.randn(2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).backward()
    out = {}
    start = time.process_time()
    gv.gradient_flow(model)
    out["gradient_flow"] = time.process_time() - start
    if doctor:
        def step() -> torch.Tensor:
            opt.zero_grad()
            loss = model(x)
            loss.backward()
            opt.step()
            return loss

        start = time.process_time()
        gv.doctor(step, model, opt)
        out["doctor"] = time.process_time() - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--doctor", action="store_true", help="time gv.doctor too (about 6 ms per parameter)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    first: dict[str, float] = {}
    for n in args.sizes:
        for tool, seconds in measure(n, args.doctor).items():
            first.setdefault(tool, seconds)
            print(f"{tool:14s} {n:>7,} parameters: {seconds:8.2f} s CPU  x{seconds / first[tool]:5.1f} "
                  f"(sizes x{n / args.sizes[0]:.1f})")


if __name__ == "__main__":
    main()

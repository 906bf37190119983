"""Run by tests/unit/test_ddp.py under `torchrun --nproc_per_node=2`: a tiny DDP training loop on gloo/CPU.

Each rank records with a GradientMonitor; rank 0 gathers per-rank and reduced statistics and writes
them (plus what each rank saw) as JSON to the directory given as argv[1].
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import gradviz_nb as gv
from gradviz_nb.demo_models import MLP


def main(out_dir: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(MLP(d_in=4, d_hidden=8, d_out=3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = gv.GradientMonitor(model, every=2)
    gen = torch.Generator().manual_seed(rank)  # each rank its own data
    local_norms = []
    for step in range(6):
        x = torch.randn(5, 4, generator=gen)
        if step == 4:
            with model.no_sync():  # gradients stay local: per-rank statistics differ
                model(x).pow(2).mean().backward()
        else:
            model(x).pow(2).mean().backward()
        monitor.step()
        local_norms.append(torch.cat([p.grad.flatten() for p in model.module.fc1.parameters()]).norm().item())
        opt.step()
        opt.zero_grad()
    chart = monitor.chart(widget=False)
    result = {
        "rank": rank, "world": world, "layers": monitor.layers, "steps": monitor.steps,
        "history": monitor.history().tolist(), "local_fc1": local_norms, "rendered": chart is not None,
        "per_rank": None if monitor.per_rank() is None else monitor.per_rank().tolist(),  # type: ignore[union-attr]
        "reduced": monitor.reduced().tolist(),
    }
    monitor.close()
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""GradientMonitor on a 2-rank FSDP2 run (gloo, CPU): a tiny GPT-2 with LoRA adapters, sharded with `fully_shard`.

Run:

    torchrun --nproc_per_node=2 examples/distributed_monitor.py --out monitor.pt

Every rank records per-layer gradient norms of the full (unsharded) gradients, computed from its own shards
and one all-reduce per recorded step (nothing is all-gathered); rank 0 also gathers each rank's own shard
statistics (``monitor.per_rank()``) and saves the monitor to ``--out``. Load it anywhere, without torchrun::

    mon = gv.GradientMonitor.load("monitor.pt")
    mon.chart(); print(mon.summary())

``--cut PATH`` sets the LoRA adapter of the Linear at PATH (e.g. ``blocks.1.attn.c_attn``) to scale 0, a dead
adapter: its gradients are exactly zero on every rank, and the monitor flags ``no-grad`` for it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where rank 0 saves the monitor")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--cut", default="", help="module path of a LoRA Linear to disable (a dead adapter)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)  # the same initial weights on every rank; each rank gets its own data below
    model = add_lora(GPT2(GPT2Config.small_test()))
    if args.cut:
        model.get_submodule(args.cut).scale = 0.0
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    monitor = gv.GradientMonitor(model, optimizer=opt)  # before the first forward: sharded parameters

    gen = torch.Generator().manual_seed(1000 + rank)
    for step in range(args.steps):
        tokens = torch.randint(0, 101, (4, 17), generator=gen)
        _, loss = model(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())  # next-token prediction
        loss.backward()
        monitor.step()  # after backward, before the optimizer step
        opt.step()
        opt.zero_grad()
        if rank == 0:
            print(f"step {step + 1}: loss {loss.item():.4f}", flush=True)

    monitor.close()
    if rank == 0:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        monitor.save(args.out)
        print(monitor.summary())
        print(f"saved to {args.out}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

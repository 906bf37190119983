"""FSDP2 on two CPU processes: `torchrun --nproc_per_node=2 -m gradviz_nb doctor examples/cli/fsdp2_train.py [--bug]`.

With --bug the optimizer is built before `fully_shard`, which replaces every parameter by a sharded one: the
optimizer holds the old tensors, and the model's real parameters get gradients that nothing applies."""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--bug", action="store_true")
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
if args.bug:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # the bug: built before fully_shard
for layer in (model[0], model[2], model[4]):
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
if not args.bug:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

g = torch.Generator().manual_seed(dist.get_rank())
x, y = torch.randn(32, 16, generator=g), torch.randn(32, 1, generator=g)
for _ in range(args.steps):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
if dist.get_rank() == 0:
    print(f"trained {args.steps} steps, final loss {loss.item():.4f}")
dist.destroy_process_group()

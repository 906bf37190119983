"""A plain training loop with a LoRA-style adapter: `gradviz doctor examples/cli/plain_loop.py [--bug]`.

With --bug the adapter's input is detached, so the adapter never gets a gradient (a dead adapter)."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--bug", action="store_true")
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()


class Adapted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(16, 16)
        self.base.requires_grad_(False)
        self.lora_A = nn.Linear(16, 4, bias=False)
        self.lora_B = nn.Linear(4, 16, bias=False)
        nn.init.normal_(self.lora_B.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.lora_A(x)
        if args.bug:
            a = a.detach()  # the bug: the adapter's path to the loss is cut
        return self.base(x) + self.lora_B(a)


torch.manual_seed(0)
model = nn.Sequential(Adapted(), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for _ in range(args.steps):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print(f"trained {args.steps} steps, final loss {loss.item():.4f}")

"""A NaN born in backward: `gradviz nan examples/cli/nan_backward.py`.

The forward is finite (torch.where hides log's -inf where a padding mask zeroed the input), but log's backward
divides by that zero, and the NaN lands in the first layer's gradient."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 4), torch.randn(32, 1)
mask = (torch.rand(32, 8) > 0.3).float()  # padding: exact zeros
for step in range(5):
    opt.zero_grad()
    h = model[0](x) * mask
    feature = torch.where(h != 0, torch.log(h.abs()), torch.zeros_like(h))  # finite forward, 0/0 in backward
    loss = nn.functional.mse_loss(model[2](model[1](feature)), y)
    loss.backward()
    opt.step()
    finite = bool(model[0].weight.grad.isfinite().all())
    print(f"step {step}: loss {loss.item():.4f}, first-layer gradient finite: {finite}")

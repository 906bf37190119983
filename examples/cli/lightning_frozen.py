"""A Lightning run of a small regressor: `gradviz doctor examples/cli/lightning_frozen.py [--bug]`.

With --bug the first layer is frozen (requires_grad False) while the optimizer is still built over all parameters:
a frozen layer that the run means to train."""

import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--bug", action="store_true")
parser.add_argument("--max-steps", type=int, default=10)
args = parser.parse_args()


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        if args.bug:
            self.net[0].requires_grad_(False)  # the bug: the first layer is frozen

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


torch.manual_seed(0)
data = TensorDataset(torch.randn(128, 8), torch.randn(128, 1))
trainer = L.Trainer(max_steps=args.max_steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Regressor(), DataLoader(data, batch_size=16))
print("training done")

"""A parameter the step writes by hand instead of training (an EMA or SWA copy in
``torch.optim.swa_utils.AveragedModel``) is no finding: measured, no optimizer holds it, no loss's graph has it,
and its values changed during the step. A cut in the trained model is still named."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

import gradviz_nb as gv


class Net(nn.Module):
    def __init__(self, cut: bool = False) -> None:
        super().__init__()
        self.fc1, self.fc2, self.cut = nn.Linear(4, 8), nn.Linear(8, 3), cut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        return self.fc2(h.detach() if self.cut else h)


def _doctor(cut: bool, ema: bool, hand_written: bool = True) -> tuple[gv.Diagnosis, nn.Module]:
    torch.manual_seed(0)
    net = Net(cut)
    avg = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(0.99) if ema else None)
    model = nn.ModuleDict({"net": net, "avg": avg})
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
        if hand_written:
            avg.update_parameters(net)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gv.doctor(step, model, opt), avg


@pytest.mark.parametrize("ema", [True, False], ids=["ema", "swa"])
def test_an_averaged_copy_is_no_finding(ema: bool) -> None:
    dx, avg = _doctor(cut=False, ema=ema)
    # PyTorch's truth: the copy requires grad, is never in the loss, and update_parameters wrote its values.
    assert all(p.requires_grad and p.grad is None for p in avg.parameters())
    assert dx.findings == [], dx.summary()


def test_a_copy_nothing_writes_is_still_reported() -> None:
    dx, _ = _doctor(cut=False, ema=True, hand_written=False)
    assert {f.target for f in dx.findings} >= {"avg.module.fc1.weight", "avg.module.fc2.weight"}, dx.summary()


def test_a_cut_in_the_trained_model_beside_a_copy_is_still_detached() -> None:
    dx, _ = _doctor(cut=True, ema=True)
    named = {f.target: f.kind for f in dx.findings}
    assert named.get("net.fc1.weight") == "detached" and named.get("net.fc1.bias") == "detached", dx.summary()
    assert not any(t.startswith("avg.") for t in named), dx.summary()

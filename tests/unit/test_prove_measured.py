"""prove() measures connection, runs every mechanical fix, and patches nothing for the process: each fixed
gradient is compared with the gradient PyTorch gives the same model written without the cut."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import CheckpointFunction, checkpoint

import gradviz_nb as gv


class Cut(nn.Module):
    """fc1 reaches the head only through ``mode``'s cut; ``mode="none"`` is the same model uncut."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.fc1, self.head = nn.Linear(4, 4), nn.Linear(4, 1)
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "no_grad":
            with torch.no_grad():
                h = self.fc1(x)
        elif self.mode == "inference_mode":
            with torch.inference_mode():
                h = self.fc1(x)
            h = h.clone()
        elif self.mode == "float":
            h = torch.tensor(float(self.fc1(x).sum())) * torch.ones(4)
        elif self.mode == "item":
            h = torch.tensor(self.fc1(x).sum().item()) * torch.ones(4)
        elif self.mode == "checkpoint":
            h = checkpoint(self.fc1, x, use_reentrant=True)
        elif self.mode == "copy":
            h = torch.tensor(self.fc1(x))
        elif self.mode == "sum":  # the uncut twin of float / item
            h = self.fc1(x).sum() * torch.ones(4)
        else:
            h = self.fc1(x)
        return self.head(h).sum()


def _uncut_norm(mode: str, state: dict[str, torch.Tensor], x: torch.Tensor) -> float:
    twin = Cut("sum" if mode in ("float", "item") else "none")
    twin.load_state_dict(state)
    twin(x).backward()
    assert twin.fc1.weight.grad is not None
    return float(twin.fc1.weight.grad.double().norm())


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "float", "item", "checkpoint", "copy"])
def test_every_mechanical_fix_runs_and_gives_the_uncut_gradient(mode: str) -> None:
    torch.manual_seed(0)
    model, x = Cut(mode), torch.randn(3, 4)
    before = dict(CheckpointFunction.__dict__)
    w = gv.why(model, "fc1.weight", fn=lambda: model(x))
    assert w.status == "none" and w.kind is not None
    if mode == "inference_mode":
        assert "inference_mode" in w.cause and "no_grad" not in w.cause
    proof = w.prove()
    assert proof.proven, proof
    assert proof.before is None
    assert proof.after == pytest.approx(_uncut_norm(mode, model.state_dict(), x), rel=1e-6)
    assert model.fc1.weight.grad is None  # the sandbox put the model back
    assert dict(CheckpointFunction.__dict__) == before  # no class patched, not even for a moment after


def test_a_thread_inside_no_grad_never_sees_grad_enabled_while_prove_runs() -> None:
    torch.manual_seed(0)
    model, x = Cut("no_grad"), torch.randn(3, 4)
    w = gv.why(model, "fc1.weight", fn=lambda: model(x))
    stop = threading.Event()
    seen: list[bool] = []

    def other() -> None:
        while not stop.is_set():
            with torch.no_grad():
                seen.append(torch.is_grad_enabled())
                torch.ones(2) + 1  # a torch call inside the block, as a real one makes

    t = threading.Thread(target=other)
    t.start()
    try:
        proofs = [w.prove() for _ in range(5)]
    finally:
        stop.set()
        t.join()
    assert all(p.proven for p in proofs)
    assert seen and not any(seen)


def test_prove_calls_a_profile_function_the_user_had_and_puts_it_back() -> None:
    import sys

    torch.manual_seed(0)
    model, x = Cut("checkpoint"), torch.randn(3, 4)
    w = gv.why(model, "fc1.weight", fn=lambda: model(x))
    calls: list[str] = []

    def mine(frame: object, event: str, arg: object) -> None:
        calls.append(event)

    sys.setprofile(mine)
    try:
        proof = w.prove()
    finally:
        sys.setprofile(None)
    assert proof.proven and calls
    assert sys.getprofile() is None


class Adapter(nn.Module):
    """A hand-written adapter whose up-projection starts at zero, behind a detach: with the fix the down
    projection is connected, and its gradient is exactly zero (the up-projection is zero)."""

    def __init__(self) -> None:
        super().__init__()
        self.down, self.up = nn.Linear(4, 2), nn.Linear(2, 4)
        nn.init.zeros_(self.up.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.up(self.down(x).detach())).sum()


def test_none_to_an_exact_zero_is_connected() -> None:
    model, x = Adapter(), torch.randn(3, 4)
    proof = gv.why(model, "down.weight", fn=lambda: model(x)).prove()
    assert proof.before is None and proof.after == 0.0
    assert proof.proven, proof


class Partly(nn.Module):
    """fc1's main path is detached; a penalty still reaches it: its gradient is scaled, not missing."""

    def __init__(self, detach: bool = True) -> None:
        super().__init__()
        self.fc1, self.head = nn.Linear(4, 4), nn.Linear(4, 1)
        self.detach = detach

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        return self.head(h.detach() if self.detach else h).sum() + 1e-3 * self.fc1.weight.pow(2).sum()


def test_a_scaled_cut_is_proven_when_the_fix_gives_the_uncut_gradient() -> None:
    torch.manual_seed(0)
    model, x = Partly(), torch.randn(3, 4)
    w = gv.why(model, "fc1.weight", fn=lambda: model(x))
    assert w.kind == "detached"
    proof = w.prove()
    twin = Partly(detach=False)
    twin.load_state_dict(model.state_dict())
    twin(x).backward()
    assert twin.fc1.weight.grad is not None
    assert proof.after == pytest.approx(float(twin.fc1.weight.grad.double().norm()), rel=1e-6)
    assert proof.proven, proof


def test_why_says_none_for_a_grad_that_is_none_from_a_diagnosis() -> None:
    torch.manual_seed(0)
    model, x = Cut("copy"), torch.randn(3, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        model(x).backward()
        opt.step()

    dx = gv.doctor(step, model, opt)
    w = gv.why(dx, "fc1.weight")
    assert w.status == "none", w
    assert w.kind == "left-graph" and "torch.tensor(...)" in w.cause, w

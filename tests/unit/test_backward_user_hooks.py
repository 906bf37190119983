"""``gv.record_backward`` runs the real backward; what the user's own backward hooks do is undone.

PyTorch's "optimizer step in backward" recipe: each parameter's post-accumulate-grad hook steps its own
optimizer. The truth is PyTorch's: the parameters, optimizer states and ``.grad`` before, and a plain
backward of an unhooked copy for the gradients.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import gradviz_nb as gv


def recipe() -> tuple[nn.Module, dict[nn.Parameter, torch.optim.Optimizer], torch.Tensor, nn.Module]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    plain = copy.deepcopy(model)
    opts = {p: torch.optim.SGD([p], lr=0.1, momentum=0.9) for p in model.parameters()}

    def step(p: torch.Tensor) -> None:
        opts[p].step()  # type: ignore[index]
        opts[p].zero_grad()  # type: ignore[index]

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step)
    return model, opts, torch.randn(3, 4), plain


@pytest.mark.parametrize("until", [None, "nonfinite"])
def test_an_optimizer_step_in_backward_does_not_move_the_weights(until: str | None) -> None:
    model, opts, x, plain = recipe()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = model(x).pow(2).sum()
    rec = gv.record_backward(loss, model=model, until=until)
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())  # not moved
    assert all(not o.state for o in opts.values())  # no momentum buffer left behind
    assert all(p.grad is None for p in model.parameters())
    if until is None:  # the recording holds what PyTorch delivered (a plain backward of an unhooked copy)
        plain(x).pow(2).sum().backward()
        for name, p in plain.named_parameters():
            assert torch.allclose(rec.leaf_grad(name), p.grad)  # type: ignore[arg-type]
    # the graph stays usable: the user's own backward runs, and steps each optimizer once
    loss.backward()
    assert all(len(o.state) == 1 for o in opts.values())
    assert not all(torch.equal(before[n], p) for n, p in model.named_parameters())


def test_a_module_backward_hook_with_a_side_effect_is_undone_too() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]

    def bump(module: nn.Module, grad_in: object, grad_out: object) -> None:
        with torch.no_grad():
            module.weight.mul_(2.0)  # type: ignore[operator]
            opt.step()

    model[2].register_full_backward_hook(bump)
    loss = model(torch.randn(2, 3)).sum()
    gv.record_backward(loss, model=model)
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True)) and not opt.state

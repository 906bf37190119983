"""Everything a training step changes, snapshotted before the doctor runs it and put back afterwards.

A step changes parameters and buffers (optimizer step, batch-norm statistics), the optimizer's state
(momenta, step counts), the random number generators (dropout, sampling), ``.grad``, and possibly
``requires_grad`` and training modes. :class:`TrainingState` copies all of it and restores it in place:
the user's tensors stay the same objects, so their references (the optimizer's param groups, tied
weights, hooks) keep working.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradviz_nb.probes.sharded import reshard_fsdp

__all__ = ["TrainingState", "describe_differences"]


@dataclass
class TrainingState:
    """A restorable copy of a model's (and optimizer's) training state."""

    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor | None]
    grads: dict[str, torch.Tensor | None]
    requires_grad: dict[str, bool]
    modes: dict[str, bool]
    optimizer_state: dict[str, Any] | None
    rng_torch: torch.Tensor
    rng_python: Any
    rng_numpy: Any

    @classmethod
    def save(cls, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> TrainingState:
        reshard_fsdp(model)  # FSDP2: save the sharded parameters, which every step ends with
        named = dict(model.named_parameters(remove_duplicate=True))
        return cls(
            model=model,
            optimizer=optimizer,
            params={n: p.detach().clone() for n, p in named.items()},
            buffers={n: None if b is None else b.detach().clone() for n, b in model.named_buffers()},
            grads={n: None if p.grad is None else p.grad.detach().clone() for n, p in named.items()},
            requires_grad={n: p.requires_grad for n, p in named.items()},
            modes={n: m.training for n, m in model.named_modules(remove_duplicate=False)},
            optimizer_state=copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None,
            rng_torch=torch.get_rng_state(),
            rng_python=random.getstate(),
            rng_numpy=_numpy_state(),
        )

    def restore(self) -> None:
        """Put every value back into the same tensors and modules."""
        named = dict(self.model.named_parameters(remove_duplicate=True))
        with torch.no_grad():
            for n, p in named.items():
                if n in self.params:
                    p.copy_(self.params[n])
            for n, b in self.model.named_buffers():
                saved = self.buffers.get(n)
                if b is not None and saved is not None:
                    b.copy_(saved)
        for n, p in named.items():
            if n in self.requires_grad:
                p.requires_grad_(self.requires_grad[n])
            saved_grad = self.grads.get(n)
            p.grad = None if saved_grad is None else saved_grad.clone()
        for n, m in self.model.named_modules(remove_duplicate=False):
            if n in self.modes:
                m.training = self.modes[n]
        if self.optimizer is not None and self.optimizer_state is not None:
            self.optimizer.load_state_dict(copy.deepcopy(self.optimizer_state))
            if not self.optimizer_state.get("state"):
                self.optimizer.state.clear()  # load_state_dict merges: drop momenta the step created
        torch.set_rng_state(self.rng_torch)
        random.setstate(self.rng_python)
        if self.rng_numpy is not None:
            import numpy as np

            np.random.set_state(self.rng_numpy)


def _numpy_state() -> Any:
    try:
        import numpy as np
    except ImportError:
        return None
    return np.random.get_state()


def describe_differences(before: TrainingState, after: TrainingState) -> list[str]:
    """What differs between two snapshots (empty when the step left no trace): used by tests and by the
    doctor's own check that restoring worked."""
    out = []
    for n, v in before.params.items():
        if not torch.equal(v, after.params[n]):
            out.append(f"parameter {n}")
    for n, b in before.buffers.items():
        a = after.buffers.get(n)
        if (b is None) != (a is None) or (b is not None and a is not None and not torch.equal(b, a)):
            out.append(f"buffer {n}")
    for n, g in before.grads.items():
        a = after.grads.get(n)
        if (g is None) != (a is None) or (g is not None and a is not None and not torch.equal(g, a)):
            out.append(f".grad of {n}")
    out += [f"requires_grad of {n}" for n, v in before.requires_grad.items() if after.requires_grad.get(n) != v]
    out += [f"training mode of {n or '(model)'}" for n, v in before.modes.items() if after.modes.get(n) != v]
    if not torch.equal(before.rng_torch, after.rng_torch):
        out.append("torch RNG state")
    if before.rng_python != after.rng_python:
        out.append("python RNG state")
    if before.optimizer_state is not None and after.optimizer_state is not None and not _same_state(
            before.optimizer_state, after.optimizer_state):
        out.append("optimizer state")
    return out


def _same_state(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)

"""Everything a training step changes, snapshotted before the doctor runs it and put back afterwards.

A step changes parameters and buffers (optimizer step, batch-norm statistics), the optimizer's state
(momenta, step counts), the random number generators (dropout, sampling), ``.grad``, and possibly
``requires_grad``, training modes and hooks. :class:`TrainingState` is the probes' one sandbox snapshot
(:mod:`gradviz_nb.probes.sandbox`), named for the doctor: it restores in place, so the user's tensors,
``.grad`` included, stay the same objects and their references (the optimizer's param groups, tied
weights, DDP buckets, hooks) keep working.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gradviz_nb.doctor.registration import unregistered
from gradviz_nb.probes.sandbox import Snapshot

__all__ = ["TrainingState", "describe_differences"]


class TrainingState(Snapshot):
    """A restorable copy of a model's (and optimizer's) training state (a sandbox :class:`Snapshot`), with
    the weights the model holds outside ``parameters()`` (plain lists, requires-grad buffers): a step gives
    them a ``.grad`` too."""

    @classmethod
    def save(cls, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> TrainingState:
        """Snapshot ``model`` and ``optimizer`` (and tensors that require grad outside ``parameters()``) before the
        doctor runs steps."""
        extra = [t for u in unregistered(model) for t in u.tensors.values()]
        return cls(model, optimizer, tensors=extra)


def describe_differences(before: Snapshot, after: Snapshot) -> list[str]:
    """What differs between two snapshots (empty when the step left no trace): used by tests and by the
    doctor's own check that restoring worked."""
    out = []
    for n, v in before.params.items():
        a = after.params.get(n)
        if (v is None) != (a is None) or (v is not None and a is not None and not torch.equal(v, a)):
            out.append(f"parameter {n}")
    for n, b in before.buffers.items():
        a = after.buffers.get(n)
        if (b is None) != (a is None) or (b is not None and a is not None and not torch.equal(b, a)):
            out.append(f"buffer {n}")
    for n, g in before.grads.items():
        a = after.grads.get(n)
        if (g is None) != (a is None) or (g is not None and a is not None and not torch.equal(g, a)):
            out.append(f".grad of {n}")
    after_ids = after.grad_ids
    out += [f".grad object of {n}" for n, i in before.grad_ids.items() if i is not None and after_ids.get(n) != i]
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

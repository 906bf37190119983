"""Tensors and modules a model holds that ``model.parameters()`` does not see, found by reading its attributes.

Three ways a weight escapes registration: a leaf tensor that requires grad kept as a plain attribute or in a
plain ``list`` / ``tuple`` / ``dict`` (``nn.Module.__setattr__`` registers only an ``nn.Parameter`` assigned
directly), a buffer made with ``requires_grad=True``, and modules kept in a plain container. All of them get a
``.grad`` from backward and are never moved by an optimizer built from ``model.parameters()``.

A tensor with a ``grad_fn`` (an auxiliary loss kept on the module, as mixture-of-experts load balancing does)
is a value computed in forward, not a weight: it is never listed. Neither is a reference to a registered
parameter kept in a list (``self.decay = [self.fc.weight]``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["Unregistered", "unregistered"]


@dataclass
class Unregistered:
    """One escape: ``path`` (``"scale"``, ``"ws[0]"``, ``"experts"``), ``how`` (``"attribute"``, ``"list"``,
    ``"dict"``, ``"tuple"``, ``"buffer"``, ``"modules"``), the holding module's type, and the leaf tensors
    (by name) whose gradients show it was used."""

    path: str
    how: str
    owner: str
    attr: str
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    modules: int = 0


def _is_weight(value: object, registered: set[int]) -> bool:
    return (isinstance(value, torch.Tensor) and value.is_leaf and value.requires_grad
            and id(value) not in registered)


def _items(value: object) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        yield from ((f"[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        yield from ((f"[{i}]", v) for i, v in enumerate(value))


def unregistered(model: nn.Module) -> list[Unregistered]:
    """Every escape in ``model``, in module order."""
    registered = {id(p) for p in model.parameters()}
    out: list[Unregistered] = []
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        owner = type(module).__name__
        for attr, value in module._buffers.items():
            if _is_weight(value, registered):
                assert value is not None
                out.append(Unregistered(prefix + attr, "buffer", owner, attr, {prefix + attr: value}))
        for attr, value in vars(module).items():
            if attr.startswith("_"):
                continue
            where = prefix + attr
            if _is_weight(value, registered):
                assert isinstance(value, torch.Tensor)
                out.append(Unregistered(where, "attribute", owner, attr, {where: value}))
                continue
            items = list(_items(value))
            leaves = {where + key: v for key, v in items if _is_weight(v, registered)}
            mods = [(key, v) for key, v in items if isinstance(v, nn.Module)]
            if leaves:
                out.append(Unregistered(where, type(value).__name__, owner, attr,
                                        {k: v for k, v in leaves.items() if isinstance(v, torch.Tensor)}))
            if mods:
                tensors: dict[str, torch.Tensor] = {
                    f"{where}{key}.{n}": p for key, m in mods for n, p in m.named_parameters()
                    if id(p) not in registered}
                if tensors:
                    out.append(Unregistered(where, "modules", owner, attr, tensors, len(mods)))
    return out

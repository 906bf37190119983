"""The monitored parameters: each trainable tensor once, its name, its layer (the module owning it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from gradviz_nb.kinds import Kind
from gradviz_nb.probes.sharded import is_dtensor, local_part
from gradviz_nb.tracing.compiled import real_name

Emit = Callable[[Kind, str, str, tuple[str, ...]], None]
"""How a part reports a verdict to the monitor: ``emit(kind, target, reason, params)`` at the current step."""


class ParamIndex:
    """Parameters trainable when the monitor attached (a tied weight under its first name), by layer."""

    def __init__(self, model: nn.Module | None) -> None:
        self.params: list[nn.Parameter] = []
        self.names: list[str] = []
        self.layers: list[str] = []
        owner: list[int] = []
        for name, p in model.named_parameters() if model is not None else ():
            if not p.requires_grad:
                continue  # frozen at attach time: nothing to learn, nothing to chart
            name = real_name(name)  # a compiled submodule's "_orig_mod" is no part of the name
            layer = name.rpartition(".")[0]
            if layer not in self.layers:
                self.layers.append(layer)
            owner.append(self.layers.index(layer))
            self.params.append(p)
            self.names.append(name)
        self.owner = torch.tensor(owner, dtype=torch.long)
        self.per_layer = torch.zeros(len(self.layers)).index_add_(0, self.owner, torch.ones(len(owner)))
        self.index = {id(p): i for i, p in enumerate(self.params)}
        self.sharded = any(is_dtensor(p) for p in self.params)  # FSDP2: DTensor shards, reduced per record

    def layer_of(self, i: int) -> int:
        """The layer index of parameter ``i``."""
        return int(self.owner[i])

    def in_layer(self, c: int) -> list[int]:
        """The parameter indices of layer ``c``."""
        return [i for i in range(len(self.params)) if self.layer_of(i) == c]

    def by_layer(self, idx: Sequence[int]) -> list[tuple[str, list[int]]]:
        """Group parameters by layer: target is the layer when all its parameters are concerned, else the one."""
        out: list[tuple[str, list[int]]] = []
        for c, layer in enumerate(self.layers):
            mine = [i for i in idx if self.layer_of(i) == c]
            if not mine:
                continue
            whole = len(mine) == int(self.per_layer[c].item())
            out.append((layer if whole or len(mine) > 1 else self.names[mine[0]], mine))
        return out

    def weight(self, i: int) -> torch.Tensor:
        """Parameter ``i``'s values on this rank: a ``DTensor``'s local shard (FSDP2), else the tensor."""
        p = self.params[i].detach()
        return local_part(p)[0] if self.sharded else p

    def release(self) -> None:
        """Let go of the parameters (names and layers stay for the history)."""
        self.params = []
        self.index = {}


def grad_values(g: torch.Tensor) -> torch.Tensor:
    """The stored values of a gradient: itself when dense; a sparse one's (coalesced) non-zero values. A
    complex gradient as its magnitudes ``|g|``: the same norm and max |g| (never its real part's)."""
    if g.layout == torch.sparse_coo:
        g = g.coalesce().values()
    elif g.layout != torch.strided:
        g = g.values()
    return g.abs() if g.is_complex() else g

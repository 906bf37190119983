"""The factor that made a node send zero, read from the tensors the live graph saved for its backward.

A node whose backward received a non-zero gradient and sent zero towards a parameter multiplied it by
something that is exactly zero: a weight's gradient is its layer's input times the output's gradient, an
input's gradient the weight times it. :func:`zero_factors` reads the node's saved tensors (the graph must still
hold them: recorded with ``retain_graph``) and names the one that is all zeros, by what made it:

- a trainable parameter (or a view of one), when every parameter the node saved is all zero: a zero-initialised
  up-projection such as LoRA's ``B``; the zero is expected, and lasts until that parameter moves (layer norm
  saves its weight beside its zero bias, which it only adds: not a factor);
- another node of the graph (its saved tensor carries that node as ``grad_fn``): the op whose output was all
  zero, to be worded with its own line (a multiplication by zero, a dropout that dropped everything, a zeroing
  hook);
- a constant with no history: the node's own operand (``x * torch.zeros(())``), the node itself is the cause.

Nothing here looks at op names: any op's saved tensors are read alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gradviz_nb.tracing import AutogradGraph
from gradviz_nb.tracing.walk import reachable

__all__ = ["ZeroFactor", "zero_factors"]


@dataclass(frozen=True)
class ZeroFactor:
    """What the all-zero saved tensor of a node was: ``param`` (the parameter's name), else ``node`` (the graph
    node that produced it), else ``own`` (the node's own output, saved for its backward: a ReLU that output
    only zeros), else none of them (a constant operand); ``shape`` its shape."""

    param: str = ""
    node: str = ""
    own: bool = False
    shape: tuple[int, ...] = ()


def _readable(t: torch.Tensor) -> bool:
    """A plain tensor whose storage holds all its elements. A sharded parameter (a DTensor) or FSDP2's
    unsharded parameter outside its forward (storage freed to 0 bytes, the shape kept) is not: reading its
    values crashes the process. Such a parameter is then not measured a zero factor."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.is_meta or not t.numel() or t.layout != torch.strided:
        return False
    extent = t.storage_offset() + 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True))
    return t.untyped_storage().nbytes() >= extent * t.element_size()


def _all_zero(t: torch.Tensor) -> bool:
    if t.layout is not torch.strided or t.is_meta or not t.numel() or not (t.is_floating_point() or t.is_complex()):
        return False
    if not _readable(t):  # a DTensor, or FSDP2's unsharded parameter with its storage freed: reading crashes
        return False
    with torch.no_grad():
        return not bool(t.detach().any())


def _saved_tensors(fn: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for attr in dir(fn):
        if not attr.startswith("_saved_"):
            continue
        try:
            value = getattr(fn, attr)
        except RuntimeError:  # freed by a backward without retain_graph
            continue
        values = value if isinstance(value, (tuple, list)) else (value,)
        out += [v for v in values if isinstance(v, torch.Tensor)]
    return out


def _param_of(t: torch.Tensor, params: dict[int, str]) -> str:
    """The name of the trainable parameter ``t`` is (or is a view of), by storage, else ``""``."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return ""
    return params.get(ptr, "")


def zero_factors(root: torch.Tensor, graph: AutogradGraph, nodes: list[str]) -> dict[str, ZeroFactor]:
    """For each of ``nodes`` (graph node ids) that saved an all-zero tensor for its backward, what that tensor
    was (see the module docstring). ``root``: the loss whose graph ``graph`` traced, its saved tensors still
    held (a backward with ``retain_graph``)."""
    if root.grad_fn is None or not nodes:
        return {}
    attrs = graph.nx.nodes
    wanted = {(int(attrs[n]["seq"]), str(attrs[n].get("op", ""))): n for n in nodes if attrs[n].get("seq", -1) >= 0}
    by_seq = {int(d["seq"]): n for n, d in graph.nx.nodes(data=True) if d.get("kind") == "op" and d.get("seq", -1) >= 0}
    params: dict[int, str] = {}
    for leaf, ref in graph.tensors.items():
        p = ref()
        if p is not None and p.requires_grad and p.layout is torch.strided and p.numel():
            params[p.untyped_storage().data_ptr()] = str(attrs[leaf].get("name") or leaf)
    out: dict[str, ZeroFactor] = {}
    for fn, _ in reachable([root.grad_fn]):
        node = wanted.get((int(fn._sequence_nr()), type(fn).__name__))
        if node is not None:
            found = _factor(fn, params, by_seq)
            if found is not None:
                out[node] = found
    return out


def _factor(fn: Any, params: dict[int, str], by_seq: dict[int, str]) -> ZeroFactor | None:
    saved = _saved_tensors(fn)
    own = [(t, _param_of(t, params)) for t in saved]
    mine = [(t, name) for t, name in own if name]
    if mine and all(_all_zero(t) for t, _ in mine):  # a node that also saved a non-zero parameter (layer norm's
        t, name = mine[0]                             # weight beside its zero bias) is not stopped by the zero one
        return ZeroFactor(param=name, shape=tuple(t.shape))
    zeros = [t for t, name in own if not name and _all_zero(t)]
    for t in zeros:
        made = t.grad_fn
        if made is not None and made is not fn and int(made._sequence_nr()) in by_seq:
            return ZeroFactor(node=by_seq[int(made._sequence_nr())], shape=tuple(t.shape))
    for t in zeros:
        if t.grad_fn is fn:
            return ZeroFactor(own=True, shape=tuple(t.shape))
    return ZeroFactor(shape=tuple(zeros[0].shape)) if zeros else None

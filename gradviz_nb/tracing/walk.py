"""Walk ``grad_fn`` graphs and copy plain data out; no autograd Node outlives the walk."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

import torch

_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")


# (device, storage address) -> (storage index, holds a parameter?) for one walk
Storages = dict[tuple[Any, int], tuple[int, bool, int]]  # (device, base pointer) -> (index, param, bytes)


@dataclass(slots=True)  # one per autograd node: slots make them smaller and quicker to build
class RawNode:
    """What the walk learned about one autograd node (or a root tensor), as plain Python data."""

    key: int  # position in walk order
    op: str
    seq: int
    outputs: list[tuple[list[int] | None, str]]  # (shape, dtype) per output, from input metadata
    inputs: list[tuple[int, int]] = field(default_factory=list)  # (producer key, output_nr) per input
    leaf: torch.Tensor | None = None  # the leaf tensor for AccumulateGrad, dropped after naming
    saved: list[dict[str, Any]] = field(default_factory=list)


_op_by_type: dict[type, str] = {}


def op_name(node: Any) -> str:
    # name() demangles a C++ name on every call; each backward op is its own Python type, so cache.
    kind = type(node)
    name = _op_by_type.get(kind)
    if name is None:
        name = _op_by_type[kind] = str(node.name()).removeprefix("torch::autograd::")
    return name


@functools.cache
def short_op(op: str) -> str:
    """``"AddmmBackward0"`` -> ``"Addmm"``: the forward op a backward node undoes."""
    return _BACKWARD_SUFFIX.sub("", op) or op


_dtype_names: dict[torch.dtype, str] = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype).removeprefix("torch.")
    return name


def _outputs_of(node: Any) -> list[tuple[list[int] | None, str]]:
    try:
        return [(list(m.shape), _dtype_name(m.dtype)) for m in node._input_metadata]
    except (AttributeError, RuntimeError):  # older torch or a node without metadata
        return []


# op -> (name, sizes attribute, raw attribute) per saved tensor; dir() and f-strings once per op
_saved_attrs_by_op: dict[str, tuple[tuple[str, str, str], ...]] = {}


def _saved_of(node: Any, op: str, storages: Storages | None = None) -> list[dict[str, Any]]:
    """Tensors saved for backward, read as raw handles: nothing is unpacked or recomputed.

    Each entry has ``name``, ``shape``, ``dtype`` and, for memory estimates, ``bytes`` (the tensor's own
    elements), ``storage`` (an id, equal for tensors sharing memory within one walk: pass the same
    ``storages`` dict), ``storage_bytes`` and ``param`` (a parameter or a view of one: held anyway).
    ``bytes`` is 0 with ``packed: True`` when a saved-tensor hook (e.g. non-reentrant checkpoint) holds
    something else instead, and ``None`` when no tensor is there (an unused optional input, or backward
    already freed it).
    """
    attrs = _saved_attrs_by_op.get(op)
    if attrs is None:
        names = [a.removeprefix("_raw_saved_") for a in dir(node) if a.startswith("_raw_saved_")]
        attrs = _saved_attrs_by_op[op] = tuple((n, f"_saved_{n}_sym_sizes", f"_raw_saved_{n}") for n in names)
    saved = []
    for name, sizes_attr, raw_attr in attrs:
        sizes = getattr(node, sizes_attr, None)
        shape = [int(s) for s in sizes] if isinstance(sizes, (tuple, list)) else None
        entry: dict[str, Any] = {"name": name, "shape": shape, "dtype": ""}
        if storages is not None:
            _saved_memory(getattr(node, raw_attr, None), entry, storages)
        saved.append(entry)
    return saved


def _saved_memory(raw: Any, entry: dict[str, Any], storages: Storages) -> None:
    # SavedTensor.data is what was stored, read without unpack hooks (no recomputation, no version
    # check): the tensor itself, a hook's packed object, or None after backward freed it.
    items = raw if isinstance(raw, (list, tuple)) else [raw]
    datas = [getattr(r, "data", None) for r in items]
    tensors = [t for t in datas if isinstance(t, torch.Tensor)]
    if not tensors:
        packed = any(t is not None for t in datas)
        entry.update(bytes=0 if packed else None, storage=None, storage_bytes=0, param=False)
        if packed:
            entry["packed"] = True
        return
    t = tensors[0]  # a saved tensor list (rare) is summed, its first tensor gives the storage
    if entry["shape"] is None and len(tensors) == 1:
        entry["shape"] = list(t.shape)
    entry["dtype"] = entry["dtype"] or _dtype_name(t.dtype)
    size = t.element_size()
    # The storage's base address without building a storage object per tensor (most saved tensors
    # share a few storages); the storage itself is asked once per walk for its size.
    key = (t.device, t.data_ptr() - int(t.storage_offset()) * size)
    known = storages.get(key)
    if known is None:
        # One storage is a parameter's or not for every tensor on it (Parameter's isinstance is slow).
        known = storages[key] = (len(storages), _is_parameter(t), int(t.untyped_storage().nbytes()))
    index, param, storage_bytes = known
    entry.update(
        bytes=t.numel() * size if len(tensors) == 1 else sum(x.numel() * x.element_size() for x in tensors),
        storage=index,
        storage_bytes=storage_bytes,
        param=param,
    )


def _is_parameter(t: torch.Tensor) -> bool:
    """A parameter (frozen or not), a leaf that requires grad, or a view of one (``weight.t()``):
    memory the model or the caller holds anyway, not activations kept for backward."""
    base = t._base if t._base is not None else t
    return isinstance(base, torch.nn.Parameter) or bool(base.is_leaf and base.requires_grad)


def walk(root_fns: list[Any]) -> tuple[list[RawNode], dict[Any, int]]:
    """Visit every node reachable from ``root_fns`` (grad_fn objects); returns nodes in visit order.

    The second value maps each visited autograd Node to its key; callers must drop it (it pins the
    graph's saved activations).
    """
    keys: dict[Any, int] = {}
    nodes: list[RawNode] = []
    stack = [fn for fn in root_fns if fn is not None]
    for fn in stack:
        if fn not in keys:
            keys[fn] = -1
    order: list[Any] = []
    nexts: list[Any] = []  # next_functions builds a fresh tuple per call: read it once per node
    while stack:  # iterative DFS: deep graphs (thousands of layers) must not hit the recursion limit
        fn = stack.pop()
        if keys[fn] >= 0:
            continue
        keys[fn] = len(order)
        order.append(fn)
        nf = fn.next_functions
        nexts.append(nf)
        for nxt, _ in nf:
            if nxt is not None and nxt not in keys:
                keys[nxt] = -1
                stack.append(nxt)
    storages: Storages = {}
    for key, (fn, nf) in enumerate(zip(order, nexts, strict=True)):
        op = op_name(fn)
        raw = RawNode(
            key=key,
            op=op,
            seq=int(fn._sequence_nr()),
            outputs=_outputs_of(fn),
            inputs=[(keys[n], nr) if n is not None else (-1, nr) for n, nr in nf],
            saved=_saved_of(fn, op, storages),
        )
        if op == "AccumulateGrad":
            raw.leaf = fn.variable
        nodes.append(raw)
    return nodes, keys

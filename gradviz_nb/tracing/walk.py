"""Walk ``grad_fn`` graphs and copy plain data out; no autograd Node outlives the walk."""

from __future__ import annotations

import functools
import gc
import re
import sys
import types
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
    """The node's op name (``AddmmBackward0``), cached per node type."""
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
        metadata = node._input_metadata
    except (AttributeError, RuntimeError):  # older torch or a node without metadata
        return []
    names = _dtype_names  # the dtype's name by a dict lookup: a call per output costs 10% of the walk
    return [(list(m.shape), names.get(m.dtype) or _dtype_name(m.dtype)) for m in metadata]


# op -> (name, sizes attribute, raw attribute) per saved tensor; dir() and f-strings once per op
_saved_attrs_by_op: dict[str, tuple[tuple[str, str, str], ...]] = {}

FREED = "Trying to backward through the graph a second time"  # PyTorch's error for a freed saved tensor
SCAN_DEPTH = 6  # how deep frame / ctx contents are searched for tensors (containers, partials, closures)


class Checkpoints:
    """Checkpoints met during one walk, numbered in discovery order.

    A non-reentrant checkpoint is found through the unpack hook of the tensors it packed: the hook's
    closure holds the ``_CheckpointFrame``, which keeps the block's inputs (``saved_args``) and its
    recompute function (whose closure keeps the forward RNG state, keyword arguments, ...) alive until
    the last packed tensor is freed. A reentrant checkpoint is its ``CheckpointFunctionBackward`` node
    (inputs saved with ``save_for_backward``, RNG state and other arguments on the ctx). Frames are
    dropped with this object, at the end of the walk.
    """

    def __init__(self) -> None:
        self.count = 0
        self._by_hook: dict[int, tuple[Any, int | None]] = {}  # id(unpack hook) -> (hook, frame index)
        self.frames: list[Any] = []  # non-reentrant frames by index (None for reentrant indices)

    def new(self, frame: Any = None) -> int:
        """Number a new checkpoint (with its frame, when known) and return its index."""
        self.frames.append(frame)
        self.count += 1
        return self.count - 1

    def frame_of(self, saved: Any) -> int | None:
        """Index of the non-reentrant checkpoint frame whose hook packed ``saved`` (a SavedTensor)."""
        hook = getattr(saved, "unpack_hook", None)  # torch >= 2.4; older: checkpoints stay unknown
        if hook is None:
            return None
        known = self._by_hook.get(id(hook))
        if known is None:
            frame = _closure_value(hook, "frame")
            if not (hasattr(frame, "saved_args") and hasattr(frame, "recompute_fn")):
                frame = None
            known = self._by_hook[id(hook)] = (hook, self.new(frame) if frame is not None else None)
        return known[1]


def _closure_value(fn: Any, name: str) -> Any:
    code = getattr(fn, "__code__", None)
    if code is None or name not in code.co_freevars or fn.__closure__ is None:
        return None
    try:
        return fn.__closure__[code.co_freevars.index(name)].cell_contents
    except ValueError:  # an empty cell
        return None


def tensors_held(obj: Any, name: str, depth: int = SCAN_DEPTH, seen: set[int] | None = None
                 ) -> list[tuple[str, torch.Tensor]]:
    """Tensors ``obj`` keeps alive, with a path-like name: searched through containers, saved tensors
    (raw, never unpacked), ``functools.partial`` arguments, function closures and torch's checkpoint
    helper objects (selective checkpointing's cache). Modules are skipped: their parameters and buffers
    are held by the model anyway. Other objects are not entered (they may be the user's big state)."""
    seen = set() if seen is None else seen
    if depth < 0 or id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [(name, obj)]
    if isinstance(obj, torch.nn.Module):
        return []
    children: list[tuple[str, Any]] = []
    if isinstance(obj, torch._C._autograd.SavedTensor):
        children = [(name, getattr(obj, "data", None))]  # the raw handle: no unpack hook runs
    elif isinstance(obj, (list, tuple)):
        children = [(f"{name}[{i}]", v) for i, v in enumerate(obj)]
    elif isinstance(obj, dict):
        children = [(f"{name}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, functools.partial):
        children = [(f"{name}.args", obj.args), (f"{name}.keywords", obj.keywords)]
    elif isinstance(obj, types.FunctionType):
        for var in obj.__code__.co_freevars:
            children.append((f"{name}.{var}", _closure_value(obj, var)))
    elif type(obj).__module__ == "torch.utils.checkpoint":
        children = [(f"{name}.{k}", v) for k, v in vars(obj).items()]
    out: list[tuple[str, torch.Tensor]] = []
    for child_name, child in children:
        out += tensors_held(child, child_name, depth - 1, seen)
    return out


def _saved_of(
    node: Any, op: str, storages: Storages | None = None, checkpoints: Checkpoints | None = None
) -> list[dict[str, Any]]:
    """Tensors saved for backward, read as raw handles: nothing is unpacked or recomputed.

    Each entry has ``name``, ``shape``, ``dtype`` and, for memory estimates, ``bytes`` (the tensor's own
    elements), ``storage`` (an id, equal for tensors sharing memory within one walk: pass the same
    ``storages`` dict), ``storage_bytes`` and ``param`` (a parameter or a view of one: held anyway).
    ``bytes`` is 0 with ``packed: True`` when a saved-tensor hook holds something else instead (then
    ``checkpoint``: the index of the non-reentrant checkpoint that will recompute it, when that is what
    packed it), and ``None`` when no tensor is there: an unused optional input, or ``freed: True`` when
    backward already freed it. A saved list of several tensors gives one entry per tensor
    (``indices[0]``, ``indices[1]``).
    """
    attrs = _saved_attrs_by_op.get(op)
    if attrs is None:
        names = [a.removeprefix("_raw_saved_") for a in dir(node) if a.startswith("_raw_saved_")]
        attrs = _saved_attrs_by_op[op] = tuple((n, f"_saved_{n}_sym_sizes", f"_raw_saved_{n}") for n in names)
    saved = []
    for name, sizes_attr, raw_attr in attrs:
        sizes = getattr(node, sizes_attr, None)
        shape = list(map(int, sizes)) if isinstance(sizes, (tuple, list)) else None
        entry: dict[str, Any] = {"name": name, "shape": shape, "dtype": ""}
        if storages is None:
            saved.append(entry)
            continue
        try:
            raw = getattr(node, raw_attr, None)
        except RuntimeError as err:  # a custom Function's saved tensors after backward freed them
            if FREED not in str(err):
                raise
            entry.update(bytes=None, storage=None, storage_bytes=0, param=False, freed=True)
            saved.append(entry)
            continue
        if isinstance(raw, (list, tuple)) and len(raw) > 1:
            for i, item in enumerate(raw):
                one = {"name": f"{name}[{i}]", "shape": None, "dtype": ""}
                _saved_memory(item, one, storages, checkpoints)
                saved.append(one)
            continue
        if isinstance(raw, (list, tuple)) and not raw:  # an empty saved list holds nothing
            entry.update(bytes=0, storage=None, storage_bytes=0, param=False)
        else:
            _saved_memory(raw[0] if isinstance(raw, (list, tuple)) else raw, entry, storages, checkpoints)
        saved.append(entry)
    return saved


def _saved_memory(raw: Any, entry: dict[str, Any], storages: Storages, checkpoints: Checkpoints | None) -> None:
    # SavedTensor.data is what was stored, read without unpack hooks (no recomputation, no version
    # check): the tensor itself, a hook's packed object, or None (nothing saved, or freed by backward).
    data = getattr(raw, "data", None)
    if isinstance(data, torch.Tensor):
        _tensor_memory(data, entry, storages)
        return
    entry.update(bytes=0 if data is not None else None, storage=None, storage_bytes=0, param=False)
    if data is not None:
        entry["packed"] = True
        frame = checkpoints.frame_of(raw) if checkpoints is not None else None
        if frame is not None:
            entry["checkpoint"] = frame
    elif raw is not None and _freed(raw):
        entry["freed"] = True


def _freed(raw: Any) -> bool:
    """An empty saved slot: freed by backward (unpacking raises) or an unused optional input (None)."""
    if not hasattr(raw, "unpack"):
        return False
    try:
        raw.unpack()  # an empty slot has nothing to unpack: no hook runs, nothing is recomputed
    except RuntimeError as err:
        return FREED in str(err)
    return False


def storage_key(t: torch.Tensor) -> tuple[Any, int]:
    """The key :func:`walk`'s ``storages`` gives a dense, strided tensor's storage: (device, base address)."""
    if t.is_meta:
        return (t.device, t.untyped_storage()._cdata)
    return (t.device, t.data_ptr() - int(t.storage_offset()) * t.element_size())


def _tensor_memory(t: torch.Tensor, entry: dict[str, Any], storages: Storages) -> None:
    # Runs once per saved tensor of every trace (a third of the walk): plain reads, no keyword dicts.
    if entry["shape"] is None:
        entry["shape"] = list(t.shape)
    if not entry["dtype"]:
        entry["dtype"] = _dtype_names.get(t.dtype) or _dtype_name(t.dtype)
    outer = t  # a DTensor parameter is a Parameter; its local piece is not
    if type(t) not in _PLAIN:
        t = _local_piece(t)
        if t is not outer:
            entry["sharded"] = True  # bytes and storage: this rank's piece
    if t.layout is not _STRIDED:  # sparse: no storage of its own; its index and value tensors hold the memory
        nbytes = sum(part.numel() * part.element_size() for part in _sparse_parts(t))
        index, param = len(storages), _is_parameter(outer)
        storages[(t.device, -1 - index)] = (index, param, nbytes)
        entry.update(bytes=nbytes, storage=index, storage_bytes=nbytes, param=param)
        return
    size = t.element_size()
    # The storage's base address without building a storage object per tensor (most saved tensors
    # share a few storages); the storage itself is asked once per walk for its size.
    # A meta tensor has no memory (data_ptr 0 for all): its storage object tells which ones would share.
    key = (t.device, t.untyped_storage()._cdata if t.is_meta else t.data_ptr() - int(t.storage_offset()) * size)
    known = storages.get(key)
    if known is None:
        # One storage is a parameter's or not for every tensor on it (Parameter's isinstance is slow).
        known = storages[key] = (len(storages), _is_parameter(outer), t.untyped_storage().nbytes())
    entry["bytes"] = t.numel() * size
    entry["storage"], entry["storage_bytes"], entry["param"] = known[0], known[2], known[1]


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_STRIDED = torch.strided  # a tensor's .layout is one of torch's layout singletons


def _sparse_parts(t: torch.Tensor) -> list[torch.Tensor]:
    """The dense tensors a sparse tensor is made of (indices and values), for its memory."""
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    names = {torch.sparse_csr: ("crow_indices", "col_indices"), torch.sparse_bsr: ("crow_indices", "col_indices"),
             torch.sparse_csc: ("ccol_indices", "row_indices"), torch.sparse_bsc: ("ccol_indices", "row_indices")}
    parts = [getattr(t, name)() for name in names.get(t.layout, ())]
    return [*parts, t.values()] if t.layout in names else []


def _local_piece(t: torch.Tensor) -> torch.Tensor:
    """A ``DTensor``'s piece on this rank (``_local_tensor``), else ``t``. A DTensor is a wrapper: its own
    ``data_ptr()`` is 0 for all of them and its storage size is the full (global) tensor's, so each rank's
    memory is its local piece's storage."""
    while True:
        local = getattr(t, "_local_tensor", None)  # a slot on DTensor
        if not isinstance(local, torch.Tensor):
            return t
        t = local


def _held_entries(held: list[tuple[str, torch.Tensor]], storages: Storages, via: str,
                  checkpoint: int | None) -> list[dict[str, Any]]:
    """Saved-list entries for tensors a checkpoint frame or a custom Function's ctx keeps alive."""
    out = []
    for name, t in held:
        entry: dict[str, Any] = {"name": name, "shape": None, "dtype": "", "via": via}
        _tensor_memory(t, entry, storages)
        if checkpoint is not None:
            entry["checkpoint"] = checkpoint
        out.append(entry)
    return out


_custom_by_type: dict[type, bool] = {}


def is_custom(fn: Any) -> bool:
    """A custom ``autograd.Function``'s node: its ctx can keep tensors on attributes, and its backward is
    the user's code (it may write a gradient it received in place)."""
    kind = type(fn)
    custom = _custom_by_type.get(kind)
    if custom is None:
        custom = _custom_by_type[kind] = isinstance(fn, torch.autograd.function.BackwardCFunction)
    return custom


def _ctx_entries(fn: Any, raw: RawNode, storages: Storages, checkpoints: Checkpoints) -> None:
    """A custom Function's ctx attributes holding tensors (``ctx.fwd_cpu_state`` of a reentrant
    checkpoint, ``ctx.x = x`` in user code): alive as long as the node. A reentrant checkpoint's node
    gets a checkpoint index, on its saved inputs too."""
    seen: set[int] = set()
    held = [h for attr, value in vars(fn).items() for h in tensors_held(value, f"ctx.{attr}", seen=seen)]
    if raw.op == "CheckpointFunctionBackward":
        index = checkpoints.new()
        for entry in raw.saved:
            entry["checkpoint"] = index
        raw.saved += _held_entries(held, storages, "ctx", index)
    elif held:
        raw.saved += _held_entries(held, storages, "ctx", None)


def _frame_entries(nodes: list[RawNode], checkpoints: Checkpoints, storages: Storages) -> None:
    """What each non-reentrant checkpoint frame holds (the block's inputs, the forward RNG state,
    keyword arguments, ...), listed on the frame's first node (lowest sequence number): the frame lives
    until the last of its packed tensors is freed, when backward reaches that node."""
    first: dict[int, RawNode] = {}
    for r in nodes:
        for entry in r.saved:
            k = entry.get("checkpoint")
            if k is not None and entry.get("packed") and (k not in first or r.seq < first[k].seq):
                first[k] = r
    for k, r in first.items():
        frame = checkpoints.frames[k]
        if frame is None:
            continue
        seen: set[int] = set()  # names read "checkpoint.inputs[0]", "checkpoint.fwd_cpu_state", ...
        held = tensors_held(list(frame.saved_args), "checkpoint.inputs", seen=seen)
        for var in frame.recompute_fn.__code__.co_freevars:
            held += tensors_held(_closure_value(frame.recompute_fn, var), f"checkpoint.{var}", seen=seen)
        r.saved += _held_entries(held, storages, "frame", k)


def _is_parameter(t: torch.Tensor) -> bool:
    """A parameter (frozen or not), a leaf that requires grad, or a view of one (``weight.t()``):
    memory the model or the caller holds anyway, not activations kept for backward."""
    base = t._base if t._base is not None else t
    return isinstance(base, torch.nn.Parameter) or bool(base.is_leaf and base.requires_grad)


# -- freeing deep graphs ---------------------------------------------------------------------------
# Reading a node from Python (``grad_fn``, ``next_functions``) gives it a Python wrapper, and from torch
# 2.13 on (autograd nodes became ``intrusive_ptr`` with PyObject preservation) the node keeps that
# wrapper alive for as long as C++ still references the node. When the node's last C++ reference goes,
# the wrapper is deallocated and deletes the node from inside its ``tp_dealloc``, which does not use
# torch's iterative node deleter: freeing a chain of wrapped nodes recurses once per node. Any walk of a
# graph a hundred thousand nodes deep thus makes ``del loss`` overflow the C stack (SIGSEGV), even
# though nothing is attached to the nodes. Here every path of wrapped nodes gets an *anchor* at least
# every ``ANCHOR_EVERY`` nodes: an extra Python reference to one node's wrapper. When the user frees the
# graph, the cascade stops at the anchors (bounded depth); ``release_anchors`` (run after every garbage
# collection and on every walk) then drops each anchor nobody else holds, one at a time, each freeing a
# bounded piece. Graphs with no path that long get no anchor and free exactly as before.
ANCHOR_EVERY = 512
_anchors: list[Any] = []  # node wrappers in walk order; None once released
_releasing = False


def _refs_of_slot(items: list[Any], i: int) -> int:
    item = items[i]
    return sys.getrefcount(item)  # the list slot, ``item``, the argument, plus any holder elsewhere


_probe = [object()]
_UNHELD = _refs_of_slot(_probe, 0)  # what an item held by the list alone shows (interpreter-dependent)
del _probe


def anchor(fns: list[Any], producers: list[list[int]], seqs: list[int] | None = None) -> int:
    """Anchor nodes of a walked graph so freeing it never recurses deeper than ``ANCHOR_EVERY``.

    ``fns[k]`` is a walked node (its Python wrapper), ``producers[k]`` the indices of the nodes its
    inputs come from. Nodes are visited producers first; a node is anchored when the longest chain of
    unanchored nodes below it reaches ``ANCHOR_EVERY``. ``seqs`` (autograd sequence numbers) give that
    order by one sort when they are one (a node is made after its inputs' nodes), else Kahn's order is
    used; both anchor the same nodes. Returns how many were anchored.
    """
    n = len(fns)
    if n < ANCHOR_EVERY:
        return 0
    release_anchors()
    order = _seq_order(producers, seqs) if seqs is not None else None
    if order is None:
        order = _kahn_order(producers)
    chain = [0] * n
    count = 0
    for k in order:
        below = 0
        for p in producers[k]:
            if p >= 0 and chain[p] > below:
                below = chain[p]
        if below + 1 >= ANCHOR_EVERY:
            _anchors.append(fns[k])
            count += 1
            below = -1
        chain[k] = below + 1
    return count


def _seq_order(producers: list[list[int]], seqs: list[int]) -> list[int] | None:
    """Nodes by sequence number, input-less nodes (leaves' AccumulateGrad) first; None unless every node
    comes after its producers (graphs built on several threads number nodes per thread)."""
    order = sorted(range(len(producers)), key=lambda k: seqs[k] if producers[k] else -1)
    done = [False] * len(producers)
    for k in order:
        for p in producers[k]:
            if p >= 0 and not done[p]:
                return None
        done[k] = True
    return order


def _kahn_order(producers: list[list[int]]) -> list[int]:
    n = len(producers)
    pending = [0] * n
    consumers: list[list[int]] = [[] for _ in range(n)]
    for k, ps in enumerate(producers):
        distinct = set(ps)
        distinct.discard(-1)
        pending[k] = len(distinct)
        for p in distinct:
            consumers[p].append(k)
    ready = [k for k in range(n) if not pending[k]]
    order = []
    while ready:
        k = ready.pop()
        order.append(k)
        for c in consumers[k]:
            pending[c] -= 1
            if not pending[c]:
                ready.append(c)
    return order


def release_anchors(*_: Any) -> None:
    """Drop the anchors of graphs the user has freed (no other reference to the node is left), each
    freeing the nodes down to the next anchors; repeated until nothing more can go. Also a ``gc``
    callback."""
    global _releasing
    if _releasing or not _anchors:
        return
    _releasing = True
    try:
        progress = True
        while progress:
            progress = False
            for i in range(len(_anchors)):
                if _anchors[i] is not None and _refs_of_slot(_anchors, i) <= _UNHELD:
                    _anchors[i] = None  # frees this node and the unanchored nodes below it
                    progress = True
        _anchors[:] = [a for a in _anchors if a is not None]
    finally:
        _releasing = False


def anchored() -> int:
    """How many anchors are held (for tests)."""
    return sum(a is not None for a in _anchors)


gc.callbacks.append(release_anchors)


def walk(root_fns: list[Any], storages: Storages | None = None) -> tuple[list[RawNode], dict[Any, int]]:
    """Visit every node reachable from ``root_fns`` (grad_fn objects); returns nodes in visit order.

    The second value maps each visited autograd Node to its key; callers must drop it (it pins the
    graph's saved activations). ``storages``: filled with every saved tensor's storage (its key, as
    :func:`storage_key` computes it) -> (the ``storage`` index in the saved entries, param, bytes).
    """
    release_anchors()
    order, nexts, keys = _reach(root_fns)
    nodes: list[RawNode] = []
    storages = {} if storages is None else storages
    checkpoints = Checkpoints()
    for key, (fn, nf) in enumerate(zip(order, nexts, strict=True)):
        op = op_name(fn)
        raw = RawNode(key, op, fn._sequence_nr(), _outputs_of(fn),  # positional: a third quicker per node
                      [(keys[n], nr) if n is not None else (-1, nr) for n, nr in nf], None,
                      _saved_of(fn, op, storages, checkpoints))
        if op == "AccumulateGrad":
            raw.leaf = fn.variable
        elif is_custom(fn):
            _ctx_entries(fn, raw, storages, checkpoints)
        nodes.append(raw)
    anchor(order, [[p for p, _ in r.inputs] for r in nodes], [r.seq for r in nodes])
    if checkpoints.count:
        _frame_entries(nodes, checkpoints, storages)
    return nodes, keys


def _reach(root_fns: list[Any]) -> tuple[list[Any], list[Any], dict[Any, int]]:
    """Every node reachable from ``root_fns`` in visit order, each node's ``next_functions`` (read once:
    it builds a fresh tuple per call) and node -> position."""
    keys: dict[Any, int] = {}
    stack = [fn for fn in root_fns if fn is not None]
    for fn in stack:
        if fn not in keys:
            keys[fn] = -1
    order: list[Any] = []
    nexts: list[Any] = []
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
    return order, nexts, keys


def reachable(root_fns: list[Any]) -> list[tuple[Any, tuple[Any, ...]]]:
    """Every node reachable from ``root_fns`` with its ``next_functions``, nothing copied out: for a pass
    that only hooks the nodes (the armed backward check costs a twentieth of :func:`walk`). Anchored like
    :func:`walk`. The caller must drop the list: it pins the graph."""
    release_anchors()
    order, nexts, keys = _reach(root_fns)
    if len(order) >= ANCHOR_EVERY:
        producers = [[keys[n] for n, _ in nf if n is not None] for nf in nexts]
        anchor(order, producers, [int(fn._sequence_nr()) for fn in order])
    return list(zip(order, nexts, strict=True))

"""Memory held for backward, and what checkpointing costs in recomputation, from trace-time metadata.

The trace reads each saved tensor's raw handle (``SavedTensor.data``: no unpack, no recomputation) for
its size and its storage, so tensors sharing memory (``x * x``, q/k/v views of one projection, an
op's output saved again by the next op) are counted once. Each storage is charged to the earliest node
that saved it (it stays alive until backward frees that node, the last of its holders to run).
Parameters saved by an op (a Linear's weight) are held by the model anyway: reported apart.

Checkpointing: a non-reentrant checkpoint's nodes hold packed handles instead of tensors (``packed``),
recomputed in backward; the checkpoint's frame keeps the block's inputs and its forward RNG state alive
instead. The trace lists those on the frame's first node (``via: "frame"``); a reentrant checkpoint's
``CheckpointFunctionBackward`` saves its inputs and keeps the RNG state on its ctx (``via: "ctx"``).
Both are counted like any saved tensor. The recompute cost is the forward ops the backward re-runs: a
non-reentrant checkpoint re-runs its block up to the last op that saved a tensor (PyTorch stops there);
FLOPs are estimated from shapes for matmul-like ops. Pure graph data, no torch (a tensor given instead
of a graph is traced first).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.calltree import CallTree
from gradviz_nb.tracing.graph import AutogradGraph

OVERLAY_TITLE = "saved for backward"


@dataclass(frozen=True)
class Holder:
    """One row of the top-holders table: a node and the activation bytes charged to it."""

    node: str
    op: str
    call: str
    bytes: int
    tensors: list[str]  # names of its saved tensors, e.g. ["self", "mat2"]


@dataclass(frozen=True)
class MemoryReport:
    """Answer of :func:`memory_held`.

    ``per_node``: node id -> activation bytes charged to it (unique storages, parameters excluded).
    ``per_call``: module call id -> total of the nodes inside it (recursively); ``""`` is the whole graph.
    ``activations`` / ``parameters``: unique bytes of saved activations / of saved parameters;
    ``total`` both. ``packed``: nodes whose saved tensors a hook holds instead (checkpointed).
    ``unknown``: nodes with a saved slot holding no tensor (an unused optional input).

    Checkpointing: ``checkpoints``: checkpointed calls seen; ``checkpoint_bytes``: unique bytes their
    frames / ctx keep alive (inputs, RNG state; part of ``activations``). Recompute cost:
    ``forward_ops`` op nodes in the graph, ``recomputed_ops`` of them backward creates again (non-reentrant
    checkpoints re-run their block up to the op that saved the last tensor); ``forward_flops`` /
    ``recomputed_flops`` estimated from shapes of matmul-like ops (mm, addmm, bmm, baddbmm, mv, dot,
    linear, convolution, attention; that last op is not computed again when it saved only its inputs,
    so its FLOPs are left out); :attr:`recompute_share` and :attr:`share_basis` say which.
    ``opaque``: reentrant ``CheckpointFunctionBackward`` nodes, whose wrapped calls backward re-runs in
    full but whose ops ran under no_grad and are not in the graph (their cost is not in these figures).
    """

    per_node: dict[str, int]
    per_call: dict[str, int]
    activations: int
    parameters: int
    packed: list[str]
    unknown: list[str]
    checkpoints: int
    checkpoint_bytes: int
    forward_ops: int
    recomputed_ops: int
    forward_flops: int
    recomputed_flops: int
    opaque: list[str]
    _graph: AutogradGraph = field(repr=False, compare=False)

    @property
    def total(self) -> int:
        """Bytes held for backward in all: activations plus parameters."""
        return self.activations + self.parameters

    @property
    def share_basis(self) -> str:
        """``"FLOPs"`` when the graph has matmul-like ops to estimate FLOPs from, else ``"ops"``."""
        return "FLOPs" if self.forward_flops > 0 else "ops"

    @property
    def recompute_share(self) -> float:
        """Share of the forward that backward recomputes: of estimated FLOPs, else of op count."""
        if self.forward_flops > 0:
            return self.recomputed_flops / self.forward_flops
        return self.recomputed_ops / self.forward_ops if self.forward_ops else 0.0

    def top(self, k: int = 10) -> list[Holder]:
        """The ``k`` nodes holding the most activation bytes, largest first."""
        g = self._graph.nx
        ranked = sorted(self.per_node.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [
            Holder(n, g.nodes[n]["op"], g.nodes[n]["call"], b, [s["name"] for s in g.nodes[n]["saved"]])
            for n, b in ranked
            if b > 0
        ]

    def table(self, k: int = 10) -> str:
        """A plain-text table of the top holders and the totals."""
        top = self.top(k)
        w_op = max([len("op"), *(len(h.op) for h in top)])
        w_call = max([len("(top level)"), *(len(h.call) for h in top)])
        rule = "-" * (10 + w_op + w_call + 24)
        rows = [f"{'bytes':>10}  {'op':<{w_op}}  {'module call':<{w_call}}  saved", rule]
        rows += [
            f"{format_bytes(h.bytes):>10}  {h.op:<{w_op}}  {h.call or '(top level)':<{w_call}}  {', '.join(h.tensors)}"
            for h in top
        ]
        return "\n".join([*rows, rule, self.summary()])

    def summary(self) -> str:
        """What is held for backward, as text: activations, the parameters beside them, what checkpoints keep."""
        text = (
            f"saved for backward: {format_bytes(self.activations)} of activations"
            f" (+ {format_bytes(self.parameters)} of parameters the model holds anyway)"
        )
        if self.checkpoints:
            text += (f"; {self.checkpoints} checkpoints hold {format_bytes(self.checkpoint_bytes)} of it"
                     " (inputs and RNG states kept for recomputation)")
        if self.packed:
            text += f"; {len(self.packed)} nodes hold packed (checkpointed) tensors, recomputed in backward"
        return text + "\n" + self.compute_summary()

    def compute_summary(self) -> str:
        """The compute half: how much of the forward the backward re-runs."""
        basis = ("FLOPs, estimated from matmul/conv/attention shapes" if self.share_basis == "FLOPs"
                 else "ops: no matmul-like op to estimate FLOPs from")
        if self.recomputed_ops:
            text = (f"recompute: backward re-runs {self.recomputed_ops} of {self.forward_ops} forward ops"
                    f" ({self.recompute_share:.0%} of forward {basis})")
        else:
            text = f"recompute: backward re-runs none of the {self.forward_ops} forward ops in the graph"
        if self.opaque:
            calls = sorted({self._graph.nx.nodes[n]["call"] or n for n in self.opaque}, key=_natural)
            text += (f"; it also re-runs {len(self.opaque)} reentrant checkpointed calls in full"
                     f" ({', '.join(calls[:3])}{', ...' if len(calls) > 3 else ''}), whose ops ran under"
                     " no_grad and are not in the graph: their cost is not counted here"
                     " (trace with use_reentrant=False to count it)")
        return text

    @property
    def graph(self) -> AutogradGraph:
        """The graph this report measured."""
        return self._graph

    def __repr__(self) -> str:
        return f"<MemoryReport {self.summary().splitlines()[0]}>"


def memory_held(graph: AutogradGraph | Any) -> MemoryReport:
    """Bytes each node keeps alive for backward, per node and per module call, and the forward ops
    backward recomputes (checkpointing's compute cost).

    ``graph`` is an :class:`AutogradGraph`; a loss tensor (or a list of them) is traced first with
    :func:`gv.trace` (module boxes then come from :func:`gv.watch`, if any). Trace before
    ``backward()``: after it, PyTorch has freed what was held and this raises :class:`GradvizError`.

    Example::

        mem = gv.memory_held(g)
        print(mem.table(5))
        mem.recomputed_ops, mem.recompute_share   # what checkpointing costs
        widget.overlay = mem        # drawn over the graph (GraphWidget converts it)
    """
    graph = _as_graph(graph)
    g = graph.nx
    seen = _scan_saved(g)
    owner, freed, spans = seen.owner, seen.freed, seen.spans
    if freed:
        raise GradvizError(
            f"memory_held: this graph was traced after backward() freed its saved tensors ({len(set(freed))} "
            "nodes have freed slots), so what it held for backward can no longer be read and would show as "
            "0 B. Trace before calling backward: `g = gv.trace(loss)` then `loss.backward()`, or keep the "
            "saved tensors with `loss.backward(retain_graph=True)`."
        )
    per_node = {n: 0 for n, k in g.nodes(data="kind") if k == "op"}
    params = 0
    for _, n, nbytes, is_param in owner.values():
        if is_param:
            params += nbytes
        else:
            per_node[n] += nbytes
    ops = [(n, d) for n, d in g.nodes(data=True) if d["kind"] == "op"]
    flops = {n: _flops(g, n, d) for n, d in ops}
    recomputed = [n for n, d in ops if any(lo <= d["seq"] <= hi for lo, hi in spans.values())]
    # PyTorch stops recomputing when the last tensor is packed; an op saving only its inputs packs them
    # before its kernel runs, so the last op of a checkpoint is then re-created but not computed.
    last = {hi for _, hi in spans.values()}
    skipped = {n for n in recomputed if g.nodes[n]["seq"] in last and not _saves_output(g.nodes[n])}
    return MemoryReport(
        per_node=per_node,
        per_call=_per_call(graph, per_node),
        activations=sum(per_node.values()),
        parameters=params,
        packed=sorted(set(seen.packed)),
        unknown=sorted(set(seen.unknown)),
        checkpoints=len(seen.checkpoints),
        checkpoint_bytes=sum(b for s, (_, _, b, p) in owner.items() if s in seen.checkpoint_storages and not p),
        forward_ops=len(ops),
        recomputed_ops=len(recomputed),
        forward_flops=sum(flops.values()),
        recomputed_flops=sum(flops[n] for n in recomputed if n not in skipped),
        opaque=sorted(seen.opaque),
        _graph=graph,
    )


OPAQUE_CHECKPOINT = "CheckpointFunctionBackward"


@dataclass
class _Saved:
    """What the saved-tensor records of a graph say, read in one pass (:func:`_scan_saved`)."""

    owner: dict[int, tuple[int, str, int, bool]] = field(default_factory=dict)  # storage -> (seq, node, bytes, param)
    packed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    freed: list[str] = field(default_factory=list)
    checkpoint_storages: set[int] = field(default_factory=set)
    checkpoints: set[int] = field(default_factory=set)
    opaque: list[str] = field(default_factory=list)
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # checkpoint -> (first, last) packing seq


def _scan_saved(g: Any) -> _Saved:
    """Each storage's first holder (storage shared = counted once), packed / freed / unknown slots, and the
    sequence-number span of each non-reentrant checkpoint's packing nodes."""
    out = _Saved()
    owner, spans = out.owner, out.spans
    for n, d in g.nodes(data=True):
        if d.get("op") == OPAQUE_CHECKPOINT:
            out.opaque.append(n)
        for s in d.get("saved", []):
            k = s.get("checkpoint")
            if k is not None:
                out.checkpoints.add(k)
            if s.get("packed"):
                out.packed.append(n)
                if k is not None:
                    lo, hi = spans.get(k, (d["seq"], d["seq"]))
                    spans[k] = (min(lo, d["seq"]), max(hi, d["seq"]))
            elif s.get("freed"):
                out.freed.append(n)
            elif s.get("bytes") is None:
                out.unknown.append(n)
            elif s.get("storage") is not None:
                held = owner.get(s["storage"])
                if held is None or d["seq"] < held[0]:
                    owner[s["storage"]] = (d["seq"], n, int(s["storage_bytes"]), bool(s.get("param")))
                if k is not None:
                    out.checkpoint_storages.add(s["storage"])
    return out


def _saves_output(d: dict[str, Any]) -> bool:
    """Does the op save one of its outputs (packed after its kernel ran)? PyTorch names saved outputs
    ``result``/``resultN`` or after the op's named returns (attention's ``output``, ``logsumexp``)."""
    return any(s["name"].startswith("result") or s["name"] in _NAMED_OUTPUTS for s in d.get("saved", []))


_NAMED_OUTPUTS = frozenset({"output", "out", "logsumexp", "softmax_lse", "philox_seed", "philox_offset"})


def _as_graph(graph: Any) -> AutogradGraph:
    if isinstance(graph, AutogradGraph):
        return graph
    import torch  # only for a tensor given instead of a graph

    from gradviz_nb.tracing.trace import trace

    if isinstance(graph, torch.Tensor) or (
        isinstance(graph, (list, tuple)) and graph and all(isinstance(t, torch.Tensor) for t in graph)
    ):
        return trace(graph)
    raise GradvizError(
        f"memory_held expects the graph from gv.trace (or the loss tensor), got {type(graph).__name__}: "
        "call gv.memory_held(gv.trace(loss)) before loss.backward()."
    )


_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")
Shape = list[int] | None


def _input_shapes(g: nx.DiGraph, n: str) -> dict[int, list[int]]:
    """Shape of each input (by input_nr) that came from a node of the graph (edge shapes)."""
    shapes = {}
    for _, _, e in g.in_edges(n, data=True):
        if e.get("shape") is None:
            continue
        for output_nr, input_nr in e["slots"]:
            if output_nr == e["output_nr"]:
                shapes[input_nr] = e["shape"]
    return shapes


def _dim(candidates: list[tuple[Shape, int]]) -> int:
    """The first known dimension among ``(shape, axis)`` candidates, else 0."""
    for shape, axis in candidates:
        if shape and len(shape) >= (axis + 1 if axis >= 0 else -axis):
            return int(shape[axis])
    return 0


def _flops(g: nx.DiGraph, n: str, d: dict[str, Any]) -> int:
    """Forward FLOPs (2 per multiply-add) of a matmul-like op, from the shapes the trace kept (input edges,
    else saved-tensor shapes); 0 for other ops (elementwise, norms, views: cheap next to these) or when a
    needed shape is unknown."""
    op = _BACKWARD_SUFFIX.sub("", d["op"])
    kind = _MATMUL.get(op) or next((v for k, v in _FAMILIES.items() if k in op), None)
    out: Shape = d.get("shape")
    if kind is None or out is None:
        return 0
    ins = _input_shapes(g, n)
    saved: dict[str, Shape] = {s["name"]: s.get("shape") for s in d.get("saved", [])}

    def operand(i: int) -> Shape:  # input i's shape, from its edge or from what the op saved of it
        return ins.get(kind[i][0]) or saved.get(kind[i][1])

    numel = math.prod(out)
    if op in _MATMUL:  # k: the left operand's last dimension, or the right operand's first contracted one
        left, right = operand(0), operand(1)
        axis = -1 if op in ("Mv", "Dot") else -2
        k = left[-1] if left else right[axis] if right and len(right) >= -axis else 0
        return 2 * numel * k
    if kind is _FAMILIES["Linear"]:  # weight (out, in)
        weight = operand(1)
        return 2 * numel * weight[-1] if weight else 0
    if kind is _FAMILIES["Conv"]:  # weight (C_out, C_in / groups, *kernel): per output C_in/groups x kernel
        weight = operand(1)
        return 2 * numel * math.prod(weight[1:]) if weight and len(weight) > 2 else 0
    q, k_, v = operand(0), operand(1), operand(2)  # attention: q (..., L, E), k (..., S, E), v (..., S, Ev)
    if q and k_ and v and len(q) >= 2 and len(k_) >= 2:  # QK^T then AV; a causal mask is not discounted
        return 2 * math.prod(q[:-1]) * k_[-2] * (q[-1] + v[-1])
    return 0


# op -> (input_nr, saved name) per operand. Matmuls: k is the left operand's last dimension.
_MATMUL: dict[str, tuple[tuple[int, str], ...]] = {
    "Mm": ((0, "self"), (1, "mat2")),
    "Addmm": ((1, "mat1"), (2, "mat2")),
    "Bmm": ((0, "self"), (1, "mat2")),
    "Baddbmm": ((1, "batch1"), (2, "batch2")),
    "Addbmm": ((1, "batch1"), (2, "batch2")),
    "Mv": ((0, "self"), (1, "vec")),
    "Dot": ((0, "self"), (1, "tensor")),
}
# ops named after a family (ConvolutionBackward0, MkldnnConvolutionBackward0, LinearBackward0,
# ScaledDotProductFlashAttentionForCpuBackward0, EfficientAttentionBackward0, ...)
_FAMILIES: dict[str, tuple[tuple[int, str], ...]] = {
    "Linear": ((0, "self"), (1, "weight")),
    "Conv": ((0, "input"), (1, "weight")),
    "Attention": ((0, "query"), (1, "key"), (2, "value")),
}


def _per_call(graph: AutogradGraph, per_node: dict[str, int]) -> dict[str, int]:
    tree = CallTree(graph.calls)
    totals = dict.fromkeys(["", *tree.parent], 0)
    for n, b in per_node.items():
        totals[""] += b
        for call in tree.chain(graph.nx.nodes[n]["call"]):
            totals[call] += b
    return totals


def _natural(text: str) -> list[Any]:
    """Sort key: ``blocks.2`` before ``blocks.10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")

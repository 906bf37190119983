"""Checkpointing what-if: memory against recompute for chosen module calls, predicted from one trace.

Given a graph traced *without* checkpointing (under ``gv.capture``, so module calls exist) and marks
``{call id: "non_reentrant" | "reentrant"}``, it answers what ``torch.utils.checkpoint.checkpoint`` around
those calls would do, as PyTorch behaves:

* Memory. A checkpointed call's ops save nothing for backward (non-reentrant: a hook packs a handle
  instead; reentrant: its forward runs under no_grad). The checkpoint keeps the call's tensor inputs
  (``_NoopSaveInputs`` / ``ctx.save_for_backward``) and the CPU RNG state (``RNG_BYTES``: the size of
  ``torch.get_rng_state()``). Every other saved tensor stays, storages counted once, charged to their
  earliest holder as :func:`gv.memory_held` does; parameters are held by the model anyway (left out).
  A call's inputs are the tensors its ops receive from ops outside it (edges); each is matched to the
  storage a member op saved of it (same shape and dtype, not an output), else counted at its own size.
  An input that does not require grad and that no op saved leaves no trace in the graph: not counted.
* Recompute. Non-reentrant: backward re-runs the call up to the last op that saved a tensor (PyTorch
  stops there; that op's kernel is skipped when it saved only inputs), as ``memory_held`` counts it on a
  checkpointed trace. Reentrant: the whole call. Share of estimated FLOPs (else of ops).
* Lost gradients. A reentrant checkpoint whose tensor inputs none requires grad returns outputs with no
  grad_fn: everything inside (a LoRA adapter behind a frozen embedding) gets no ``.grad``. Calls are
  taken in forward order, so a block cut off this way cuts the next one's input too. Such a checkpoint
  keeps nothing (no node holds its ctx) and is never recomputed; ops left with no input that requires
  grad are not recorded, so what they saved goes too.

Marks inside another marked call are ignored (the outer checkpoint packs the inner one). The rule works
on :func:`table` (plain JSON: what the page gets) and is mirrored by ``js/src/features/checkpoint/state.ts``;
``tests/unit/test_checkpointing_agreement.py`` proves the two equal. Pure data, no torch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import networkx as nx

from gradviz_nb import schema
from gradviz_nb.analysis.memory import _flops, _saves_output, format_bytes
from gradviz_nb.analysis.what_if import what_if
from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.calltree import CallTree
from gradviz_nb.tracing.graph import AutogradGraph

Mode = Literal["non_reentrant", "reentrant"]
MODES: tuple[Mode, ...] = ("non_reentrant", "reentrant")
RNG_BYTES = 5056  # torch.get_rng_state() on CPU: the Mersenne Twister state as a uint8 tensor
_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


class CheckpointOp(TypedDict):
    """One op node: its call, order, estimated FLOPs and the activation storages it saved."""

    id: str
    call: str
    seq: int
    flops: int
    saved: list[int]  # storage indices into CheckpointTable.storages (parameters left out)
    packs: bool  # saved anything (a checkpoint hook would pack it)
    saves_output: bool


class CheckpointInput(TypedDict):
    """The tensors a call's ops receive from ops outside it."""

    call: str
    storages: list[int]
    producers: list[str]  # nodes outside the call that make them (requires grad exactly when one exists)


class CheckpointTable(TypedDict):
    """What the rule needs of a graph, as the page gets it (trait ``checkpoint_table``)."""

    rng_bytes: int
    storages: list[int]  # bytes of each storage
    ops: list[CheckpointOp]
    inputs: list[CheckpointInput]


@dataclass(frozen=True)
class CheckpointPlan:
    """Answer of :func:`checkpoint_what_if`. Bytes are activations saved for backward (parameters apart).

    ``per_call_before`` / ``per_call_after``: call id -> bytes held inside it (``""``: the whole graph);
    ``kept``: bytes the checkpoints themselves keep (inputs, RNG states); ``recomputed_ops`` of
    ``forward_ops`` and their estimated FLOPs; ``lost``: leaf ids that lose their gradient, ``lost_names``
    their names, ``cut``: the reentrant calls that cause it; ``ignored``: marks inside a marked call.
    """

    marks: dict[str, Mode]
    before: int
    after: int
    per_call_before: dict[str, int]
    per_call_after: dict[str, int]
    kept: int
    forward_ops: int
    recomputed_ops: int
    forward_flops: int
    recomputed_flops: int
    lost: list[str]
    lost_names: list[str]
    cut: list[str]
    ignored: list[str]

    @property
    def share(self) -> float:
        """Share of the forward backward re-runs: of estimated FLOPs, else of ops."""
        if self.forward_flops:
            return self.recomputed_flops / self.forward_flops
        return self.recomputed_ops / self.forward_ops if self.forward_ops else 0.0

    def summary(self) -> str:
        saved = self.before - self.after
        basis = "estimated FLOPs" if self.forward_flops else "ops"
        text = (f"saved for backward: {format_bytes(self.before)} -> {format_bytes(self.after)}"
                f" ({format_bytes(saved)} less; checkpoints keep {format_bytes(self.kept)} of inputs and RNG"
                f" states); backward re-runs {self.recomputed_ops} of {self.forward_ops} forward ops"
                f" ({self.share:.0%} of forward {basis})")
        if self.lost_names:
            shown = ", ".join(self.lost_names[:4]) + (", ..." if len(self.lost_names) > 4 else "")
            text += (f"; {len(self.lost_names)} leaves lose their gradient ({shown}): reentrant checkpoint of"
                     f" {', '.join(self.cut)} has no input that requires grad")
        return text

    def __repr__(self) -> str:
        return f"<CheckpointPlan {self.summary()}>"

    def to_json(self, indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``checkpoint_plan`` type)."""
        return schema.dumps(schema.checkpoint_plan(self), indent)


def _itemsize(dtype: str) -> int:
    return _ITEMSIZE.get(dtype.removeprefix("torch."), 4)


def table(graph: AutogradGraph) -> CheckpointTable:
    """The facts the rule reads, from the trace's saved-tensor records and module calls (plain JSON)."""
    g = graph.nx
    index: dict[Any, int] = {}
    sizes: list[int] = []

    def storage(key: Any, nbytes: int) -> int:
        if key not in index:
            index[key] = len(sizes)
            sizes.append(nbytes)
        return index[key]

    ops: list[CheckpointOp] = []
    for n, d in g.nodes(data=True):
        if d["kind"] != "op":
            continue
        saved = [storage(s["storage"], int(s["storage_bytes"])) for s in d.get("saved", [])
                 if s.get("storage") is not None and not s.get("param") and not s.get("packed")]
        ops.append({"id": n, "call": d["call"], "seq": int(d["seq"]), "flops": _flops(g, n, d),
                    "saved": sorted(set(saved)), "packs": bool(d.get("saved")), "saves_output": _saves_output(d)})
    inputs = _inputs(graph, storage)
    return {"rng_bytes": RNG_BYTES, "storages": sizes, "ops": ops, "inputs": inputs}


def _inputs(graph: AutogradGraph, storage: Any) -> list[CheckpointInput]:
    """Per call, the tensors its ops receive from outside it, in one pass over the edges: an edge enters
    every call around its consumer that is not around its producer."""
    g, tree = graph.nx, CallTree(graph.calls)
    paths = {c["id"]: c["path"] for c in graph.calls}
    consumers: dict[tuple[str, str, int], list[str]] = {}  # (call, producer, output_nr) -> member consumers
    for u, v, e in g.edges(data=True):
        du, dv = g.nodes[u], g.nodes[v]
        if dv["kind"] != "op":
            continue
        around_u = set(tree.chain(du["call"])) if du["kind"] == "op" else set()
        for call in tree.chain(dv["call"]):
            if call in around_u:
                break
            if du["kind"] == "leaf" and any(name.startswith(paths[call] + ".") for name in du["names"]):
                continue  # the call's own parameter, not an input
            for out in sorted({o for o, _ in e["slots"]}):
                consumers.setdefault((call, u, out), []).append(v)
    found: dict[str, CheckpointInput] = {c["id"]: {"call": c["id"], "storages": [], "producers": []}
                                         for c in graph.calls}
    for (call, u, out), used_by in sorted(consumers.items(), key=lambda kv: kv[0]):
        record, d = found[call], g.nodes[u]
        if u not in record["producers"]:
            record["producers"].append(u)
        if d["kind"] == "leaf" and d["names"]:
            continue  # a parameter passed in: held by the model anyway
        shape = next((g.edges[u, v].get("shape") for v in used_by), None)
        inside = functools.partial(_inside_call, g, tree, call)
        match = _saved_as_input(g, sorted(set(used_by), key=lambda n: g.nodes[n]["seq"]), shape, d["dtype"], inside)
        if match is not None:
            record["storages"].append(storage(match[0], match[1]))
        elif shape is not None:
            record["storages"].append(storage(("input", u, out), _itemsize(d["dtype"]) * _numel(shape)))
    for record in found.values():
        record["storages"] = sorted(set(record["storages"]))
    return [found[c["id"]] for c in graph.calls]


def _numel(shape: list[int]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def _inside_call(g: nx.DiGraph, tree: CallTree, call: str, n: str) -> bool:
    return g.nodes[n]["kind"] == "op" and tree.inside(g.nodes[n]["call"], {call})


VIEW_DEPTH = 4  # how far an input is followed through ops that save nothing (views, reshapes)


def _saved_as_input(g: nx.DiGraph, consumers: list[str], shape: Any, dtype: str,
                    inside: Callable[[str], bool]) -> tuple[Any, int] | None:
    """The storage a member op saved of an incoming tensor: an activation of its size and dtype that is not
    an output of the saving op, at its consumers or, through ops that save nothing (a Linear's input
    view), at theirs; the first in forward order."""
    if shape is None:
        return None
    numel, frontier, seen = _numel(shape), consumers, set(consumers)
    for _ in range(VIEW_DEPTH):
        following: list[str] = []
        for n in frontier:
            saved = g.nodes[n].get("saved", [])
            for s in saved:
                if (s.get("storage") is not None and not s.get("param") and s["shape"] is not None
                        and _numel(s["shape"]) == numel and s["dtype"] == dtype and not s["name"].startswith("result")):
                    return s["storage"], int(s["storage_bytes"])
            if not saved:
                following += [v for v in sorted(g.successors(n), key=lambda m: g.nodes[m]["seq"])
                              if v not in seen and inside(v)]
        seen.update(following)
        frontier = following
    return None


def outer_marks(calls: Sequence[Mapping[str, Any]], marks: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Marked calls that take effect (in forward order) and those inside another marked call (ignored)."""
    tree = CallTree(calls)
    chosen = [c["id"] for c in calls if marks.get(c["id"]) in MODES]
    outer = [c for c in chosen if not any(a in chosen for a in list(tree.chain(c))[1:])]
    return outer, [c for c in chosen if c not in outer]


def plan(data: CheckpointTable, calls: Sequence[Mapping[str, Any]], marks: Mapping[str, str],
         cuts: Sequence[str] = (), gone: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """The rule on a table: memory before/after and recompute (the page's twin: ``evaluate`` in
    ``js/src/features/checkpoint/state.ts``). ``cuts``: reentrant calls whose outputs have no grad_fn (their
    ctx is dropped: they keep nothing and nothing is recomputed); ``gone``: ops that no longer exist then."""
    tree = CallTree(calls)
    outer, ignored = outer_marks(calls, marks)
    outer_set = set(outer)
    box = {op["id"]: next((a for a in tree.chain(op["call"]) if a in outer_set), "") for op in data["ops"]}
    before = _charges(data, calls, {}, set())
    first_seq = {c: min((op["seq"] for op in data["ops"] if box[op["id"]] == c), default=0) for c in outer}
    inputs = {i["call"]: i["storages"] for i in data["inputs"]}
    extra = len(data["storages"])
    frames = {c: (first_seq[c], [*inputs.get(c, []), extra + k]) for k, c in enumerate(outer) if c not in cuts}
    after = _charges(data, calls, frames, {o for o, b in box.items() if b} | set(gone))
    kept_storages = {s for _, f in frames.values() for s in f}
    sizes = [*data["storages"], *([data["rng_bytes"]] * len(outer))]
    recomputed = _recomputed(data, box, {c: str(marks[c]) for c in outer if c not in cuts})
    return {
        "before": before[""], "after": after[""], "per_call_before": before, "per_call_after": after,
        "kept": sum(sizes[s] for s in kept_storages),
        "forward_ops": len(data["ops"]), "recomputed_ops": len(recomputed),
        "forward_flops": sum(op["flops"] for op in data["ops"]),
        "recomputed_flops": sum(f for f in recomputed.values()),
        "ignored": ignored, "outer": outer,
    }


def _charges(data: CheckpointTable, calls: Sequence[Mapping[str, Any]], frames: Mapping[str, tuple[float, list[int]]],
             dropped: set[str]) -> dict[str, int]:
    """Bytes per call: each storage charged once, to its earliest holder (an op, or a checkpoint, which
    holds its inputs from just before its first op)."""
    tree = CallTree(calls)
    sizes = [*data["storages"], *([data["rng_bytes"]] * (max((max(f) for _, f in frames.values()), default=-1)
                                                           + 1 - len(data["storages"])))]
    owner: dict[int, tuple[float, str]] = {}
    for op in data["ops"]:
        if op["id"] in dropped:
            continue
        for s in op["saved"]:
            if s not in owner or op["seq"] < owner[s][0]:
                owner[s] = (op["seq"], op["call"])
    for call, (seq, storages) in frames.items():
        for s in storages:
            if s not in owner or seq - 0.5 <= owner[s][0]:
                owner[s] = (seq - 0.5, call)
    totals = dict.fromkeys(["", *(c["id"] for c in calls)], 0)
    for s, (_, call) in owner.items():
        totals[""] += sizes[s]
        for c in tree.chain(call):
            totals[c] += sizes[s]
    return totals


def _recomputed(data: CheckpointTable, box: Mapping[str, str], outer: Mapping[str, str]) -> dict[str, int]:
    """Op id -> FLOPs counted, for the ops backward re-runs."""
    out: dict[str, int] = {}
    for c, mode in outer.items():
        ops = [op for op in data["ops"] if box[op["id"]] == c]
        if mode == "reentrant":
            out.update({op["id"]: op["flops"] for op in ops})
            continue
        packing = [op["seq"] for op in ops if op["packs"]]
        if not packing:
            continue
        lo, hi = min(packing), max(packing)
        for op in ops:
            if lo <= op["seq"] <= hi:
                skipped = op["seq"] == hi and not op["saves_output"]
                out[op["id"]] = 0 if skipped else op["flops"]
    return out


def reentrant_cuts(g: nx.DiGraph, data: CheckpointTable, outer: list[str], marks: Mapping[str, str]) -> list[str]:
    """Reentrant calls, in forward order, none of whose inputs still requires grad once the earlier cuts
    are made: no producer exists, or each sits inside a cut call (its output has no grad_fn)."""
    inputs = {i["call"]: i["producers"] for i in data["inputs"]}
    cuts: list[str] = []
    for c in outer:
        if marks[c] != "reentrant":
            continue
        alive, inside_cut = _existing(g, cuts)
        if not any(p in alive and p not in inside_cut for p in inputs.get(c, [])):
            cuts.append(c)
    return cuts


def _existing(g: nx.DiGraph, cuts: list[str]) -> tuple[set[str], set[str]]:
    """Nodes that still exist in a forward where the cut calls' outputs have no grad_fn, and the cut calls'
    member ops."""
    calls = g.graph.get("calls", [])
    tree = CallTree(calls)
    member = {n for n, d in g.nodes(data=True) if d["kind"] == "op" and cuts and tree.inside(d["call"], set(cuts))}
    cut_box = {n: next(a for a in tree.chain(g.nodes[n]["call"]) if a in cuts) for n in member}
    exists: set[str] = set()
    for n in nx.topological_sort(g):
        if g.nodes[n]["kind"] == "leaf":
            exists.add(n)
            continue
        for u in g.predecessors(n):
            crossing = u in member and (n not in member or cut_box[n] != cut_box[u])
            if u in exists and not crossing:
                exists.add(n)
                break
    return exists, member


def checkpoint_what_if(graph: AutogradGraph, marks: Mapping[str, str]) -> CheckpointPlan:
    """What checkpointing the marked module calls would save and cost, and which leaves would lose their
    gradient, predicted from a graph traced without checkpointing.

    Example::

        with gv.capture(model) as cap:
            loss = criterion(model(x), y)
        g = gv.trace(loss, model=model, capture=cap)
        p = gv.checkpoint_what_if(g, {"blocks.0": "non_reentrant", "blocks.2": "reentrant"})
        p.before, p.after, p.share, p.lost_names
    """
    if not isinstance(graph, AutogradGraph):
        raise GradvizError(f"checkpoint_what_if expects the graph from gv.trace, got {type(graph).__name__}.")
    clean = check_marks(graph, marks)
    data = table(graph)
    cuts = reentrant_cuts(graph.nx, data, outer_marks(graph.calls, clean)[0], clean)
    alive = _existing(graph.nx, cuts)[0] if cuts else None
    gone = {op["id"] for op in data["ops"] if alive is not None and op["id"] not in alive}
    got = plan(data, graph.calls, clean, cuts, gone)
    lost = what_if(graph.nx, detach=cuts) if cuts else None
    return CheckpointPlan(
        marks=clean, before=got["before"], after=got["after"], per_call_before=got["per_call_before"],
        per_call_after=got["per_call_after"], kept=got["kept"], forward_ops=got["forward_ops"],
        recomputed_ops=got["recomputed_ops"], forward_flops=got["forward_flops"],
        recomputed_flops=got["recomputed_flops"], lost=lost.lost_ids if lost else [],
        lost_names=lost.lost if lost else [], cut=cuts, ignored=got["ignored"],
    )


def check_marks(graph: AutogradGraph, marks: Any) -> dict[str, Mode]:
    """``marks`` as ``{call id: mode}``; refuses unknown calls and modes by name."""
    if not isinstance(marks, Mapping):
        raise GradvizError(f"checkpoint marks must be a dict {{call id: 'non_reentrant' | 'reentrant'}}, "
                           f"got {type(marks).__name__}.")
    ids = [c["id"] for c in graph.calls]
    out: dict[str, Mode] = {}
    for call, mode in marks.items():
        if call not in ids:
            shown = ", ".join(ids[:6]) + (", ..." if len(ids) > 6 else "")
            listed = shown or "none: trace under gv.capture"
            raise GradvizError(f"checkpoint marks: {call!r} is not a module call of this graph (calls: {listed}).")
        if mode not in MODES:
            raise GradvizError(f"checkpoint marks: {call!r} -> {mode!r}; a mode is 'non_reentrant' or 'reentrant'.")
        out[str(call)] = mode
    return out

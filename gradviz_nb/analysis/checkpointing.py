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
  A non-reentrant checkpoint that packed nothing is freed at once, inputs and RNG state with it.
* Nesting (PyTorch's "nestable checkpoint" rules). A checkpoint inside a non-reentrant one runs with grad
  in forward: it keeps its own RNG state, while its inputs are packed by the one around it (not memory).
  Inside a reentrant one it runs under no_grad in forward and keeps nothing until backward.
* Recompute. Non-reentrant: backward re-runs the call up to its last pack (PyTorch stops there; that op's
  kernel is skipped when it saved only inputs), as ``memory_held`` counts it on a checkpointed trace; a
  marked child's inputs are packed at the child's start (non-reentrant) or at its end, after its block ran
  under no_grad (reentrant). Reentrant: the whole call. A recompute creates the marked children's
  checkpoints again, and backward recomputes each child on its own too: a nested block runs once more per
  level, unless its parent's recompute stops before it. Share of estimated FLOPs (else of ops).
* Lost gradients. A reentrant checkpoint whose tensor inputs none requires grad returns outputs with no
  grad_fn: everything inside (a LoRA adapter behind a frozen embedding) gets no ``.grad``. Calls are
  taken in forward order, so a block cut off this way cuts the next one's input too; a nested reentrant
  mark is judged the same way. Such a checkpoint keeps nothing and is never recomputed, and marks inside it
  have no effect (``ignored``); ops left with no input that requires grad are not recorded, so what they
  saved goes too.
* Not exact (``inexact``): a checkpoint none of whose inputs requires grad. What it computes from them alone
  (frozen layers) is in no graph, yet its recompute runs it and a non-reentrant one keeps the input;
  ``verify_checkpoint`` measures both.

The rule works on :func:`table` (plain JSON: what the page gets) and is mirrored by
``js/src/features/checkpoint/state.ts``; ``tests/unit/test_checkpointing_agreement.py`` proves the two
equal, ``tests/unit/test_checkpointing_nested.py`` checks every nesting against PyTorch. Pure data, no torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import networkx as nx

from gradviz_nb import schema
from gradviz_nb.analysis.checkpoint_table import (
    RNG_BYTES,
    CheckpointInput,
    CheckpointOp,
    CheckpointTable,
    table,
)
from gradviz_nb.analysis.memory import format_bytes
from gradviz_nb.analysis.what_if import what_if
from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.calltree import CallTree
from gradviz_nb.tracing.graph import AutogradGraph

Mode = Literal["non_reentrant", "reentrant"]
MODES: tuple[Mode, ...] = ("non_reentrant", "reentrant")
__all__ = ["MODES", "RNG_BYTES", "CheckpointInput", "CheckpointOp", "CheckpointPlan", "CheckpointTable", "Mode",
           "check_marks", "checkpoint_what_if", "difference", "plan", "reentrant_cuts", "table"]
@dataclass(frozen=True)
class CheckpointPlan:
    """Answer of :func:`checkpoint_what_if`. Bytes are activations saved for backward (parameters apart).

    ``per_call_before`` / ``per_call_after``: call id -> bytes held inside it (``""``: the whole graph);
    ``kept``: bytes the checkpoints themselves keep (inputs, RNG states); ``recomputed_ops`` of
    ``forward_ops`` and their estimated FLOPs; ``lost``: names of the leaves that lose their gradient,
    ``lost_ids`` their node ids (as :class:`~gradviz_nb.analysis.what_if.WhatIf` names them), ``cut``: the
    reentrant calls that cause it; ``nested``: marks inside a marked call that
    take effect; ``ignored``: marks inside a cut reentrant call (its block never runs with grad: no effect);
    ``inexact``: why a part of this answer is not exact (empty: every number is), for verify to measure.
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
    lost_ids: list[str]
    cut: list[str]
    ignored: list[str]
    nested: list[str]
    inexact: list[str]

    @property
    def lost_names(self) -> list[str]:
        """Deprecated: :attr:`lost` holds the names now (and :attr:`lost_ids` the node ids), as ``WhatIf`` does."""
        warnings.warn("CheckpointPlan.lost_names is deprecated: use .lost (leaf names, as WhatIf.lost); "
                      ".lost_ids holds their node ids.", DeprecationWarning, stacklevel=2)
        return self.lost

    @property
    def share(self) -> float:
        """Share of the forward backward re-runs: of estimated FLOPs, else of ops."""
        if self.forward_flops:
            return self.recomputed_flops / self.forward_flops
        return self.recomputed_ops / self.forward_ops if self.forward_ops else 0.0

    def summary(self) -> str:
        """One line: bytes before -> after, what the checkpoints keep, the recompute, lost leaves."""
        basis = "estimated FLOPs" if self.forward_flops else "ops"
        text = (f"saved for backward: {format_bytes(self.before)} -> {format_bytes(self.after)}"
                f" ({difference(self.before, self.after)}; checkpoints keep {format_bytes(self.kept)} of inputs"
                f" and RNG states); backward re-runs {self.recomputed_ops} of {self.forward_ops} forward ops"
                f" ({self.share:.0%} of forward {basis})")
        if self.lost:
            shown = ", ".join(self.lost[:4]) + (", ..." if len(self.lost) > 4 else "")
            text += (f"; {len(self.lost)} leaves lose their gradient ({shown}): reentrant checkpoint of"
                     f" {', '.join(self.cut)} has no input that requires grad")
        if self.inexact:
            text += "; not exact: " + "; ".join(self.inexact) + " (verify_checkpoint() measures it)"
        return text

    def __repr__(self) -> str:
        return f"<CheckpointPlan {self.summary()}>"

    def to_json(self, indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``checkpoint_plan`` type)."""
        return schema.dumps(schema.checkpoint_plan(self), indent)


def difference(before: int, after: int) -> str:
    """"4.9 KiB less" or "4.9 KiB more" (checkpoints can keep more than the block saved), never a negative."""
    if after == before:
        return "no change"
    return f"{format_bytes(abs(before - after))} {'less' if after < before else 'more'}"


class _Marks:
    """The marked calls as PyTorch nests them: for each, its innermost marked ancestor, its marked children,
    and the ops it holds; ``cut`` reentrant calls run once under no_grad and never again."""

    def __init__(self, data: CheckpointTable, calls: Sequence[Mapping[str, Any]], marks: Mapping[str, str],
                 cut: Sequence[str], gone: frozenset[str] | set[str]) -> None:
        tree = CallTree(calls)
        self.mode = {c["id"]: str(marks[c["id"]]) for c in calls if marks.get(c["id"]) in MODES}
        chosen = set(self.mode)
        self.parent = {c: next((a for a in list(tree.chain(c))[1:] if a in chosen), "") for c in self.mode}
        self.children: dict[str, list[str]] = {c: [] for c in ["", *self.mode]}
        for c in self.mode:
            self.children[self.parent[c]].append(c)
        self.cut, self.gone = set(cut), gone
        self.ops: dict[str, list[CheckpointOp]] = {c: [] for c in self.mode}  # nested calls' ops included
        self.own: dict[str, str] = {}  # op id -> innermost marked call around it ("" none)
        for op in data["ops"]:
            around = [a for a in tree.chain(op["call"]) if a in chosen]
            self.own[op["id"]] = around[0] if around else ""
            for a in around:
                self.ops[a].append(op)
        for ops in self.ops.values():
            ops.sort(key=lambda op: op["seq"])

    def inside_cut(self, c: str) -> bool:
        """Inside a cut reentrant call: its block only ever runs under no_grad, so the mark does nothing."""
        a = self.parent[c]
        while a:
            if a in self.cut:
                return True
            a = self.parent[a]
        return False

    def under_reentrant(self, c: str) -> bool:
        """Inside a reentrant checkpoint: the forward runs it under no_grad (it only acts in recompute)."""
        a = self.parent[c]
        while a:
            if self.mode[a] == "reentrant":
                return True
            a = self.parent[a]
        return False

    def holders(self, c: str) -> list[tuple[float, float, CheckpointOp | None]]:
        """What the checkpoint of ``c`` packs in forward, in order: (position, start, own op). Its own ops'
        saves at their seq; a marked child's saved inputs: non-reentrant at the child's start (before its
        block runs), reentrant at its end (``save_for_backward`` after the block ran under no_grad)."""
        out: list[tuple[float, float, CheckpointOp | None]] = [
            (op["seq"], op["seq"], op) for op in self.ops[c]
            if self.own[op["id"]] == c and op["packs"] and op["id"] not in self.gone]
        for d in self.children[c]:
            if not self.ops[d] or d in self.cut:
                continue
            first, last = self.ops[d][0]["seq"], self.ops[d][-1]["seq"]
            out.append((first - 0.5, first, None) if self.mode[d] == "non_reentrant" else (last + 0.5, first, None))
        return out

    def held(self, c: str) -> bool:
        """Backward reaches the checkpoint of ``c``: a reentrant one's node exists, a non-reentrant one packed
        something (else PyTorch frees its frame, inputs and RNG state with it at once)."""
        if c in self.cut or self.inside_cut(c):
            return False
        return self.mode[c] == "reentrant" or bool(self.holders(c))

    def rerun(self, c: str, out: list[int]) -> None:
        """Add what backward re-runs for the checkpoint of ``c`` to ``out`` ([ops, FLOPs]): its own recompute
        (reentrant: the whole block; non-reentrant: up to its last pack, where PyTorch stops, skipping that
        op's kernel when it saved only inputs), then each held marked child's, since a recompute creates the
        child's checkpoint again and backward then recomputes that one too."""
        if self.mode[c] == "reentrant":
            ran = [(op, op["flops"]) for op in self.ops[c]]
        else:
            hs = self.holders(c)
            lo, (hi, _, last) = min(h[1] for h in hs), max(hs, key=lambda h: h[0])
            skip = last is not None and not last["saves_output"]
            ran = [(op, 0 if skip and op is last else op["flops"]) for op in self.ops[c] if lo <= op["seq"] <= hi]
        out[0] += len(ran)
        out[1] += sum(f for _, f in ran)
        for d in self.children[c]:
            if self.held(d):
                self.rerun(d, out)


def plan(data: CheckpointTable, calls: Sequence[Mapping[str, Any]], marks: Mapping[str, str],
         cuts: Sequence[str] = (), gone: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """The rule on a table: memory before/after and recompute (the page's twin: ``evaluate`` in
    ``js/src/features/checkpoint/state.ts``). ``cuts``: reentrant calls whose outputs have no grad_fn (their
    ctx is dropped: they keep nothing and nothing is recomputed); ``gone``: ops that no longer exist then."""
    m = _Marks(data, calls, marks, cuts, gone)
    outer = [c for c in m.mode if not m.parent[c]]
    nested = [c for c in m.mode if m.parent[c] and not m.inside_cut(c)]
    ignored = [c for c in m.mode if m.parent[c] and m.inside_cut(c)]
    before = _charges(data, calls, {}, set())
    inputs = {i["call"]: i["storages"] for i in data["inputs"]}
    extra, frames = len(data["storages"]), dict[str, tuple[float, list[int]]]()
    for c in m.mode:  # checkpoints alive after forward: each keeps an RNG state, an outermost one its inputs
        if m.held(c) and not m.under_reentrant(c):  # an inner one's inputs are packed by the one around it
            mine = [] if m.parent[c] else inputs.get(c, [])
            frames[c] = (m.ops[c][0]["seq"] if m.ops[c] else 0, [*mine, extra + len(frames)])
    dropped = {op["id"] for op in data["ops"] if m.own[op["id"]]} | set(gone)
    after = _charges(data, calls, frames, dropped)
    kept_storages = {s for _, f in frames.values() for s in f}
    sizes = [*data["storages"], *([data["rng_bytes"]] * len(frames))]
    recomputed = [0, 0]
    for c in outer:
        if m.held(c):
            m.rerun(c, recomputed)
    return {
        "before": before[""], "after": after[""], "per_call_before": before, "per_call_after": after,
        "kept": sum(sizes[s] for s in kept_storages),
        "forward_ops": len(data["ops"]), "recomputed_ops": recomputed[0],
        "forward_flops": sum(op["flops"] for op in data["ops"]), "recomputed_flops": recomputed[1],
        "ignored": ignored, "outer": outer, "nested": nested, "inexact": _inexact(data, m, calls),
    }


def _inexact(data: CheckpointTable, m: _Marks, calls: Sequence[Mapping[str, Any]]) -> list[str]:
    """Checkpoints the rule cannot answer exactly: those with no input that still requires grad (from a frozen
    embedding, or behind a cut). What the block computes from such an input alone (its frozen layers) is in
    no graph, yet its recompute runs it again, and a non-reentrant one keeps that input: both unseen."""
    tree = CallTree(calls)
    call_of = {op["id"]: op["call"] for op in data["ops"]}
    producers = {i["call"]: i["producers"] for i in data["inputs"]}

    def alive(p: str) -> bool:
        return p not in m.gone and not (p in call_of and tree.inside(call_of[p], m.cut))

    return [f"{c} has no input that requires grad, so what it computes from its inputs alone is in no graph"
            for c in m.mode if m.held(c) and not any(alive(p) for p in producers.get(c, []))]


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


def reentrant_cuts(g: nx.DiGraph, data: CheckpointTable, chosen: list[str], marks: Mapping[str, str]) -> list[str]:
    """Reentrant calls, in forward order, none of whose inputs still requires grad once the earlier cuts
    are made: no producer exists, or each sits inside a cut call (its output has no grad_fn). A mark
    nested in a reentrant one is judged the same way: its recompute sees the inputs' ``requires_grad``
    as the forward did. Marks inside a cut call never run with grad and are skipped."""
    inputs = {i["call"]: i["producers"] for i in data["inputs"]}
    tree = CallTree(g.graph.get("calls", []))
    cuts: list[str] = []
    for c in chosen:
        if marks[c] != "reentrant" or tree.inside(c, set(cuts)):
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
        p.before, p.after, p.share, p.lost
    """
    if not isinstance(graph, AutogradGraph):
        raise GradvizError(f"checkpoint_what_if expects the graph from gv.trace, got {type(graph).__name__}.")
    clean = check_marks(graph, marks)
    data = table(graph)
    cuts = reentrant_cuts(graph.nx, data, [c["id"] for c in graph.calls if c["id"] in clean], clean)
    alive = _existing(graph.nx, cuts)[0] if cuts else None
    gone = {op["id"] for op in data["ops"] if alive is not None and op["id"] not in alive}
    got = plan(data, graph.calls, clean, cuts, gone)
    lost = what_if(graph.nx, detach=cuts) if cuts else None
    return CheckpointPlan(
        marks=clean, before=got["before"], after=got["after"], per_call_before=got["per_call_before"],
        per_call_after=got["per_call_after"], kept=got["kept"], forward_ops=got["forward_ops"],
        recomputed_ops=got["recomputed_ops"], forward_flops=got["forward_flops"],
        recomputed_flops=got["recomputed_flops"], lost=lost.lost if lost else [],
        lost_ids=lost.lost_ids if lost else [], cut=cuts, ignored=got["ignored"], nested=got["nested"],
        inexact=got["inexact"],
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

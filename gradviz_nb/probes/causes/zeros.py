"""Where a parameter's gradient became zero or shrank, found in the recorded backward itself.

Given a :class:`~gradviz_nb.probes.backward.BackwardRecording` of the backward that left the gradient, and the
parameter's leaf, :func:`where_lost` walks the recorded steps of the nodes on the parameter's paths to the loss,
in the engine's order, and names:

- the first node that received a non-zero gradient and sent zero towards the parameter (a multiplication by a
  constant that is zero, a dropout that dropped everything, a cast that underflowed, a hook inside the node), or
- the first edge where a node sent non-zero and the next received zero: something between two nodes changed the
  gradient, a tensor hook or a module's backward pre-hook, seen as a measured in/out pair, or
- for a gradient that only shrank, the node whose out/in norm ratio is smallest (where most of the norm went).

Whether a gradient is non-zero is read from its largest magnitude (exact in any dtype); norms are the
recording's, which are exact at any magnitude. No op name decides anything here; the graph's op names only
word the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx
import torch

from gradviz_nb.probes.backward import BackwardRecording, GradStats
from gradviz_nb.probes.causes.factors import ZeroFactor, _readable
from gradviz_nb.tracing import AutogradGraph
from gradviz_nb.tracing.walk import storage_key

__all__ = ["Lost", "expected_zero", "where_lost", "zero_maker", "zero_param_upstream"]


@dataclass(frozen=True)
class Lost:
    """Where the gradient went. ``node``: the graph node; ``between``: the producer whose sent gradient arrived
    changed (an edge: a hook between the two), else ``""``; ``received`` / ``sent``: norms in and out towards the
    parameter; ``factor``: sent / received (0.0 for a zero)."""

    node: str
    op: str
    module: str
    received: float
    sent: float
    factor: float
    between: str = ""
    zero: ZeroFactor | None = None  # what the node multiplied by that was all zero (read from its saved tensors)
    maker: str = ""  # the node nearest upstream of ``zero.node`` whose backward sent zero for non-zero
    reduced: bool = False  # the node sent fewer elements towards the parameter than it received (a sum)


def _norm(stats: list[GradStats | None]) -> float:
    return math.sqrt(sum(float(g.norm) ** 2 for g in stats if g is not None and math.isfinite(g.norm)))


def _nonzero(stats: list[GradStats | None]) -> bool:
    return any(g is not None and g.max_abs > 0 for g in stats)


def _on_paths(graph: AutogradGraph, leaf: str) -> set[str]:
    g = graph.nx
    down: set[str] = set(nx.descendants(g, leaf))
    up: set[str] = set()
    for root in graph.roots:
        up |= nx.ancestors(g, root) | {root}
    return down & up


def _zone(graph: AutogradGraph, leaf: str, towards: set[str], received_zero: set[str]) -> set[str]:
    """The leaf and the nodes downstream of it (towards the loss) reached only through nodes that received a zero
    gradient: where a zero that reaches the leaf can have been made."""
    zone, stack = {leaf}, [leaf]
    while stack:
        for nxt in graph.nx.successors(stack.pop()):
            if nxt in towards and nxt not in zone:
                zone.add(nxt)
                if nxt in received_zero:
                    stack.append(nxt)
    return zone


def _numel(stats: list[GradStats | None]) -> int:
    return sum(math.prod(g.shape) for g in stats if g is not None)


def where_lost(rec: BackwardRecording, graph: AutogradGraph, leaf: str, *, zero: bool) -> Lost | None:
    """The node (or edge) where ``leaf``'s gradient was lost in the last recorded pass: ``zero``: the first that
    received non-zero and sent zero towards it, along nodes that all received zero down to the leaf (a node
    whose zero another path makes up for is not where the leaf's zero came from); else the one that kept the
    smallest share of the norm."""
    path = _on_paths(graph, leaf)
    towards = path | {leaf}
    steps = [s for s in rec.pass_steps(-1) if s.node in towards]
    ran = {s.node for s in steps}
    received_zero = {s.node for s in steps if not _nonzero(s.grad_outputs)} | (towards - ran)
    zone = _zone(graph, leaf, towards, received_zero) & (received_zero | {leaf}) if zero else towards
    sent_to: dict[str, list[tuple[str, GradStats | None]]] = {}  # node -> (producer, what it was sent)
    shrinks: list[Lost] = []
    attrs = graph.nx.nodes
    for s in steps:
        received = s.grad_outputs
        arrived = sent_to.get(s.node, [])
        op, module = str(attrs[s.node].get("op", "")), str(attrs[s.node].get("module", ""))
        if arrived and _nonzero([g for _, g in arrived]) and not _nonzero(received) and s.node in zone:
            # sent non-zero, received zero: a hook between the producer and this node changed it
            producer = next(p for p, g in arrived if g is not None and g.max_abs > 0)
            return Lost(s.node, op, module, _norm([g for _, g in arrived]), 0.0, 0.0, between=producer)
        if s.node == leaf:
            continue
        out = [s.grad_inputs[d.input_nr] for d in s.deliveries if d.target in towards]
        for d in s.deliveries:
            if d.target in towards:
                sent_to.setdefault(d.target, []).append((s.node, s.grad_inputs[d.input_nr]))
        if not _nonzero(received):
            continue
        into_zone = [s.grad_inputs[d.input_nr] for d in s.deliveries if d.target in zone]
        if not _nonzero(out) and into_zone:
            return Lost(s.node, op, module, _norm(received), 0.0, 0.0, reduced=_numel(into_zone) < _numel(received))
        if not zero:
            r, o = _norm(received), _norm(out)
            if r > 0:
                shrinks.append(Lost(s.node, op, module, r, o, o / r))
    if zero or not shrinks:
        return None
    return min(shrinks, key=lambda lost: lost.factor)


def zero_maker(rec: BackwardRecording, graph: AutogradGraph, start: str, limit: int = 64) -> str:
    """The node nearest upstream of ``start`` (itself included) whose backward, in the last recorded pass,
    received a non-zero gradient and sent only zeros: where an all-zero value ``start`` produced was made (a
    multiplication by zero, a dropout that dropped everything); ``""`` when none is found within ``limit``
    nodes."""
    steps = {s.node: s for s in rec.pass_steps(-1)}
    seen, queue = {start}, [start]
    while queue and len(seen) <= limit:
        n = queue.pop(0)
        s = steps.get(n)
        if s is not None and _nonzero(s.grad_outputs) and any(g is not None for g in s.grad_inputs) \
                and not _nonzero(s.grad_inputs):
            return n
        for u in graph.nx.predecessors(n):
            if u not in seen and graph.nx.nodes[u].get("kind") == "op":
                seen.add(u)
                queue.append(u)
    return ""


def zero_param_upstream(graph: AutogradGraph, start: str, limit: int = 64) -> str:
    """The name of a trainable parameter that is exactly zero (measured on its values) feeding ``start`` or a
    node upstream of it within ``limit`` nodes: why a value ``start`` made is all zero when no node there sent
    zero for non-zero (``up * scale`` with ``up`` zero-initialised); ``""`` if none."""
    g = graph.nx
    seen, queue = {start}, [start]
    while queue and len(seen) <= limit:
        for u in g.predecessors(queue.pop(0)):
            if u in seen:
                continue
            seen.add(u)
            if g.nodes[u].get("kind") == "op":
                queue.append(u)
                continue
            ref = graph.tensors.get(u)
            t = ref() if ref is not None else None
            if t is not None and t.requires_grad and _readable(t) and not bool(t.detach().any()):
                return str(g.nodes[u].get("name") or u)
    return ""


def _storage(graph: AutogradGraph, t: torch.Tensor) -> int | None:
    """The ``storage`` index the saved entries give ``t``'s memory, if a node saved it (None otherwise)."""
    if graph.saved_params is None or t.layout is not torch.strided:
        return None
    try:
        key = storage_key(t.detach())
    except (RuntimeError, NotImplementedError):  # a tensor subclass without plain storage (a DTensor)
        return None
    return graph.saved_params.get(key)


def _zero_factor(graph: AutogradGraph, node: str) -> str:
    """The name of an all-zero parameter ``node`` multiplies by, measured: a leaf feeding it (directly or through
    one single-input op, e.g. a transpose) holds only zeros, and the node saved that leaf's own memory for its
    backward (the saved tensor's storage is the leaf's; for a graph without storages, or a packed saved tensor,
    a parameter-sized tensor of its shape or its transpose), so it is a factor of the gradient the node sends
    to its other inputs. With storages known, every parameter the node saved must be such an all-zero leaf: a
    node that also saved a non-zero parameter (layer norm saves its weight beside its zero bias, which it only
    adds) still sends a gradient through it. A zero bias batch norm or a linear layer adds is never saved.
    ``""`` if none."""
    g = graph.nx
    entries = g.nodes[node].get("saved", []) or []
    saved = [tuple(s.get("shape") or ()) for s in entries
             if s.get("packed") or (s.get("param") and graph.saved_params is None)]
    stored = {s.get("storage") for s in entries if s.get("param") and s.get("storage") is not None}
    if not saved and not stored:
        return ""
    feeders = list(g.predecessors(node))
    feeders += [u for v in feeders if g.nodes[v].get("kind") == "op" and g.in_degree(v) == 1 for u in g.predecessors(v)]
    zero: dict[int | None, str] = {}  # storage index (None: matched by shape) -> name of an all-zero leaf
    for leaf in feeders:
        if g.nodes[leaf].get("kind") != "leaf":
            continue
        ref = graph.tensors.get(leaf)
        t = ref() if ref is not None else None
        if t is None or not _readable(t):
            continue
        index = _storage(graph, t)
        if index not in stored and tuple(t.shape) not in saved and tuple(reversed(t.shape)) not in saved:
            continue
        if not bool(t.detach().any()):
            zero.setdefault(index if index in stored else None, str(g.nodes[leaf].get("name") or leaf))
    if stored and not stored <= set(zero):
        return ""  # a saved parameter that is not an all-zero leaf feeding the node: not measured a zero factor
    return next(iter(zero.values()), "")


def expected_zero(graph: AutogradGraph, leaves: list[str]) -> str:
    """Why an exact zero gradient of ``leaves`` (node ids) is expected, or ``""``: every path from them to the
    loss passes through a node whose other factor is a parameter that is exactly zero (a zero-initialised
    up-projection, LoRA's B): measured on the values, whatever the parameters are called."""
    g = graph.nx
    down: set[str] = set()
    for leaf in leaves:
        down |= nx.descendants(g, leaf)
    blockers = {n: z for n in down if g.nodes[n].get("kind") == "op" and (z := _zero_factor(graph, n))
                and graph.leaves().get(z) not in leaves}
    if not blockers:
        return ""
    roots = set(graph.roots)
    for leaf in leaves:
        seen, stack = {leaf}, [leaf]
        while stack:
            for nxt in g.successors(stack.pop()):
                if nxt in roots:
                    return ""
                if nxt not in seen and nxt not in blockers:
                    seen.add(nxt)
                    stack.append(nxt)
    zeros = sorted(set(blockers.values()))
    return (f"expected: every path to the loss multiplies by {', '.join(zeros)}, which is exactly zero (measured: "
            "all its values are 0), so this gradient is exactly zero until that parameter moves")

"""``gv.diff(before, after)``: what changed between two traced graphs (adapters added, checkpointing on).

Matching, pure graph data:
- leaves by parameter name (any of a tied weight's names); a module wrapped by another (LoRA's
  ``c_attn`` -> ``c_attn.base``) is recognised when a leaf's name differs by one inserted path segment
  with the same shape, and the wrapped module's ops are then matched under the old path;
- ops by (module path, op, occurrence index within that module in forward order);
- roots by position.
A matched node is *changed* when its shape or dtype differ or its producers (as matched keys) differ.
Reentrant checkpointing hides a block's ops and parameters behind one ``CheckpointFunctionBackward``
node: leaves that vanish then are reported as *hidden* (they still get gradients, inside it), not lost.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from gradviz_nb.analysis.memory import MemoryReport, format_bytes, memory_held
from gradviz_nb.analysis.what_if import surviving_nodes
from gradviz_nb.tracing.graph import AutogradGraph

Key = tuple[str, ...]
OPAQUE_CHECKPOINT = "CheckpointFunctionBackward"
REMOVED_PREFIX = "was:"


@dataclass(frozen=True)
class NodeChange:
    """A matched node that differs: its ids in both graphs, its match key as text, and why."""

    before: str
    after: str
    key: str
    why: str


@dataclass(frozen=True)
class GraphDiff:
    """Answer of :func:`diff`. Node lists hold node ids (``added``: ids in ``after``, ``removed``: in
    ``before``); leaf lists hold leaf names. ``gained`` / ``lost``: leaves that have a gradient path in
    one graph and not in the other; ``hidden``: leaves gone behind an opaque reentrant checkpoint."""

    added: list[str]
    removed: list[str]
    changed: list[NodeChange]
    same: list[tuple[str, str]]
    added_leaves: list[str]
    removed_leaves: list[str]
    gained: list[str]
    lost: list[str]
    hidden: list[str]
    renamed_modules: dict[str, str]
    memory_before: MemoryReport
    memory_after: MemoryReport
    before: AutogradGraph = field(repr=False)
    after: AutogradGraph = field(repr=False)
    keys_before: dict[str, Key] = field(repr=False, default_factory=dict)

    def memory_moved(self) -> dict[str, tuple[int, int]]:
        """Module path -> (activation bytes before, after) where it changed (``""`` = the whole graph)."""
        by_path: dict[str, list[int]] = {}
        sides = [(self.before, self.memory_before), (self.after, self.memory_after)]
        for side, (graph, mem) in enumerate(sides):
            paths = {c["id"]: c["path"] for c in graph.calls}
            for call, b in mem.per_call.items():
                if call:
                    by_path.setdefault(_unwrap(paths[call], self.renamed_modules), [0, 0])[side] += b
        by_path[""] = [self.memory_before.activations, self.memory_after.activations]
        return {p: (b, a) for p, (b, a) in sorted(by_path.items()) if b != a}

    def summary(self) -> str:
        """A few lines of plain text saying what changed."""
        ops_added = Counter(self.after.nx.nodes[n]["op"] for n in self.added if self.after.nx.nodes[n]["kind"] == "op")
        ops_removed = Counter(
            self.before.nx.nodes[n]["op"] for n in self.removed if self.before.nx.nodes[n]["kind"] == "op")
        lines = [
            f"diff: {len(self.added)} nodes added, {len(self.removed)} removed, {len(self.changed)} changed, "
            f"{len(self.same)} the same",
        ]
        if self.added_leaves:
            lines.append(f"leaves added ({len(self.added_leaves)}): {_short(self.added_leaves)}")
        if self.removed_leaves:
            lines.append(f"leaves removed ({len(self.removed_leaves)}): {_short(self.removed_leaves)}")
        if self.gained:
            lines.append(f"gained a gradient path ({len(self.gained)}): {_short(self.gained)}")
        if self.lost:
            lines.append(f"LOST their gradient path ({len(self.lost)}): {_short(self.lost)}")
        if self.hidden:
            lines.append(
                f"{len(self.hidden)} leaves are now inside {OPAQUE_CHECKPOINT} (reentrant checkpoint): they still "
                "get gradients from a backward PyTorch runs inside that node, which the graph cannot show")
        if ops_added:
            lines.append("ops added: " + ", ".join(f"{op} x{n}" for op, n in ops_added.most_common(6)))
        if ops_removed:
            lines.append("ops removed: " + ", ".join(f"{op} x{n}" for op, n in ops_removed.most_common(6)))
        if self.renamed_modules:
            after_paths = {c["path"] for c in self.after.calls}
            if any(wrapper in after_paths for wrapper in self.renamed_modules.values()):
                lines.append("modules wrapped: " + _short([f"{a} -> {b}" for a, b in self.renamed_modules.items()]))
            else:
                lines.append("modules unwrapped: " + _short([f"{b} -> {a}" for a, b in self.renamed_modules.items()]))
        b, a = self.memory_before.activations, self.memory_after.activations
        if b != a:
            pct = f" ({(a - b) / b:+.0%})" if b else ""
            lines.append(f"activations saved for backward: {format_bytes(b)} -> {format_bytes(a)}{pct}")
            packed = len(self.memory_after.packed) - len(self.memory_before.packed)
            if packed > 0:
                lines.append(f"  {packed} nodes now hold packed tensors (non-reentrant checkpoint): "
                             "recomputed during backward instead of kept")
        return "\n".join(lines)

    def to_payload(self) -> dict[str, Any]:
        """The diff view's data (``js/src/payload.ts`` ``GraphDiff``): draw :meth:`merged` with it."""
        status: dict[str, str] = {n: "added" for n in self.added}
        status.update({a: "same" for _, a in self.same})
        status.update({c.after: "changed" for c in self.changed})
        status.update({REMOVED_PREFIX + n: "removed" for n in self.removed})
        mem_b, mem_a = self.memory_before.per_node, self.memory_after.per_node
        after_of = {b: a for b, a in self.same} | {c.before: c.after for c in self.changed}
        memory = {a: [mem_b.get(b, 0), mem_a.get(a, 0)] for b, a in after_of.items()
                  if mem_b.get(b, 0) != mem_a.get(a, 0)}
        memory.update({n: [0, mem_a[n]] for n in self.added if mem_a.get(n)})
        memory.update({REMOVED_PREFIX + n: [mem_b[n], 0] for n in self.removed if mem_b.get(n)})
        return {
            "status": status,
            "why": {c.after: c.why for c in self.changed},
            "added_leaves": self.added_leaves,
            "removed_leaves": self.removed_leaves,
            "gained": self.gained,
            "lost": self.lost,
            "hidden": self.hidden,
            "memory": memory,
            "memory_total": [self.memory_before.activations, self.memory_after.activations],
            "summary": self.summary(),
        }

    def merged(self) -> AutogradGraph:
        """``after`` plus ``before``'s removed nodes (ids ``"was:<id>"``) and their edges: one graph to draw
        the diff on. Calls only ``before`` had are added, so removed nodes keep their module boxes."""
        g = self.after.nx.copy()
        before = self.before.nx
        after_of = {b: a for b, a in self.same} | {c.before: c.after for c in self.changed}
        removed = set(self.removed)
        for n in self.removed:
            g.add_node(REMOVED_PREFIX + n, **before.nodes[n])
        for u, v, d in before.edges(data=True):
            if u in removed or v in removed:
                g.add_edge(after_of.get(u, REMOVED_PREFIX + u), after_of.get(v, REMOVED_PREFIX + v), **d)
        calls = [dict(c) for c in self.after.calls]
        known = {c["id"] for c in calls}
        for c in self.before.calls:  # parents come first in both lists
            if c["id"] not in known:
                calls.append(dict(c))
                known.add(c["id"])
        _resize(g, calls)
        g.graph = {**self.after.nx.graph, "calls": calls, "ghosts": list(self.after.nx.graph.get("ghosts", []))}
        return AutogradGraph(g)

    def __repr__(self) -> str:
        return "<GraphDiff " + self.summary().splitlines()[0].removeprefix("diff: ") + ">"


def diff(before: AutogradGraph, after: AutogradGraph) -> GraphDiff:
    """Compare two traced graphs: added, removed, changed nodes; leaves that gained or lost gradient.

    Example::

        d = gv.diff(gv.trace(loss_plain, model=m), gv.trace(loss_lora, model=m_lora))
        d.added_leaves        # ["blocks.0.attn.c_attn.lora_A", ...]
        print(d.summary())
        widget = gv.GraphWidget(d.merged()); widget.diff = d.to_payload()
    """
    # Wrapping in either direction (plain -> LoRA, or LoRA -> plain): each renamed path exists on one side
    # only, so one mapping unwraps both.
    renamed = {**_wrapped_modules(before, after), **_wrapped_modules(after, before)}
    keys_b = _keys(before, renamed)
    keys_a = _keys(after, renamed)
    node_of_a = {k: n for n, k in keys_a.items()}
    matched = {b: node_of_a[k] for b, k in keys_b.items() if k in node_of_a}
    matched_a = set(matched.values())
    same: list[tuple[str, str]] = []
    changed: list[NodeChange] = []
    for b, a in matched.items():
        why = _why_changed(before.nx, after.nx, b, a, keys_b, keys_a)
        if why:
            changed.append(NodeChange(b, a, _key_text(keys_b[b]), why))
        else:
            same.append((b, a))
    reach_b, reach_a = _reached_leaves(before, renamed), _reached_leaves(after, renamed)
    opaque = any(d["op"] == OPAQUE_CHECKPOINT for _, d in after.nx.nodes(data=True))
    leaves_b, leaves_a = _leaf_names(before, renamed), _leaf_names(after, renamed)
    gone = sorted(leaves_b.get(n, n) for n in reach_b if n not in reach_a)
    return GraphDiff(
        added=[n for n in after.nx if n not in matched_a],
        removed=[n for n in before.nx if n not in matched],
        changed=changed,
        same=same,
        added_leaves=sorted(leaves_a[n] for n in leaves_a if n not in leaves_b),
        removed_leaves=sorted(leaves_b[n] for n in leaves_b if n not in leaves_a),
        gained=sorted(leaves_a.get(n, n) for n in reach_a if n not in reach_b),
        lost=[] if opaque else gone,
        hidden=gone if opaque else [],
        renamed_modules=renamed,
        memory_before=memory_held(before),
        memory_after=memory_held(after),
        before=before,
        after=after,
        keys_before=keys_b,
    )


def _wrapped_modules(before: AutogradGraph, after: AutogradGraph) -> dict[str, str]:
    """Module paths wrapped by a new module: ``{"blocks.0.attn.c_attn": "blocks.0.attn.c_attn.base"}``.

    Seen from leaves only in ``after`` whose name, minus one path segment, is a leaf only in ``before``
    with the same shape (LoRA, quantisation wrappers, DDP-style ``module.`` prefixes one level deep).
    """
    old = {name: before.nx.nodes[n].get("shape") for name, n in before.leaves().items()}
    new = {name: after.nx.nodes[n].get("shape") for name, n in after.leaves().items()}
    renamed: dict[str, str] = {}
    for name, shape in new.items():
        if name in old:
            continue
        parts = name.split(".")
        for i in range(len(parts) - 1):
            candidate = ".".join(parts[:i] + parts[i + 1:])
            if candidate in old and candidate not in new and old[candidate] == shape:
                renamed[candidate.rpartition(".")[0]] = name.rpartition(".")[0]
                break
    return renamed


def _unwrap(path: str, renamed: dict[str, str]) -> str:
    """A module path of the wrapped model as the path it had before wrapping."""
    for old, new in renamed.items():
        if path == new or path.startswith(new + "."):
            return old + path[len(new):]
    return path


def _keys(graph: AutogradGraph, renamed: dict[str, str]) -> dict[str, Key]:
    """Node id -> match key. Ops: (module path, op, occurrence); leaves: first name; roots: position."""
    g = graph.nx
    keys: dict[str, Key] = {}
    seen: Counter[tuple[str, str]] = Counter()
    ops = sorted((n for n, d in g.nodes(data=True) if d["kind"] == "op"), key=lambda n: (g.nodes[n]["seq"], n))
    for n in ops:
        module, op = _unwrap(g.nodes[n]["module"], renamed), g.nodes[n]["op"]
        keys[n] = ("op", module, op, str(seen[module, op]))
        seen[module, op] += 1
    unnamed: Counter[tuple[str, str]] = Counter()
    for n, d in g.nodes(data=True):
        if d["kind"] == "leaf":
            if d["names"]:
                keys[n] = ("leaf", _unwrap_name(sorted(d["names"])[0], renamed))
            else:  # an unnamed input: by where it is used and its shape
                where = (str(d.get("shape")), ",".join(sorted(keys.get(s, ("?",))[1] for s in g.successors(n))))
                keys[n] = ("leaf", f"<unnamed {where[0]} into {where[1]}>", str(unnamed[where]))
                unnamed[where] += 1
    for i, r in enumerate(graph.roots):
        keys[r] = ("root", str(i))
    return keys


def _unwrap_name(name: str, renamed: dict[str, str]) -> str:
    """A leaf name of the wrapped model as the name it had before (``c.base.weight`` -> ``c.weight``)."""
    module, _, leaf = name.rpartition(".")
    return f"{_unwrap(module, renamed)}.{leaf}" if module else name


def _key_text(key: Key) -> str:
    if key[0] == "op":
        return f"{key[1] or '(top level)'} · {key[2]} #{key[3]}"
    return " ".join(key[1:])


def _why_changed(gb: nx.DiGraph, ga: nx.DiGraph, b: str, a: str, kb: dict[str, Key], ka: dict[str, Key]) -> str:
    db, da = gb.nodes[b], ga.nodes[a]
    reasons = []
    if db.get("shape") != da.get("shape"):
        reasons.append(f"shape {db.get('shape')} -> {da.get('shape')}")
    if db.get("dtype") != da.get("dtype"):
        reasons.append(f"dtype {db.get('dtype')} -> {da.get('dtype')}")
    inputs_b = Counter(kb[u] for u in gb.predecessors(b))
    inputs_a = Counter(ka[u] for u in ga.predecessors(a))
    if inputs_b != inputs_a:
        gone = [_key_text(k) for k in inputs_b - inputs_a]
        new = [_key_text(k) for k in inputs_a - inputs_b]
        reasons.append("inputs" + (f" no longer from {_short(gone, 3)}" if gone else "")
                       + (";" if gone and new else "") + (f" now from {_short(new, 3)}" if new else ""))
    return "; ".join(reasons)


def _leaf_names(graph: AutogradGraph, renamed: dict[str, str] | None = None) -> dict[str, str]:
    """Leaf match names -> display names (after unwrapping renamed modules)."""
    return {_unwrap_name(name, renamed or {}): name for name in graph.leaves()}


def _reached_leaves(graph: AutogradGraph, renamed: dict[str, str]) -> set[str]:
    """Match names of leaves a gradient reaches (in the graph and connected to a root)."""
    alive = surviving_nodes(graph.nx, set(), set())
    return {_unwrap_name(name, renamed) for name, n in graph.leaves().items() if n in alive}


def _resize(g: nx.DiGraph, calls: list[dict[str, Any]]) -> None:
    parent = {c["id"]: c["parent"] for c in calls}
    size = dict.fromkeys(parent, 0)
    for _, call in g.nodes(data="call"):
        while call:
            size[call] = size.get(call, 0) + 1
            call = parent.get(call, "")
    for c in calls:
        c["size"] = size.get(c["id"], 0)


def _short(items: list[str], n: int = 6) -> str:
    return ", ".join(items[:n]) + (f", … ({len(items) - n} more)" if len(items) > n else "")

"""``gv.diff(before, after)``: what changed between two traced graphs (adapters added, checkpointing on).

Matching, pure graph data:
- through whole-model wrappers: segments that wrappers insert (``_orig_mod`` of torch.compile,
  ``_fsdp_wrapped_module``, ``_checkpoint_wrapped_module``) are dropped anywhere in a path, and a prefix
  one side's paths all carry (``module.`` of DDP / DataParallel, ``base_model.model.`` of peft's
  PeftModel, any wrapper's attribute) is found from the module paths and stripped;
- leaves by parameter name (any of a tied weight's names); a module wrapped by another (LoRA's
  ``c_attn`` -> ``c_attn.base``, peft's ``c_attn.base_layer``) is recognised when a leaf's name differs by
  one inserted path segment with the same shape, or when the module tree has a module of the same type
  and parameters one segment deeper; the wrapped module's ops are then matched under the old path;
- ops by (module path, op, occurrence index within that module in forward order);
- roots by position.
A matched node is *changed* when its shape or dtype differ or its producers (as matched keys) differ.
Reentrant checkpointing hides a block's ops and parameters behind one ``CheckpointFunctionBackward``
node, whose own backward gives them gradients. The trace lists, per such node, the parameters its
function holds (graph attribute ``checkpoints``): a vanished leaf listed there is *hidden* (it still gets a
gradient), one listed nowhere is *lost* (``.grad`` stays None: e.g. a reentrant checkpoint whose inputs
need no grad makes no node at all, and PyTorch warns "None of the inputs have requires_grad=True").
When a checkpoint's function could not be inspected, vanished leaves are *unsure*, claimed neither way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from gradviz_nb.analysis.memory import MemoryReport, format_bytes, memory_held
from gradviz_nb.analysis.what_if import surviving_nodes
from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.calltree import CallTree
from gradviz_nb.tracing.graph import AutogradGraph

Key = tuple[str, ...]
OPAQUE_CHECKPOINT = "CheckpointFunctionBackward"
REMOVED_PREFIX = "was:"
# Path segments wrappers insert around a module: torch.compile, FSDP (v1), checkpoint_wrapper / offload_wrapper.
WRAPPER_SEGMENTS = frozenset({"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"})


@dataclass(frozen=True)
class _Names:
    """One side's module paths and leaf names as the shared, unwrapped ones both sides are matched by."""

    prefix: str = ""  # whole segments every path of this side carries (``module``, ``base_model.model``)
    renamed: dict[str, str] = field(default_factory=dict)

    def bare(self, path: str) -> str:
        """Without wrapper segments and this side's prefix (before module renames)."""
        if not path:
            return path
        parts = path.split(".")
        if any(p in WRAPPER_SEGMENTS for p in parts):
            path = ".".join(p for p in parts if p not in WRAPPER_SEGMENTS)
        if self.prefix and (path == self.prefix or path.startswith(self.prefix + ".")):
            path = path[len(self.prefix) + 1:]
        return path

    def path(self, path: str) -> str:
        return _unwrap(self.bare(path), self.renamed)

    def leaf(self, name: str, renames: bool = True) -> str:
        """A leaf name (``module.0.weight``) as the matched name (``0.weight``)."""
        module, _, leaf = name.rpartition(".")
        if not module:
            return name
        module = self.path(module) if renames else self.bare(module)
        return f"{module}.{leaf}" if module else leaf


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
    ``before``); leaf lists hold leaf names. ``gained`` / ``lost``: leaves PyTorch gives a gradient in one
    graph and not in the other (``.grad`` None after backward on the other side); ``hidden``: leaves gone
    behind an opaque reentrant checkpoint that still computes their gradient; ``unsure``: leaves gone
    behind a checkpoint whose function could not be inspected. ``prefixes``: the wrapper prefix stripped
    from (before, after) paths, e.g. ``("", "base_model.model")`` for a peft model; ``wrapper_segments``:
    wrapper path segments dropped (``_orig_mod``, ...)."""

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
    memory_before: MemoryReport | None  # None: that graph was traced after backward freed what it held
    memory_after: MemoryReport | None
    before: AutogradGraph = field(repr=False)
    after: AutogradGraph = field(repr=False)
    keys_before: dict[str, Key] = field(repr=False, default_factory=dict)
    unsure: list[str] = field(default_factory=list)
    prefixes: tuple[str, str] = ("", "")
    wrapper_segments: list[str] = field(default_factory=list)

    def _names(self, side: int) -> _Names:
        return _Names(self.prefixes[side], self.renamed_modules)

    def memory_moved(self) -> dict[str, tuple[int, int]]:
        """Module path -> (activation bytes before, after) where it changed (``""`` = the whole graph);
        empty when either graph was traced after backward (what it held can no longer be read)."""
        if self.memory_before is None or self.memory_after is None:
            return {}
        by_path: dict[str, list[int]] = {}
        sides = [(self.before, self.memory_before), (self.after, self.memory_after)]
        for side, (graph, mem) in enumerate(sides):
            paths = {c["id"]: c["path"] for c in graph.calls}
            names = self._names(side)
            for call, b in mem.per_call.items():
                if call:
                    by_path.setdefault(names.path(paths[call]), [0, 0])[side] += b
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
            lines.append(f"LOST their gradient path ({len(self.lost)}, .grad stays None): {_short(self.lost)}")
        if self.hidden:
            lines.append(
                f"{len(self.hidden)} leaves are now inside {OPAQUE_CHECKPOINT} (reentrant checkpoint): they still "
                "get gradients from a backward PyTorch runs inside that node, which the graph cannot show")
        if self.unsure:
            lines.append(
                f"{len(self.unsure)} leaves vanished behind a {OPAQUE_CHECKPOINT} whose function holds no module "
                f"gradviz can read ({_short(self.unsure, 3)}): whether they get gradients is unknown. Pass the "
                "module (or its bound method) to checkpoint(), or run loss.backward() and check their .grad")
        prefix_b, prefix_a = self.prefixes
        if prefix_b or prefix_a:
            where = " and ".join(f"{side}'s paths start with '{p}.'" for side, p in
                                 (("before", prefix_b), ("after", prefix_a)) if p)
            lines.append(f"matched through a wrapper: {where} (stripped)")
        if self.wrapper_segments:
            lines.append("matched through wrappers: path segments " + ", ".join(self.wrapper_segments) + " ignored")
        if ops_added:
            lines.append("ops added: " + ", ".join(f"{op} x{n}" for op, n in ops_added.most_common(6)))
        if ops_removed:
            lines.append("ops removed: " + ", ".join(f"{op} x{n}" for op, n in ops_removed.most_common(6)))
        if self.renamed_modules:
            bare = self._names(1)
            after_paths = {bare.bare(c["path"]) for c in self.after.calls}
            if any(wrapper in after_paths for wrapper in self.renamed_modules.values()):
                lines.append("modules wrapped: " + _short([f"{a} -> {b}" for a, b in self.renamed_modules.items()]))
            else:
                lines.append("modules unwrapped: " + _short([f"{b} -> {a}" for a, b in self.renamed_modules.items()]))
        if self.memory_before is None or self.memory_after is None:
            lines.append("activations saved for backward: not compared (a graph was traced after backward() "
                         "freed them; trace before backward to compare memory)")
            return "\n".join(lines)
        b, a = self.memory_before.activations, self.memory_after.activations
        if b != a:
            pct = f" ({(a - b) / b:+.0%})" if b else ""
            lines.append(f"activations saved for backward: {format_bytes(b)} -> {format_bytes(a)}{pct}")
            packed = len(self.memory_after.packed) - len(self.memory_before.packed)
            if packed > 0:
                lines.append(f"  {packed} nodes now hold packed tensors (non-reentrant checkpoint): "
                             "recomputed during backward instead of kept")
        return "\n".join(lines)

    def merged(self) -> AutogradGraph:
        """``after`` plus ``before``'s removed nodes (ids ``"was:<id>"``) and their edges: one graph to draw
        the diff on. Calls only ``before`` had are added, so removed nodes keep their module boxes."""
        g = self.after.nx.copy()
        before = self.before.nx
        after_of = {b: a for b, a in self.same} | {c.before: c.after for c in self.changed}
        removed = set(self.removed)
        # A call of `before` whose unwrapped path and index a call of `after` has is drawn as that call.
        names_b, names_a = self._names(0), self._names(1)
        after_call = {(names_a.path(c["path"]), c["index"]): c["id"] for c in self.after.calls}
        call_of = {c["id"]: after_call.get((names_b.path(c["path"]), c["index"]), c["id"]) for c in self.before.calls}
        call_of[""] = ""
        for n in self.removed:
            attrs = dict(before.nodes[n])
            attrs["call"] = call_of.get(attrs.get("call", ""), attrs.get("call", ""))
            g.add_node(REMOVED_PREFIX + n, **attrs)
        for u, v, d in before.edges(data=True):
            if u in removed or v in removed:
                g.add_edge(after_of.get(u, REMOVED_PREFIX + u), after_of.get(v, REMOVED_PREFIX + v), **d)
        calls = [dict(c) for c in self.after.calls]
        known = {c["id"] for c in calls}
        for c in self.before.calls:  # parents come first in both lists
            if call_of[c["id"]] not in known:
                calls.append(dict(c, parent=call_of.get(c["parent"], c["parent"])))
                known.add(c["id"])
        _resize(g, calls)
        g.graph = {**self.after.nx.graph, "calls": calls, "ghosts": list(self.after.nx.graph.get("ghosts", []))}
        return AutogradGraph(g)

    def __repr__(self) -> str:
        return "<GraphDiff " + self.summary().splitlines()[0].removeprefix("diff: ") + ">"


def diff(before: AutogradGraph, after: AutogradGraph) -> GraphDiff:
    """Compare two traced graphs: added, removed, changed nodes; leaves that gained or lost gradient.

    Models wrapped whole (DDP, torch.compile, FSDP, peft's PeftModel) are matched through the wrapper.

    Example::

        d = gv.diff(gv.trace(loss_plain, model=m), gv.trace(loss_lora, model=m_lora))
        d.added_leaves        # ["blocks.0.attn.c_attn.lora_A", ...]
        print(d.summary())
        gv.GraphWidget(d)     # the merged graph, coloured by status
    """
    _check_graph(before, "before")
    _check_graph(after, "after")
    prefix_a = _prefix(_paths(after, _Names()), _paths(before, _Names()))
    prefix_b = _prefix(_paths(before, _Names()), _paths(after, _Names(prefix_a)))
    bare_b, bare_a = _Names(prefix_b), _Names(prefix_a)
    # Wrapping in either direction (plain -> LoRA, or LoRA -> plain): each renamed path exists on one side
    # only, so one mapping unwraps both.
    renamed = {**_wrapped_modules(before, after, bare_b, bare_a), **_wrapped_modules(after, before, bare_a, bare_b)}
    names_b, names_a = _Names(prefix_b, renamed), _Names(prefix_a, renamed)
    keys_b = _keys(before, names_b)
    keys_a = _keys(after, names_a)
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
    leaves_b, leaves_a = _leaf_names(before, names_b), _leaf_names(after, names_a)
    grads_b, grads_a = _gradients(before, names_b), _gradients(after, names_a)
    shown_b = {**grads_b.inside, **leaves_b}
    shown_a = {**grads_a.inside, **leaves_a}
    had, has = grads_b.reached | set(grads_b.inside), grads_a.reached | set(grads_a.inside)
    lost, gained = had - has, has - had
    unsure = (lost if grads_a.unknown else set()) | (gained if grads_b.unknown else set())
    return GraphDiff(
        added=[n for n in after.nx if n not in matched_a],
        removed=[n for n in before.nx if n not in matched],
        changed=changed,
        same=same,
        added_leaves=sorted(leaves_a[n] for n in leaves_a if n not in leaves_b),
        removed_leaves=sorted(leaves_b[n] for n in leaves_b if n not in leaves_a),
        gained=sorted(shown_a[n] for n in gained - unsure),
        lost=sorted(shown_b[n] for n in lost - unsure),
        hidden=sorted(shown_b[n] for n in grads_b.reached - grads_a.reached if n in grads_a.inside),
        renamed_modules=renamed,
        memory_before=_memory(before),
        memory_after=_memory(after),
        before=before,
        after=after,
        keys_before=keys_b,
        unsure=sorted({**shown_a, **shown_b}[n] for n in unsure),
        prefixes=(prefix_b, prefix_a),
        wrapper_segments=sorted({part for g in (before, after) for path in _paths(g, None)
                                 for part in path.split(".") if part in WRAPPER_SEGMENTS}),
    )


def _check_graph(g: object, which: str) -> None:
    if isinstance(g, AutogradGraph):
        return
    kind = type(g).__name__
    if isinstance(getattr(g, "graph", None), AutogradGraph):  # a BackwardRecording, a GraphWidget
        hint = "pass its .graph (gv.diff(a.graph, b.graph))"
    elif kind == "GradientFlow":
        hint = ("a GradientFlow holds gradient statistics, not a graph: compare flows with their .summary(), or "
                "trace both losses and diff the graphs: gv.diff(gv.trace(loss_a, model=a), gv.trace(loss_b, model=b))")
    elif kind == "Tensor" or hasattr(g, "grad_fn"):
        hint = ("trace each loss first, with its model so leaves are named and matched: "
                "gv.diff(gv.trace(loss_a, model=a), gv.trace(loss_b, model=b))")
    else:
        hint = "pass two graphs from gv.trace(loss, model=model)"
    raise GradvizError(f"gv.diff compares two traced graphs; {which} is a {kind}: {hint}.")


def _paths(graph: AutogradGraph, names: _Names | None) -> set[str]:
    """Every module path one side knows (its module tree, its calls, its leaves' modules), unwrapped by
    ``names`` (as they are with ``None``)."""
    paths = set(graph.nx.graph.get("modules", {}))
    paths.update(c["path"] for c in graph.calls)
    paths.update(name.rpartition(".")[0] for name in graph.leaves())
    return {names.bare(p) for p in paths} if names is not None else paths


def _prefix(own: set[str], other: set[str]) -> str:
    """The whole-segment prefix whose removal from ``own`` matches more of ``other`` than no removal
    (``module`` for DDP, ``base_model.model`` for peft), or ``""``."""
    count: Counter[str] = Counter()
    for p in own:
        parts = p.split(".") if p else []
        for k in range(1, len(parts) + 1):
            if ".".join(parts[k:]) in other:
                count[".".join(parts[:k])] += 1
    if not count:
        return ""
    best, n = max(count.items(), key=lambda kv: (kv[1], -len(kv[0])))
    return best if n > len(own & other) else ""


def _wrapped_modules(before: AutogradGraph, after: AutogradGraph, bare_b: _Names, bare_a: _Names) -> dict[str, str]:
    """Module paths wrapped by a new module: ``{"blocks.0.attn.c_attn": "blocks.0.attn.c_attn.base"}``.

    Seen from leaves only in ``after`` whose name, minus one path segment, is a leaf only in ``before``
    with the same shape (LoRA, quantisation wrappers), and from the module trees: a module of ``before``
    whose type and parameter names reappear one segment deeper in ``after`` while ``after``'s module at
    the old path is something else (peft's ``c_attn`` -> ``c_attn.base_layer``, even with the base frozen,
    when its weights are no leaves). Paths are compared without whole-model wrappers (``bare_*``).
    """
    old = {bare_b.leaf(name, False): before.nx.nodes[n].get("shape") for name, n in before.leaves().items()}
    new = {bare_a.leaf(name, False): after.nx.nodes[n].get("shape") for name, n in after.leaves().items()}
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
    mods_b, mods_a = _module_kinds(before, bare_b), _module_kinds(after, bare_a)
    for path, kind in mods_a.items():
        parent = path.rpartition(".")[0]
        if path in mods_b or not parent or parent in renamed or not kind[1]:
            continue
        if mods_b.get(parent) == kind and mods_a.get(parent) != kind:
            renamed[parent] = path
    return renamed


def _module_kinds(graph: AutogradGraph, bare: _Names) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Unwrapped module path -> (type, its own parameters' short names), from the traced module tree."""
    return {bare.bare(path): (m["type"], tuple(sorted(p.rpartition(".")[2] for p in m["parameters"])))
            for path, m in graph.nx.graph.get("modules", {}).items()}


def _unwrap(path: str, renamed: dict[str, str]) -> str:
    """A module path of the wrapped model as the path it had before wrapping."""
    for old, new in renamed.items():
        if path == new or path.startswith(new + "."):
            return old + path[len(new):]
    return path


def _keys(graph: AutogradGraph, names: _Names) -> dict[str, Key]:
    """Node id -> match key. Ops: (module path, op, occurrence); leaves: first name; roots: position."""
    g = graph.nx
    keys: dict[str, Key] = {}
    seen: Counter[tuple[str, str]] = Counter()
    ops = sorted((n for n, d in g.nodes(data=True) if d["kind"] == "op"), key=lambda n: (g.nodes[n]["seq"], n))
    for n in ops:
        module, op = names.path(g.nodes[n]["module"]), g.nodes[n]["op"]
        keys[n] = ("op", module, op, str(seen[module, op]))
        seen[module, op] += 1
    unnamed: Counter[tuple[str, str]] = Counter()
    for n, d in g.nodes(data=True):
        if d["kind"] == "leaf":
            if d["names"]:
                keys[n] = ("leaf", min(names.leaf(name) for name in d["names"]))
            else:  # an unnamed input: by where it is used and its shape
                where = (str(d.get("shape")), ",".join(sorted(keys.get(s, ("?",))[1] for s in g.successors(n))))
                keys[n] = ("leaf", f"<unnamed {where[0]} into {where[1]}>", str(unnamed[where]))
                unnamed[where] += 1
    for i, r in enumerate(graph.roots):
        keys[r] = ("root", str(i))
    return keys


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


def _leaf_names(graph: AutogradGraph, names: _Names) -> dict[str, str]:
    """Leaf match names -> display names (after unwrapping wrappers and renamed modules)."""
    return {names.leaf(name): name for name in graph.leaves()}


@dataclass
class _Gradients:
    """Which leaves one graph's backward gives a gradient, by match name."""

    reached: set[str]  # leaves in the graph a gradient reaches (connected to a root)
    inside: dict[str, str]  # match name -> display name: parameters inside a reentrant checkpoint it runs
    unknown: bool  # a reentrant checkpoint it runs could not be inspected


def _gradients(graph: AutogradGraph, names: _Names) -> _Gradients:
    alive = surviving_nodes(graph.nx, set(), set())
    reached = {names.leaf(name) for name, n in graph.leaves().items() if n in alive}
    listed = graph.nx.graph.get("checkpoints") or {}
    inside: dict[str, str] = {}
    unknown = False
    for n, op in graph.nx.nodes(data="op"):
        if op != OPAQUE_CHECKPOINT or n not in alive:
            continue
        params = listed.get(n)
        if params is None:  # traced before checkpoints were listed, or a function holding no module
            unknown = True
            continue
        inside.update((names.leaf(p), p) for p in params)
    return _Gradients(reached, inside, unknown)


def _resize(g: nx.DiGraph, calls: list[dict[str, Any]]) -> None:
    tree = CallTree(calls)
    size = dict.fromkeys(tree.parent, 0)
    for _, call in g.nodes(data="call"):
        for holder in tree.chain(call):
            size[holder] = size.get(holder, 0) + 1
    for c in calls:
        c["size"] = size.get(c["id"], 0)


def _short(items: list[str], n: int = 6) -> str:
    return ", ".join(items[:n]) + (f", … ({len(items) - n} more)" if len(items) > n else "")


def _memory(graph: AutogradGraph) -> MemoryReport | None:
    """What ``graph`` held for backward, or None when it was traced after backward freed it."""
    try:
        return memory_held(graph)
    except GradvizError:
        return None

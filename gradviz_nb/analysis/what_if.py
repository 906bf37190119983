"""What-if: which leaves lose their gradient if some tensors are detached or some leaves frozen.

Pure NetworkX, no torch. The same rule lives in the page (``js/src/features/whatif/state.ts``) so a toggle
answers instantly with no kernel; ``tests/unit/test_what_if_agreement.py`` proves the two agree.

The rule, as PyTorch's re-run would behave:
1. A cut removes edge slots: detaching tensor ``(u, output_nr)`` removes every slot carrying that
   output; freezing a leaf removes every slot leaving it (its tensor no longer requires grad).
2. A node still exists in the re-run forward if it is an unfrozen leaf, or an op with at least one
   uncut input slot from a node that still exists (otherwise its output needs no grad: no node).
3. Backward runs a node if it still exists and reaches a root through uncut slots between existing
   nodes. A leaf loses its gradient when backward no longer runs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import networkx as nx

from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.calltree import CallTree

OutputRef = tuple[str, int]  # one output of a node: (node id, output_nr); not a torch.Tensor


@dataclass(frozen=True)
class WhatIf:
    """Answer of :meth:`AutogradGraph.what_if`.

    Attributes:
        lost: leaf names that would get no gradient.
        kept: leaf names that still get one.
        pruned: node ids the backward pass would no longer run.
        cut: the tensors detached, as ``(node id, output_nr)``.
        frozen: leaf node ids frozen (``requires_grad=False``).
        runs: ops and leaves backward still runs (roots excluded), of ``total``.
        total: ops and leaves in the graph (roots excluded).
        lost_ids: the node ids of ``lost`` (what the page's ``WhatIfAnswer.lost_ids`` holds).
    """

    lost: list[str]
    kept: list[str]
    pruned: list[str]
    cut: list[OutputRef]
    frozen: list[str]
    runs: int
    total: int
    lost_ids: list[str] = field(repr=False, default_factory=list)

    def __repr__(self) -> str:
        n_leaves = len(self.lost) + len(self.kept)
        shown = ", ".join(self.lost[:8]) + (", …" if len(self.lost) > 8 else "")
        head = f"{len(self.lost)} of {n_leaves} leaves lose gradient" + (f": {shown}" if self.lost else "")
        return f"<WhatIf {head}; backward runs {self.runs} of {self.total} nodes>"


def what_if(graph: nx.DiGraph, detach: Iterable[object] = (), freeze: Iterable[str] = ()) -> WhatIf:
    """Predict the effect of detaching tensors and freezing leaves; see :meth:`AutogradGraph.what_if`."""
    for name, value, what in (("detach", detach, "node ids, (node id, output_nr) pairs or module paths"),
                              ("freeze", freeze, "leaf names, leaf ids or module paths")):
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise GradvizError(f"what_if: {name} must be a list of {what}; got {value!r:.60} "
                               f"({type(value).__name__}). Example: what_if({name}=[...]).")
    cut = sorted({t for item in detach for t in _outputs(graph, item)})
    frozen = sorted({leaf for item in freeze for leaf in _leaves(graph, item)})
    alive = surviving_nodes(graph, set(cut), set(frozen))
    leaves = [n for n, k in graph.nodes(data="kind") if k == "leaf"]
    ops_and_leaves = [n for n, k in graph.nodes(data="kind") if k != "root"]
    lost_ids = [n for n in leaves if n not in alive]
    names = graph.nodes
    return WhatIf(
        lost=sorted(_leaf_label(names[n]) for n in lost_ids),
        kept=sorted(_leaf_label(names[n]) for n in leaves if n in alive),
        pruned=[n for n in ops_and_leaves if n not in alive],
        cut=cut,
        frozen=frozen,
        runs=sum(1 for n in ops_and_leaves if n in alive),
        total=len(ops_and_leaves),
        lost_ids=lost_ids,
    )


def surviving_nodes(graph: nx.DiGraph, cut: set[OutputRef], frozen: set[str]) -> set[str]:
    """Nodes the backward pass still runs (roots included) after the cuts: steps 2 and 3 above."""

    def open_slots(u: str, v: str) -> bool:
        return any((u, out) not in cut for out, _ in graph.edges[u, v]["slots"])

    exists: set[str] = set()
    for n in nx.topological_sort(graph):  # producers before consumers
        kind = graph.nodes[n]["kind"]
        if kind == "leaf":
            if n not in frozen:
                exists.add(n)
        elif any(u in exists and open_slots(u, n) for u in graph.predecessors(n)):
            exists.add(n)
    reaches: set[str] = set()
    stack = [r for r in graph.graph["roots"] if r in exists]
    reaches.update(stack)
    while stack:  # walk against the edges, as gradients flow
        v = stack.pop()
        for u in graph.predecessors(v):
            if u in exists and u not in reaches and open_slots(u, v):
                reaches.add(u)
                stack.append(u)
    return reaches


def _leaf_label(attrs: dict[str, object]) -> str:
    names = attrs.get("names")
    return names[0] if isinstance(names, list) and names else str(attrs["label"])


def _outputs(graph: nx.DiGraph, item: object) -> list[OutputRef]:
    """``(node, output_nr)``, a node id (all its outputs), or a module path / call id (its outputs)."""
    if isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2:
        node, out = item
        if node not in graph:
            raise GradvizError(f"detach: no node {node!r} in this graph.")
        return [(str(node), int(out))]
    if not isinstance(item, str):
        raise GradvizError(f"detach: expected a node id, (node, output_nr) or module path, got {item!r}.")
    if item in graph:
        return sorted({(item, out) for _, _, slots in graph.out_edges(item, data="slots") for out, _ in slots})
    members = _call_members(graph, item)
    if not members:
        raise GradvizError(
            f"detach: {item!r} is neither a node id nor a captured module call. Module paths need a graph "
            "traced with capture (gv.capture / gv.watch)."
        )
    return sorted({
        (u, out)
        for u in members
        for v, slots in ((v, graph.edges[u, v]["slots"]) for v in graph.successors(u))
        if v not in members
        for out, _ in slots
    })


def _call_members(graph: nx.DiGraph, name: str) -> set[str]:
    """Nodes inside the call whose id is ``name``; failing that, inside every call of module path ``name``.

    ``"block"`` is the first call's id, so it means that call only; ``"block (call 2)"`` the second.
    """
    calls = graph.graph.get("calls", [])
    chosen = {c["id"] for c in calls if c["id"] == name} or {c["id"] for c in calls if c["path"] == name}
    tree = CallTree(calls)
    return {n for n, d in graph.nodes(data=True) if d["kind"] != "leaf" and tree.inside(d["call"], chosen)}


def _leaves(graph: nx.DiGraph, item: str) -> list[str]:
    """A leaf id, a leaf name, or a module path (every leaf named under it)."""
    leaves = {n: d for n, d in graph.nodes(data=True) if d["kind"] == "leaf"}
    if item in leaves:
        return [item]
    named = [n for n, d in leaves.items() if item in d["names"]]
    if named:
        return named
    prefix = f"{item}."
    under = [n for n, d in leaves.items() if any(name.startswith(prefix) for name in d["names"])]
    if not under:
        raise GradvizError(f"freeze: {item!r} names no leaf or module with parameters in this graph.")
    return under

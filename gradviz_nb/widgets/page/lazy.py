"""Lazy payloads for big graphs: a compact skeleton first, a call's records when it opens.

A 50,000-node graph's eager payload (:func:`gradviz_nb.widgets.page.graph`) is ~25 MB of
JSON. In lazy mode the page first gets a skeleton (:func:`lazy_payload`): every module call, ghost,
fold group and the meta as in eager mode, the full node records of the calls open at first, and the
whole topology in compact arrays (``Wiring`` in ``js/src/payload.ts``: ids, kinds, calls, ops, labels,
leaf names, edge slots), a few tens of bytes per node. When the user opens a box, the page asks for
that call's records (a ``PageRequest`` of kind ``"load"``, body ``{"calls": [...]}``) and gets one
``Chunk`` per call (:func:`chunks`, sent by ``gradviz_nb.widgets.page.messages``): the eager records of
its direct member nodes and the shapes of the edge slots that touch them. Skeleton plus every chunk
rebuilds the eager payload exactly: the records come from the same functions, in the same order
(``tests/unit/test_lazy.py`` checks it).

Example::

    lazy = LazyGraph(g)                     # index once per graph: O(nodes + edges)
    page = lazy.skeleton(["", "blocks.0"])  # == lazy_payload(g, ["", "blocks.0"])
    lazy.chunks(["blocks.1"])               # [{"call": "blocks.1", "nodes": [...], "edge_shapes": [...]}]
"""

from __future__ import annotations

from collections.abc import Iterable

from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.widgets.page.contract import Chunk, EdgeShape, FoldGroup, GraphPayload, Wiring
from gradviz_nb.widgets.page.payload import edge_records, fold_groups, graph_meta, module_calls, node_record

LAZY_NODES = 4000  # GraphWidget goes lazy above this many nodes (when the graph has module calls)
KIND_CHARS = {"op": "o", "leaf": "l", "root": "r"}


class LazyGraph:
    """The index that makes the skeleton and each chunk cheap, built once per graph.

    It keeps each call's direct member nodes and the edge slots touching them, so one chunk costs
    O(members + incident slots), milliseconds on a 50,000-node graph. ``GraphWidget`` holds one.
    """

    def __init__(self, graph: AutogradGraph) -> None:
        g = graph.nx
        self.graph = graph
        self.ids: list[str] = list(g.nodes)
        self._calls = graph.calls
        self._parent = {c["id"]: c["parent"] for c in self._calls}
        position = {n: i for i, n in enumerate(self.ids)}
        node_calls: list[str] = [call for _, call in g.nodes(data="call")]
        self._members: dict[str, list[int]] = {"": [], **{c["id"]: [] for c in self._calls}}
        for i, call in enumerate(node_calls):
            self._members[call].append(i)
        self._slots: list[int] = []  # Wiring.edges: source, target, output_nr, input_nr per slot
        self._shapes: list[list[int] | None] = []
        self._incident: dict[str, list[int]] = {call: [] for call in self._members}
        for k, e in enumerate(edge_records(g)):
            s, t = position[e["source"]], position[e["target"]]
            self._slots += (s, t, e["output_nr"], e["input_nr"])
            self._shapes.append(e["shape"])
            self._incident[node_calls[s]].append(k)
            if node_calls[t] != node_calls[s]:
                self._incident[node_calls[t]].append(k)
        self._node_calls = node_calls
        self._wiring: Wiring | None = None
        self._folds: list[FoldGroup] | None = None

    def wiring(self) -> Wiring:
        """The whole topology in compact arrays (``Wiring`` in ``js/src/payload.ts``)."""
        if self._wiring is None:
            g = self.graph.nx
            index = {c["id"]: i for i, c in enumerate(self._calls)}
            ops: dict[str, int] = {}
            data = [g.nodes[n] for n in self.ids]
            self._wiring = {
                "ids": self.ids,
                "kinds": "".join(KIND_CHARS[d["kind"]] for d in data),
                "calls": [index[c] if c else -1 for c in self._node_calls],
                "op": [ops.setdefault(d["op"], len(ops)) for d in data],
                "ops": list(ops),
                "labels": [d["label"] for d in data],
                "names": {str(i): d["names"] for i, d in enumerate(data) if d["kind"] == "leaf"},
                "edges": self._slots,
            }
        return self._wiring

    def folds(self) -> list[FoldGroup]:
        """The graph's fold groups (:func:`~gradviz_nb.widgets.page.payload.fold_groups`), computed once."""
        if self._folds is None:
            self._folds = fold_groups(self.graph)
        return self._folds

    def close(self, loaded: Iterable[str]) -> list[str]:
        """``loaded`` with ``""`` and every ancestor added, in calls order (``""`` first).

        Raises :class:`GradvizError` naming any unknown call id."""
        wanted = self._known(loaded, "lazy_payload")
        closed = {""}
        for call in wanted:
            while call not in closed:
                closed.add(call)
                call = self._parent[call]
        return [""] + [c["id"] for c in self._calls if c["id"] in closed]

    def skeleton(self, loaded: Iterable[str] = ("",)) -> GraphPayload:
        """The first payload of a lazy page (see :func:`lazy_payload`)."""
        open_calls = self.close(loaded)
        g = self.graph.nx
        members = sorted(i for call in open_calls for i in self._members[call])
        slots = sorted({k for call in open_calls for k in self._incident[call]})
        return {
            "version": 1,
            "nodes": [node_record(self.ids[i], g.nodes[self.ids[i]]) for i in members],
            "edges": [],
            "calls": module_calls(self.graph),
            "ghosts": list(g.graph.get("ghosts", [])),
            "meta": graph_meta(self.graph, len(self._shapes)),
            "folds": self.folds(),
            "loaded": open_calls,
            "edge_shapes": [(k, self._shapes[k]) for k in slots],
            "wiring": self.wiring(),
        }

    def chunks(self, call_ids: Iterable[str]) -> list[Chunk]:
        """One ``Chunk`` per requested call (see :func:`chunks`), in the order asked, duplicates once."""
        g = self.graph.nx
        out: list[Chunk] = []
        for call in self._known(call_ids, "load"):
            nodes = [node_record(self.ids[i], g.nodes[self.ids[i]]) for i in self._members[call]]
            shapes: list[EdgeShape] = [(k, self._shapes[k]) for k in self._incident[call]]
            out.append({"call": call, "nodes": nodes, "edge_shapes": shapes})
        return out

    def all_chunks(self) -> dict[str, Chunk]:
        """Every call's chunk (``""`` included), by call id: what an exported page embeds."""
        return {c["call"]: c for c in self.chunks(self._members)}

    def _known(self, call_ids: Iterable[str], what: str) -> list[str]:
        if isinstance(call_ids, str):
            raise GradvizError(f"{what}: expected a list of module call ids, got the string {call_ids!r}.")
        wanted = list(call_ids)
        bad = [c for c in wanted if not isinstance(c, str) or c not in self._members]
        if bad:
            raise GradvizError(f"{what}: unknown module call id{'s' if len(bad) > 1 else ''} "
                               f"{', '.join(repr(c) for c in bad)} (ids are GraphPayload.calls[].id, '' = top level).")
        return list(dict.fromkeys(wanted))


def lazy_payload(graph: AutogradGraph, loaded: Iterable[str] = ("",)) -> GraphPayload:
    """The skeleton a lazy page starts from (``GraphPayload`` with ``wiring`` and ``loaded``).

    ``version``, ``calls``, ``ghosts``, ``meta`` and ``folds`` are as in the eager payload; ``nodes``
    holds the eager records of the direct members of the calls in ``loaded`` (``""``, the top level,
    always; ancestors of a loaded call are added), in eager order; ``edges`` is empty; ``wiring`` holds
    the whole topology. Raises :class:`GradvizError` for an unknown call id. Builds a fresh
    :class:`LazyGraph`; keep one to answer many requests. Example::

        skeleton = lazy_payload(g, ["", "blocks.0"])
        skeleton["loaded"], len(skeleton["wiring"]["ids"])
    """
    return LazyGraph(graph).skeleton(loaded)


def chunks(graph: AutogradGraph, call_ids: Iterable[str]) -> list[Chunk]:
    """The ``Chunk`` of each call in ``call_ids`` (``""`` = the top level): ``call``, ``nodes`` (the
    eager records of its direct member nodes, in eager order) and ``edge_shapes`` (``[slot index,
    shape]`` for every edge slot whose source or target is a member, slot order; a slot indexes
    ``wiring.edges`` / 4 and the eager ``edges``). Raises :class:`GradvizError` naming unknown ids.
    Builds a fresh :class:`LazyGraph`; keep one to answer many requests. Example::

        chunks(g, ["blocks.3"])[0]["nodes"][0]["op"]     # "NativeLayerNormBackward0"
    """
    return LazyGraph(graph).chunks(call_ids)

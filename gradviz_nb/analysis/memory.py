"""Memory held for backward: the bytes of tensors each node saved, from trace-time metadata.

The trace reads each saved tensor's raw handle (``SavedTensor.data``: no unpack, no recomputation) for
its size and its storage, so tensors sharing memory (``x * x``, q/k/v views of one projection, an
op's output saved again by the next op) are counted once. Each storage is charged to the earliest node
that saved it (it stays alive until backward frees that node, the last of its holders to run).
Parameters saved by an op (a Linear's weight) are held by the model anyway: reported apart.
Non-reentrant checkpointing shows up as nodes whose saved tensors a hook holds instead ("packed"):
their activations are recomputed in backward, so they are not held. Pure graph data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    ``unknown``: nodes with a saved slot holding no tensor (an unused optional input, or backward ran).
    """

    per_node: dict[str, int]
    per_call: dict[str, int]
    activations: int
    parameters: int
    packed: list[str]
    unknown: list[str]
    _graph: AutogradGraph = field(repr=False, compare=False)

    @property
    def total(self) -> int:
        return self.activations + self.parameters

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
        text = (
            f"saved for backward: {format_bytes(self.activations)} of activations"
            f" (+ {format_bytes(self.parameters)} of parameters the model holds anyway)"
        )
        if self.packed:
            text += f"; {len(self.packed)} nodes hold packed (checkpointed) tensors, recomputed in backward"
        return text

    def to_overlay(self, encoding: str = "size") -> dict[str, Any]:
        """The ``Overlay`` (``js/src/payload.ts``) drawing nodes and boxes by bytes; set it on
        ``GraphWidget.overlay``."""
        if encoding not in ("size", "color"):
            raise ValueError(f"encoding must be 'size' or 'color', got {encoding!r}")
        values: dict[str, float] = {n: float(b) for n, b in self.per_node.items() if b > 0}
        values.update({f"call:{c}": float(b) for c, b in self.per_call.items() if c and b > 0})
        return {"title": OVERLAY_TITLE, "values": values, "scale": "log", "encoding": encoding,
                "marks": {}, "unit": "B"}

    def __repr__(self) -> str:
        return f"<MemoryReport {self.summary()}>"


def memory_held(graph: AutogradGraph) -> MemoryReport:
    """Bytes each node keeps alive for backward, per node and per module call.

    Example::

        mem = gv.memory_held(g)
        print(mem.table(5))
        widget.overlay = mem.to_overlay("color")
    """
    g = graph.nx
    owner: dict[int, tuple[int, str, int, bool]] = {}  # storage -> (seq, node, bytes, is parameter)
    packed: list[str] = []
    unknown: list[str] = []
    for n, d in g.nodes(data=True):
        for s in d.get("saved", []):
            if s.get("packed"):
                packed.append(n)
            elif s.get("bytes") is None:
                unknown.append(n)
            elif s.get("storage") is not None:
                held = owner.get(s["storage"])
                if held is None or d["seq"] < held[0]:
                    owner[s["storage"]] = (d["seq"], n, int(s["storage_bytes"]), bool(s.get("param")))
    per_node = {n: 0 for n, k in g.nodes(data="kind") if k == "op"}
    params = 0
    for _, n, nbytes, is_param in owner.values():
        if is_param:
            params += nbytes
        else:
            per_node[n] += nbytes
    return MemoryReport(
        per_node=per_node,
        per_call=_per_call(graph, per_node),
        activations=sum(per_node.values()),
        parameters=params,
        packed=sorted(set(packed)),
        unknown=sorted(set(unknown)),
        _graph=graph,
    )


def _per_call(graph: AutogradGraph, per_node: dict[str, int]) -> dict[str, int]:
    parent = {c["id"]: c["parent"] for c in graph.calls}
    totals = dict.fromkeys(["", *parent], 0)
    for n, b in per_node.items():
        call = graph.nx.nodes[n]["call"]
        totals[""] += b
        while call:
            totals[call] += b
            call = parent.get(call, "")
    return totals


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")

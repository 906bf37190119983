"""``AutogradGraph``: the traced autograd DAG as a NetworkX graph of plain data."""

from __future__ import annotations

import difflib
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import networkx as nx

from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.schema import ModuleCallData

if TYPE_CHECKING:
    from gradviz_nb.analysis.what_if import WhatIf


class NotFoundError(GradvizError, KeyError):
    """No node or leaf by that name. A :class:`GradvizError` that is also a ``KeyError`` (what ``find``
    raised before), with the plain message (a ``KeyError`` would print it quoted)."""

    __str__ = GradvizError.__str__


class AutogradGraph:
    """The autograd graph behind one or more roots, as plain data in :attr:`nx`.

    Edges run in forward data-flow direction (``u -> v`` when ``v`` consumed a tensor ``u`` made);
    gradients flow against them. The records are typed in :mod:`gradviz_nb.tracing.schema` (one paragraph
    each below; tests/unit/test_schema.py checks these lists against it and real traces against both).

    Node attributes (NodeData): ``kind`` (``"op"``, ``"leaf"``, ``"root"``), ``op``, ``label``, ``module``,
    ``call``, ``name``, ``names``, ``shape``, ``dtype``, ``requires_grad``, ``seq``, ``saved``, ``value``
    (forward values of small tensors where known: leaves, roots, and ops whose forward ran inside
    ``gv.capture``; else None); on leaves of graphs saved by older versions only: ``stats`` and ``grad``
    (summaries of the tensor and its ``.grad`` made at trace time; a trace now reads no statistics, the
    details panel asks for them on demand, :mod:`gradviz_nb.tracing.summary`); on some nodes only: ``compiled`` (a
    torch.compile region), ``distributed``
    and ``note`` (an FSDP2 / DDP / DTensor node and what it does).

    Saved tensors (SavedData, in a node's ``saved``): ``name``, ``shape``, ``dtype``; for memory: ``bytes``,
    ``storage``, ``storage_bytes``, ``param``, ``packed``, ``freed``, ``checkpoint``, ``via``, ``sharded``.

    Edge attributes (EdgeData): ``output_nr``, ``input_nr``, ``shape``, and ``slots``: every
    ``[output_nr, input_nr]`` pair the edge carries (``x * x`` or two chunks of one node feeding one
    consumer give one edge with two slots).

    Graph attributes (GraphData): ``roots``, ``calls`` (module calls, parents first), ``ghosts`` (detached
    tensors and frozen parameters the backward graph does not show), ``modules`` (path -> type and parameter
    names), ``torch_version``, ``captured``, ``checkpoints`` (reentrant checkpoint node id -> names of the
    parameters its own inner backward reaches, which are not leaves of this graph; ``None`` when its
    function could not be inspected), ``notes``, ``distributed`` (data-parallel engines found).

    Module calls (ModuleCallData, in ``calls``): ``id``, ``path``, ``type``, ``index``, ``parent``, ``size``.

    Modules (ModuleData, values of ``modules``): ``type``, ``parameters``.

    Ghosts (GhostData, in ``ghosts``): ``id``, ``kind`` (``"detached"``, ``"frozen"``), ``label``,
    ``names``, ``shape``, ``source``, ``output_nr``, ``targets``, ``where``, ``line``, ``cut``, ``call``.

    Example::

        g = gv.trace(loss, model=model)
        g.leaves()            # {"fc1.weight": "n7", ...}
        g.nx.nodes["n0"]      # {"kind": "op", "op": "SumBackward0", ...}
    """

    def __init__(self, graph: nx.DiGraph) -> None:
        self.nx = graph
        self.tensors: dict[str, weakref.ref[Any]] = {}
        """Leaf node id -> weak reference to the tensor it was traced from (the details panel reads its values
        and ``.grad`` on demand, ``tracing/summary.py``); empty for a graph loaded, merged or copied. Not data:
        never saved, and it never keeps a tensor alive."""
        self.saved_params: dict[tuple[Any, int], int] | None = None
        """A parameter storage's key (``tracing.walk.storage_key``) -> its ``storage`` index in the saved
        entries, for the parameters some node saved; None for a graph loaded, merged or copied."""

    @property
    def roots(self) -> list[str]:
        """Ids of the root nodes (the tensors traced from), in the order given."""
        return list(self.nx.graph["roots"])

    @property
    def calls(self) -> list[ModuleCallData]:
        """Module calls that hold nodes of this graph (id, path, type, parent, index, size)."""
        return list(self.nx.graph["calls"])

    @property
    def notes(self) -> list[str]:
        """Plain-text notes for the user (e.g. how to get module boxes)."""
        return list(self.nx.graph["notes"])

    def nodes_of(self, kind: str) -> Iterator[str]:
        """The ids of the nodes of one kind (``"leaf"``, ``"op"``, ``"root"``)."""
        return (n for n, k in self.nx.nodes(data="kind") if k == kind)

    def leaves(self) -> dict[str, str]:
        """Every leaf name -> node id (a tied weight appears under each of its names)."""
        return {name: n for n in self.nodes_of("leaf") for name in self.nx.nodes[n]["names"]}

    def find(self, name: str) -> str:
        """Node id of a leaf name or a node id; raises :class:`NotFoundError` (a ``gv.GradvizError`` and a
        ``KeyError``) naming close matches otherwise (``"0.wieght"`` -> did you mean ``'0.weight'``)."""
        if isinstance(name, str) and name in self.nx:
            return name
        leaves = self.leaves()
        if name in leaves:
            return leaves[name]
        if not isinstance(name, str):
            raise NotFoundError(f"find() takes a leaf name or node id (a str), got {type(name).__name__}.")
        close = difflib.get_close_matches(name, list(leaves), n=5, cutoff=0.6)
        close += [n for n in leaves if name in n and n not in close][: 5 - len(close)]
        if close:
            hint = f"did you mean {', '.join(repr(c) for c in close)}?"
        elif leaves:
            hint = f"leaves are named like {', '.join(repr(n) for n in list(leaves)[:3])}; g.leaves() lists all."
        else:
            hint = "this graph has no named leaves: pass model= (or names={...}) to gv.trace."
        raise NotFoundError(f"no node or leaf named {name!r}: {hint}")

    def what_if(self, detach: Iterable[object] = (), freeze: Iterable[str] = ()) -> WhatIf:
        """Which leaves would lose their gradient if ``detach`` were detached and ``freeze`` frozen.

        ``detach``: ``(node id, output_nr)`` pairs, node ids (all their outputs) or module paths / call
        ids (that call's outputs). ``freeze``: leaf names, leaf ids or module paths (all their
        parameters). Pure graph reasoning, no torch; ``GraphWidget.from_fn`` checks it by re-running.

        Example::

            g.what_if(detach=["blocks.3"]).lost      # ["blocks.0.attn.c_attn.weight", ...]
            g.what_if(freeze=["fc1"])                 # <WhatIf 2 of 4 leaves lose gradient: ...>
        """
        # A declared facade (pyproject.toml [tool.importlinter]): the reasoning lives in analysis, which
        # imports nothing of tracing, so this lazy import makes no cycle.
        from gradviz_nb.analysis.what_if import what_if

        return what_if(self.nx, detach, freeze)

    def summary(self) -> str:
        """One line per kind and the most common ops, for a quick look."""
        kinds = Counter(k for _, k in self.nx.nodes(data="kind"))
        ops = Counter(d["op"] for _, d in self.nx.nodes(data=True) if d["kind"] == "op")
        top = ", ".join(f"{op} x{n}" for op, n in ops.most_common(5))
        lines = [
            f"AutogradGraph: {kinds['op']} ops, {kinds['leaf']} leaves, {kinds['root']} roots, "
            f"{self.nx.number_of_edges()} edges, {len(self.calls)} module calls",
            f"most common ops: {top}" if top else "no ops",
        ]
        return "\n".join(lines + self.notes)

    def __repr__(self) -> str:
        return self.summary().splitlines()[0]

    def __len__(self) -> int:
        return int(self.nx.number_of_nodes())

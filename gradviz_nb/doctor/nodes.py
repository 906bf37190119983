"""Where a finding points on the canvas: the node or module box of the graph the step traced."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gradviz_nb.doctor.observe import StepRecord

__all__ = ["call_node", "cut_node", "leaf_node", "op_base", "origin_node"]


def leaf_node(rec: StepRecord, names: Iterable[str]) -> str:
    """The leaf node of the first of ``names`` the step's graph holds, else ``""``."""
    leaves = rec.graph.leaves() if rec.graph is not None else {}
    return next((leaves[n] for n in names if n in leaves), "")


def cut_node(rec: StepRecord, names: Iterable[str]) -> str:
    """The op where a recorded detach()/.data of these parameters entered the graph (the cut's place)."""
    ghosts = rec.graph.nx.graph.get("ghosts", []) if rec.graph is not None else []
    hit = next((gh for gh in ghosts if gh["targets"] and set(names) & set(gh.get("cut", ()))), None)
    return str(hit["targets"][0]) if hit is not None else ""


def call_node(rec: StepRecord, path: str) -> str:
    """The box of the first call of module ``path`` (``call:<id>``), else ``""``."""
    if rec.graph is None or not path:
        return ""
    call = next((c for c in rec.graph.calls if c["path"] == path), None)
    return f"call:{call['id']}" if call is not None else ""


def op_base(op: str) -> str:
    """``aten.log.default`` / ``LogBackward0`` -> ``log``: the op's name as forward and backward share it."""
    if op.startswith("aten."):
        op = op.split(".")[1]
    return re.sub(r"Backward\d*$", "", op).replace("_", "").lower()


def origin_node(rec: StepRecord, path: str, op: str) -> str:
    """The traced node of the op where the NaN/Inf was born: the one node of module ``path`` with that op
    (its grad_fn for a backward birth); its module box when there are several or none."""
    if rec.graph is not None:
        base = op_base(op)
        hits = [n for n, d in rec.graph.nx.nodes(data=True)
                if d.get("kind") == "op" and d.get("module", "") == path and op_base(str(d.get("op", ""))) == base]
        if len(hits) == 1:
            return str(hits[0])
    return call_node(rec, path)

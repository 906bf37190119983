"""The ``values`` request: a selected leaf's value and ``.grad`` summaries, read when the page asks.

A trace reads no statistics (``gradviz_nb.tracing.summary``: that was most of what tracing cost); the
details panel sends ``{"kind": "values", "body": {"node": "n12"}}`` when a leaf is selected, and the
reply body (``ValuesReplyBody``) holds the summary of the tensor and of its ``.grad`` as they are NOW,
read through the graph's weak reference (``AutogradGraph.tensors``): the widget never keeps the model
alive, and a tensor that is gone says so. An exported page answers from summaries made ahead of time,
within a budget (:func:`export_answers`); anything else is "not saved in this export".

Example::

    values_body(g, {"node": g.find("fc1.weight")})["grad"]["norm"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.tracing.summary import STATS_BUDGET, STATS_MAX, Summarizer, readable, summarize
from gradviz_nb.widgets.page.contract import ValuesReplyBody
from gradviz_nb.widgets.page.finite_json import finite_json

GONE = "the tensor is gone (nothing else referenced it); trace again to read its values"
UNKNOWN = "this graph holds no live tensors (loaded, merged or made by an older version): trace it again"
NOT_READ = "not read: a tensor subclass (e.g. an FSDP2 shard) or unallocated storage"
NOT_SAVED = "not saved in this export"
# An exported page carries the summaries of leaves up to STATS_MAX elements (a million), their .grad
# included, until STATS_BUDGET elements (8.4 million, about 10 ms of reductions) are summarized.
EXPORT_LARGEST, EXPORT_BUDGET = STATS_MAX, STATS_BUDGET


def _reply(node: str, missing: str = "", value: Any = None, grad: Any = None) -> ValuesReplyBody:
    body: ValuesReplyBody = {"node": node, "value": value, "grad": grad, "missing": missing}
    out: ValuesReplyBody = finite_json(body)  # a norm that overflowed to inf travels as "Infinity"
    return out


def values_body(graph: AutogradGraph, body: Mapping[str, Any]) -> ValuesReplyBody:
    """The reply body for ``{"kind": "values", "body": {"node": id}}``: the leaf's summary and its
    ``.grad``'s (None: ``.grad`` is None), or ``missing`` saying why nothing was read. Raises
    :class:`GradvizError` for a bad body or a node that is no leaf of this graph."""
    node = body.get("node")
    if not isinstance(node, str):
        raise GradvizError(f"values: 'node' must be a node id (a string), got {type(node).__name__}.")
    if node not in graph.nx or graph.nx.nodes[node]["kind"] != "leaf":
        raise GradvizError(f"values: {node[:80]!r} is no leaf of this graph (only leaves have values to read).")
    if not graph.tensors:
        return _reply(node, UNKNOWN)
    ref = graph.tensors.get(node)
    t = ref() if ref is not None else None
    if t is None:
        return _reply(node, GONE)
    if not readable(t):
        return _reply(node, NOT_READ)
    return _reply(node, "", summarize(t), summarize(t.grad))


def export_answers(graph: AutogradGraph, largest: int = EXPORT_LARGEST,
                   budget: int = EXPORT_BUDGET) -> dict[str, ValuesReplyBody]:
    """Leaf node id -> reply body, for an exported page: leaves whose tensor (and ``.grad``) have at most
    ``largest`` elements, smallest first, until ``budget`` elements are summarized. The page answers
    "not saved in this export" for the rest."""
    live = []
    for node, ref in graph.tensors.items():
        t = ref()
        if t is not None and node in graph.nx and readable(t):
            live.append((t.numel(), node, t))
    live.sort(key=lambda x: (x[0], x[1]))
    fits = Summarizer(budget, largest).fits
    out: dict[str, ValuesReplyBody] = {}
    for _, node, t in live:
        grad = t.grad
        if not fits(t):
            break
        if grad is not None and not fits(grad):
            break
        out[node] = _reply(node, "", summarize(t), summarize(grad))
    return out

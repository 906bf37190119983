"""The ``why`` request: why a selected leaf's gradient is what it is, asked from the details panel.

The page sends ``{"kind": "why", "body": {"node": "n12"}}`` when the user presses "Why?" on a leaf; the
reply body (``WhyReplyBody``) carries ``gradviz_nb.doctor.why.why(source, name).to_dict()`` for the
leaf's parameter name, ``source`` being what the widget was built from (its graph, or the doctor's
``Diagnosis``, which knows more). The doctor's ``why`` is imported when asked, so the page works (and
says so) where that module is missing. An exported page answers from replies made ahead of time for
the leaves within a budget (:func:`export_answers`); anything else is "not saved in this export".

Example::

    why_body(g, g, {"node": g.find("fc1.weight")})["answer"]["status"]   # "ok", "none", ...
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.widgets.page.contract import WhyAnswer, WhyReplyBody

log = logging.getLogger("gradviz_nb")

NOT_AVAILABLE = "not available: this version of gradviz_nb has no gradviz_nb.doctor.why"
NOT_SAVED = "not saved in this export"
FIELDS = ("name", "status", "kind", "cause", "evidence", "fix", "node")
# An exported page carries the answers of at most this many leaves (each one walks the graph).
EXPORT_MAX = 200


PARAM_PREFIX = "p:"
"""The page's id of a parameter outside the graph (``"p:<name>"``, js/src/state/unreached.ts)."""


def unreached(graph: AutogradGraph) -> list[str]:
    """Parameters a cut left outside the graph: named in a detached ghost's ``cut``, carried by no leaf (a
    dead adapter). The page draws them as that ghost, finds them by search and asks ``why`` about them."""
    leaves = graph.leaves()
    names = (n for g in graph.nx.graph.get("ghosts", []) for n in g.get("cut", []))
    return [n for n in dict.fromkeys(names) if n not in leaves]


def leaf_name(graph: AutogradGraph, node: Any) -> str:
    """The parameter name ``why`` is asked about for leaf ``node`` (or ``"p:<name>"``, a parameter a cut left
    outside the graph); :class:`GradvizError` for a bad id."""
    if not isinstance(node, str):
        raise GradvizError(f"why: 'node' must be a node id (a string), got {type(node).__name__}.")
    if node.startswith(PARAM_PREFIX) and node[len(PARAM_PREFIX):] in unreached(graph):
        return node[len(PARAM_PREFIX):]
    if node not in graph.nx or graph.nx.nodes[node]["kind"] != "leaf":
        raise GradvizError(f"why: {node[:80]!r} is no leaf of this graph (only leaves have a gradient to explain).")
    data = graph.nx.nodes[node]
    names: list[str] = list(data.get("names") or [])
    return names[0] if names else str(data.get("label") or node)


def _answer(result: Any) -> WhyAnswer:
    """``Why.to_dict()`` cut to the contract's fields, each as text (what the panel shows)."""
    raw = result.to_dict()
    return cast(WhyAnswer, {k: "" if raw.get(k) is None else str(raw.get(k)) for k in FIELDS})


def why_body(source: Any, graph: AutogradGraph, body: Mapping[str, Any]) -> WhyReplyBody:
    """The reply body for ``{"kind": "why", "body": {"node": id}}``: the doctor's answer for that leaf's
    parameter, or ``missing`` saying why there is none. Raises :class:`GradvizError` for a bad body (and
    passes on the doctor's own refusals)."""
    node = body.get("node")
    name = leaf_name(graph, node)
    try:
        from gradviz_nb.doctor.why import why
    except ImportError:
        return {"node": cast(str, node), "answer": None, "missing": NOT_AVAILABLE}
    return {"node": cast(str, node), "answer": _answer(why(source, name)), "missing": ""}


def export_answers(source: Any, graph: AutogradGraph, leaves: list[str],
                   limit: int = EXPORT_MAX) -> dict[str, WhyReplyBody]:
    """Leaf node id -> reply body, for an exported page: the first ``limit`` of ``leaves`` (the ones whose
    values the export carries come first). Empty when the doctor's ``why`` is missing; a leaf whose
    question the doctor refuses gets that refusal as its ``missing`` text."""
    try:
        import gradviz_nb.doctor.why  # noqa: F401
    except ImportError:
        return {}
    out: dict[str, WhyReplyBody] = {}
    for node in leaves[:limit]:
        try:
            out[node] = why_body(source, graph, {"node": node})
        except GradvizError as err:
            out[node] = {"node": node, "answer": None, "missing": str(err)}
        except Exception as err:  # a bug of the doctor's must not stop the export: logged, and the page says it
            log.exception("why %r failed while exporting", node)
            out[node] = {"node": node, "answer": None, "missing": f"why failed: {type(err).__name__}: {err}"[:300]}
    return out

"""Messages between the page and the kernel: one envelope, one dispatcher.

Page -> kernel (``PageRequest``): ``{"id": 7, "kind": "load", "body": {"calls": ["blocks.0"]}}`` or
``{"id": 8, "kind": "verify", "body": {}}`` (``"values"`` and ``"why"`` take ``{"node": "n12"}``).
Kernel -> page (``PageReply``), the same id:
``{"id": 7, "kind": "reply", "ok": True, "body": {"chunks": [...]}}`` (``{}`` for verify, whose result
arrives in the ``verified`` trait), or ``{"id": 7, "kind": "reply", "ok": False, "error": "..."}``.

:func:`dispatch` never raises: a message that is not a dict or has no int id is logged (logger
``"gradviz_nb"``) and ignored; an unknown kind, a bad body or a failing handler is logged and answered
with ``ok: False`` and a message a user can act on. The exported page answers through the same
functions: :func:`answers` runs :func:`load_body` for every module call ahead of time, and the page's
fake model only looks the bodies up and wraps them with the request's id (``gradviz_nb.export.html``).

Example::

    handlers = {"load": lambda body: load_body(lazy, body)}
    dispatch({"id": 1, "kind": "load", "body": {"calls": [""]}}, handlers)   # {"id": 1, "ok": True, ...}
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from gradviz_nb.errors import GradvizError
from gradviz_nb.widgets.page.contract import Chunk, Empty, LoadReplyBody, PageReply, ValuesReplyBody, WhyReplyBody
from gradviz_nb.widgets.page.finite_json import finite_nodes
from gradviz_nb.widgets.page.lazy import LazyGraph

log = logging.getLogger("gradviz_nb")

Body = LoadReplyBody | ValuesReplyBody | WhyReplyBody | Empty
Handler = Callable[[Mapping[str, Any]], Body]


class Answers(TypedDict):
    """What an exported page (no kernel) answers from: each request kind's reply bodies by argument
    (``"load"``: call id -> the body :func:`load_body` gives for that one call; ``"values"``: leaf node id
    -> the body ``page.values.values_body`` gives, for the leaves within the export's budget; ``"why"``:
    leaf node id -> the body ``page.why.why_body`` gives, for the first leaves)."""

    load: dict[str, LoadReplyBody]
    values: dict[str, ValuesReplyBody]
    why: dict[str, WhyReplyBody]


def load_body(lazy: LazyGraph, body: Mapping[str, Any]) -> LoadReplyBody:
    """The body of the reply to ``{"kind": "load", "body": {"calls": [...]}}``: one ``Chunk`` per call,
    in the order asked (duplicates once), JSON-safe. Raises :class:`GradvizError` for a bad body."""
    calls = body.get("calls")
    if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
        raise GradvizError("load: 'calls' must be a list of module call ids (strings), got "
                           f"{_shown(calls)} ({type(calls).__name__}).")
    chunks: list[Chunk] = [finite_nodes(c) for c in lazy.chunks(calls)]
    return {"chunks": chunks}


def answers(lazy: LazyGraph | None, values: dict[str, ValuesReplyBody] | None = None,
            why: dict[str, WhyReplyBody] | None = None) -> Answers:
    """Every reply body an exported page may need, computed by the kernel's own handlers (``values``:
    ``page.values.export_answers(graph)``, ``why``: ``page.why.export_answers(...)``)."""
    if lazy is None:
        return {"load": {}, "values": values or {}, "why": why or {}}
    calls = ["", *(c["id"] for c in lazy.graph.calls)]
    return {"load": {call: load_body(lazy, {"calls": [call]}) for call in calls}, "values": values or {},
            "why": why or {}}


def reply(request_id: int, body: Body) -> PageReply:
    """The successful reply to request ``request_id`` with ``body``."""
    return {"id": request_id, "kind": "reply", "ok": True, "body": body}


def failure(request_id: int, error: str) -> PageReply:
    """The failed reply to request ``request_id``, with the error the page shows."""
    return {"id": request_id, "kind": "reply", "ok": False, "error": error}


def dispatch(message: object, handlers: Mapping[str, Handler]) -> PageReply | None:
    """The reply to one page message (``None``: nothing to reply to); never raises."""
    if not isinstance(message, Mapping):
        log.warning("page message ignored: expected a JSON object, got %s", type(message).__name__)
        return None
    request_id = message.get("id")
    if not isinstance(request_id, int) or isinstance(request_id, bool):
        log.warning("page message ignored: no integer 'id' (kind %s)", _shown(message.get("kind")))
        return None
    kind, body = message.get("kind"), message.get("body", {})
    # Look kinds up by string only: a list or dict kind (unhashable) is refused like any unknown one.
    handler = handlers.get(kind) if isinstance(kind, str) else None
    if handler is None:
        known = ", ".join(sorted(handlers)) or "none"
        return _failed(request_id, f"unknown request kind {_shown(kind)} (this widget answers: {known}).")
    if not isinstance(body, Mapping):
        return _failed(request_id, f"{kind}: 'body' must be a JSON object, got {type(body).__name__}.")
    try:
        return reply(request_id, handler(body))
    except GradvizError as err:
        return _failed(request_id, str(err))
    except Exception as err:  # a bug of ours: logged with its traceback, and the page is told
        log.exception("page request %r failed", kind)
        text = str(err)
        return failure(request_id, f"{kind} failed: {type(err).__name__}: {text[:300]}")


def _shown(value: object) -> str:
    """A page-sent value in a message: its repr, cut short (a page may send anything)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _failed(request_id: int, error: str) -> PageReply:
    log.warning("page request %d refused: %s", request_id, error)
    return failure(request_id, error)

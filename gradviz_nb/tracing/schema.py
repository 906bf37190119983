"""The data model's schema as code: what :func:`gv.trace` puts on an :class:`AutogradGraph`'s nodes, edges and
graph, one ``TypedDict`` each.

These are the plain-data records of ``AutogradGraph.nx`` (JSON-ready: ``gv.to_json`` writes them as they are).
The page's records (``js/src/payload.ts``) are built from them but are another contract. The docstring of
:class:`~gradviz_nb.tracing.graph.AutogradGraph` lists these fields; tests/unit/test_schema.py checks that it
lists exactly them, and validates real traces against them with :func:`schema_problems`.
"""


import functools
import types
import typing
from typing import Any, Literal, NotRequired, Required, TypedDict, Union, cast

import networkx as nx

from gradviz_nb.tracing.summary import TensorSummary


class SavedData(TypedDict, total=False):
    """One tensor a node saved for backward, read without unpacking it (``tracing/walk.py``)."""

    name: Required[str]  # "self", "result", "mat2", "ctx.saved[0]", ...
    shape: Required[list[int] | None]
    dtype: Required[str]
    bytes: int | None  # the tensor's own bytes; None when backward already freed it
    storage: int | None  # index of its storage in this walk (shared storage is counted once)
    storage_bytes: int
    param: bool  # the storage is a parameter's (held anyway, not by backward)
    packed: bool  # a saved-tensor hook holds something else instead (checkpoint, offload)
    freed: bool  # backward ran and freed it
    checkpoint: int  # index of the non-reentrant checkpoint frame that holds it
    via: str  # how a custom Function's ctx holds it ("ctx", ...)
    sharded: bool  # a DTensor: bytes and storage are this rank's piece


class NodeData(TypedDict):
    """One node of the graph: an autograd op, a leaf (parameter or input that requires grad), or a root."""

    kind: Literal["op", "leaf", "root"]
    op: str  # autograd node name ("MmBackward0", "AccumulateGrad"); "" for roots
    label: str  # short text drawn on the node
    module: str  # path of the module whose forward made it ("" = top level or unknown)
    call: str  # id of the module call holding it ("blocks.0", "blocks.0 (call 2)"; "" = none)
    name: str  # a leaf's first name ("" for ops and unnamed leaves)
    names: list[str]  # every name of a leaf (a tied weight has several)
    shape: list[int] | None  # shape of its (first) output
    dtype: str
    requires_grad: bool
    seq: int  # autograd sequence number (-1 for leaves and roots)
    saved: list[SavedData]
    value: list[float] | None  # forward values of small tensors, where known
    stats: NotRequired[TensorSummary | None]  # leaves over SMALL elements: first values, statistics
    grad: NotRequired[TensorSummary | None]  # leaves: their .grad when traced (None: it was None)
    compiled: NotRequired[bool]  # a torch.compile region (CompiledFunctionBackward): its ops are not autograd nodes
    distributed: NotRequired[str]  # a data-parallel engine's node ("fsdp2", "ddp", "dtensor")
    note: NotRequired[str]  # what such a node does (where the collectives run)


class EdgeData(TypedDict):
    """One edge ``u -> v`` (forward direction: ``v`` consumed a tensor ``u`` made)."""

    output_nr: int  # which output of ``u`` (first slot)
    input_nr: int  # which input of ``v`` (first slot)
    shape: list[int] | None
    slots: list[list[int]]  # every [output_nr, input_nr] pair this edge carries


class ModuleCallData(TypedDict):
    """One module call of the data model (``graph["calls"]``, parents first)."""

    id: str  # "blocks.0", or "blocks.0 (call 2)" for a module called more than once
    path: str  # module path
    type: str  # module class name
    index: int  # 1 for the first call of that path, 2 for the next, ...
    parent: str  # id of the enclosing call ("" = top level)
    size: int  # nodes inside, nested calls included


class ModuleData(TypedDict):
    """One module of the model (``graph["modules"][path]``)."""

    type: str
    parameters: list[str]  # full names of its own parameters


class GhostData(TypedDict):
    """A tensor the backward graph does not show: a ``.detach()``/``.data`` result or a frozen parameter."""

    id: str  # "g0", "g1", ...
    kind: Literal["detached", "frozen"]
    label: str
    names: list[str]  # a frozen parameter's name; empty for detached tensors
    shape: list[int]
    source: str | None  # node whose output was detached (None: not in this graph)
    output_nr: int
    targets: list[str]  # nodes that consumed it
    where: str  # module path whose forward made it
    line: str  # "file:line" of the user code that made it
    cut: list[str]  # parameters upstream of a detached tensor: their gradient path ends here
    call: str  # module call it is drawn in ("" = top level)


class GraphData(TypedDict):
    """The graph's own attributes (``g.nx.graph``)."""

    roots: list[str]  # root node ids, in the order traced
    calls: list[ModuleCallData]
    ghosts: list[GhostData]
    modules: dict[str, ModuleData]  # module path -> type and parameter names ({} without a model)
    torch_version: str
    captured: bool  # module calls were recorded (boxes can be drawn)
    checkpoints: dict[str, list[str] | None]  # reentrant checkpoint node -> parameters its hidden backward reaches
    notes: list[str]  # plain-text notes for the user
    distributed: NotRequired[list[str]]  # data-parallel engines found ("fsdp2", "ddp", "dtensor")


def fields(record: type) -> list[str]:
    """The field names of one of the records above, in declaration order."""
    return list(typing.get_type_hints(record))


def schema_problems(graph: nx.DiGraph, limit: int = 20) -> list[str]:
    """What in ``graph`` does not match the schema: unknown or missing keys, values of the wrong type.

    Empty for a graph :func:`gv.trace` made. Keys a newer tracer added without adding them here show up as
    ``unknown key``, so the schema and the tracer cannot drift apart silently. Example::

        assert not schema_problems(gv.trace(loss, model=model).nx)
    """
    problems = _check(dict(graph.graph), GraphData, "graph")
    for n, attrs in graph.nodes(data=True):
        problems += _check(attrs, NodeData, f"node {n!r}")
    for u, v, attrs in graph.edges(data=True):
        problems += _check(attrs, EdgeData, f"edge {u!r} -> {v!r}")
    return problems[:limit] + ([f"... and {len(problems) - limit} more"] if len(problems) > limit else [])


@functools.cache
def _hints(schema: type) -> dict[str, Any]:
    return typing.get_type_hints(schema)  # once per record type: from_json checks every node


def _check(record: dict[str, Any], schema: type, where: str) -> list[str]:
    hints = _hints(schema)
    required: frozenset[str] = getattr(schema, "__required_keys__", frozenset(hints))
    unknown = sorted(set(record) - set(hints))
    missing = sorted(required - set(record))
    problems = [f"{where}: unknown key {k!r} (add it to {schema.__name__} in gradviz_nb/tracing/schema.py)"
                for k in unknown]
    problems += [f"{where}: missing key {k!r} of {schema.__name__}" for k in missing]
    for key, value in record.items():
        if key in hints and not _fits(value, hints[key]):
            problems.append(f"{where}: {key!r} = {_short(value)} is not {_name(hints[key])}")
        inner = _records_of(hints[key]) if key in hints else None
        if inner is not None and isinstance(value, (list, dict)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            problems += [p for i, item in items if isinstance(item, dict)
                         for p in _check(item, inner, f"{where} {key}[{i!r}]")]
    return problems


@functools.cache
def _parts(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """``get_origin`` and ``get_args`` of a hint, once per hint: from_json checks every node with them."""
    return typing.get_origin(hint), typing.get_args(hint)


@functools.cache
def _records_of(hint: Any) -> type | None:
    """The TypedDict ``X`` when ``hint`` is ``list[X]`` or ``dict[str, X]``, else None."""
    origin, args = _parts(hint)  # get_type_hints already dropped Required/NotRequired
    if origin in (list, dict) and args and typing.is_typeddict(args[-1]):
        return cast(type, args[-1])
    return None


def _fits(value: Any, hint: Any) -> bool:
    """Coarse runtime check of ``value`` against a type hint (containers one level down, records by keys)."""
    origin, args = _parts(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is Literal:
        return value in args
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if typing.is_typeddict(hint):
        return isinstance(value, dict)  # its keys are checked by _check
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    return isinstance(value, hint)


def _name(hint: Any) -> str:
    if type(hint) is type:  # int, str: "int", not "<class 'int'>"
        return hint.__name__
    return str(hint).replace("typing.", "").replace("gradviz_nb.tracing.schema.", "")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

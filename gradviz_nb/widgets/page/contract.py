"""The Python half of the page contract: one ``TypedDict`` per exported interface of ``js/src/payload.ts``
(same names, same fields; ``?`` fields are ``NotRequired``), and :class:`Traits`, the widget's synced
traits as the page's ``Traits`` interface reads them. ``tests/unit/test_page_contract.py`` reads the
TypeScript with the compiler (``js/scripts/contract.mjs``) and fails on any difference.

Numbers are ``int | float`` (JSON has one number type); a TS ``Partial<X>`` trait (``{}`` for none) is
``X | Empty``; an inline TS object type is a TypedDict that has no TS name (:class:`SavedTensor`).
No ``from __future__ import annotations`` here: ``NotRequired`` must be seen by ``TypedDict`` itself.
"""

from typing import Literal, NotRequired, TypedDict

# Exactly the exported names of js/src/payload.ts, plus Traits; the rest here are helpers for them.
__all__ = [
    "CheckpointInput", "CheckpointMode", "CheckpointOp", "CheckpointTable", "CheckpointVerification",
    "Chunk", "DiffStatus", "DoctorFinding", "FoldGroup", "GhostTensor", "GraphDiff", "GraphEdge", "GraphMeta",
    "GraphNode", "GraphPayload", "LoadBody", "LoadReplyBody", "ModuleCall", "Overlay", "PageReply", "PageRequest",
    "RecordedGrad", "RecordedStep", "Recording", "TensorSummary", "Toggles", "Traits", "ValuesBody", "ValuesReplyBody",
    "Verification", "VerifyBody", "WhatIfAnswer", "WhyAnswer", "WhyReplyBody", "Wiring",
]

Number = int | float
Shape = list[int] | None


class Empty(TypedDict):
    """``{}``: a trait with nothing to show (TS ``Partial<X>``), or a body with no fields
    (TS ``Record<string, never>``)."""


class SavedTensor(TypedDict):
    """``GraphNode.saved`` items (an inline object type in TS)."""

    name: str
    shape: Shape
    dtype: str


class TensorSummary(TypedDict):
    """``TensorSummary`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    numel: int
    head: list[Number | str]
    norm: Number | None
    mean: Number | None
    std: Number | None
    min: Number | None
    max: Number | None
    nonfinite: int | None
    skipped: str


class GraphNode(TypedDict):
    """``GraphNode`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    id: str
    kind: Literal["op", "leaf", "root"]
    op: str
    label: str
    module: str
    call: str
    names: list[str]
    shape: Shape
    dtype: str
    requires_grad: bool
    saved: list[SavedTensor]
    value: list[Number] | None
    stats: NotRequired[TensorSummary | None]
    grad: NotRequired[TensorSummary | None]


class GraphEdge(TypedDict):
    """``GraphEdge`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    source: str
    target: str
    output_nr: int
    input_nr: int
    shape: Shape


class ModuleCall(TypedDict):
    """``ModuleCall`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    id: str
    path: str
    type: str
    parent: str
    index: int
    size: int


class GraphMeta(TypedDict):
    """``GraphMeta`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    torch_version: str
    captured: bool
    notes: list[str]
    num_nodes: int
    num_edges: int
    prefix: NotRequired[str]


class Wiring(TypedDict):
    """``Wiring`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    ids: list[str]
    kinds: str
    calls: list[int]
    ops: list[str]
    op: list[int]
    labels: list[str]
    names: dict[str, list[str]]
    edges: list[int]


class FoldGroup(TypedDict):
    """``FoldGroup`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    id: str
    calls: list[str]
    parent: str
    type: str


class GhostTensor(TypedDict):
    """``GhostTensor`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    id: str
    kind: Literal["detached", "frozen"]
    label: str
    names: list[str]
    shape: Shape
    source: str | None
    output_nr: int
    targets: list[str]
    call: str
    where: str
    line: str
    cut: list[str]


EdgeShape = tuple[int, Shape]


class GraphPayload(TypedDict):
    """``GraphPayload`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    version: Literal[1]
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    calls: list[ModuleCall]
    ghosts: list[GhostTensor]
    meta: GraphMeta
    wiring: NotRequired[Wiring]
    loaded: NotRequired[list[str]]
    edge_shapes: NotRequired[list[EdgeShape]]
    folds: NotRequired[list[FoldGroup]]


class Chunk(TypedDict):
    """``Chunk`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    call: str
    nodes: list[GraphNode]
    edge_shapes: list[EdgeShape]


class LoadBody(TypedDict):
    """``LoadBody`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    calls: list[str]


class ValuesBody(TypedDict):
    """``ValuesBody`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    node: str


class VerifyBody(TypedDict):
    """``VerifyBody`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    question: str


class PageRequest(TypedDict):
    """Page -> kernel: ``{"id": 7, "kind": "load", "body": {"calls": [...]}}``, kind ``"verify"`` with body
    ``{"question": "whatif"}`` (a question of ``gradviz_nb.widgets.questions``), or kind ``"values"`` with
    body ``{"node": "n12"}``."""

    id: int
    kind: Literal["load", "verify", "values", "why"]
    body: LoadBody | ValuesBody | VerifyBody | Empty


class LoadReplyBody(TypedDict):
    """``LoadReplyBody`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    chunks: list[Chunk]


class ValuesReplyBody(TypedDict):
    """``ValuesReplyBody`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    node: str
    value: TensorSummary | None
    grad: TensorSummary | None
    missing: str


class WhyAnswer(TypedDict):
    """``gradviz_nb.doctor.why.Why.to_dict()``: status "ok" | "none" | "zero" | "tiny" | "scaled"."""

    name: str
    status: str
    kind: str
    cause: str
    evidence: str
    fix: str
    node: str


class WhyReplyBody(TypedDict):
    """``WhyReplyBody`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    node: str
    answer: WhyAnswer | None
    missing: str


class PageReply(TypedDict):
    """Kernel -> page: ``{"id": 7, "kind": "reply", "ok": True, "body": {...}}`` or ``ok: False`` with
    ``error``, text a user can act on."""

    id: int
    kind: Literal["reply"]
    ok: bool
    body: NotRequired[LoadReplyBody | ValuesReplyBody | WhyReplyBody | Empty]
    error: NotRequired[str]


class Toggles(TypedDict):
    """``Toggles`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    detach: list[str]
    freeze: list[str]


class WhatIfAnswer(TypedDict):
    """``WhatIfAnswer`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    lost_ids: list[str]  # node ids; every other ``lost`` field holds leaf names
    pruned: list[str]
    runs: int
    total: int


class Verification(TypedDict):
    """``Verification`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    toggles: Toggles
    predicted_lost: list[str]
    checked_lost: NotRequired[list[str]]
    actual_lost: list[str]
    agree: bool
    complete: NotRequired[bool]
    unverifiable: list[str]
    error: str


Mark = Literal["no-grad", "nan", "flag"]


# One row of an overlay's per-element detail: a label and its text (e.g. a parameter and its norm).
OverlayRow = tuple[str, str]


class Overlay(TypedDict):
    """``Overlay`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    title: str
    values: dict[str, Number]
    scale: Literal["log", "linear"]
    encoding: Literal["color", "size"]
    marks: dict[str, Mark]
    unit: str
    detail: NotRequired[dict[str, list[OverlayRow]]]


class RecordedGrad(TypedDict):
    """``RecordedGrad`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    shape: list[int]
    norm: Number
    mean: Number
    max_abs: Number
    nonfinite: bool
    value: list[Number] | None


# Functional syntax: the field `pass` is a Python keyword.
RecordedStep = TypedDict("RecordedStep", {
    "node": str,
    "op": str,
    "pass": int,
    "received": list[RecordedGrad | None],
    "sent": list[RecordedGrad | None],
    "deliveries": list[tuple[str, int, int]],
    "leaf_before": RecordedGrad | None,
    "leaf_after": RecordedGrad | None,
    "explain": list[str],
})


class Recording(TypedDict):
    """``Recording`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    passes: int
    steps: list[RecordedStep]
    values: dict[str, list[Number]]
    forward: NotRequired[str]


DiffStatus = Literal["added", "removed", "changed", "same"]


class GraphDiff(TypedDict):
    """``GraphDiff`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    status: dict[str, DiffStatus]
    why: dict[str, str]
    added_leaves: list[str]
    removed_leaves: list[str]
    gained: list[str]
    lost: list[str]
    hidden: list[str]
    memory: dict[str, tuple[int, int]]
    memory_total: tuple[int, int]
    summary: str


class DoctorFinding(TypedDict):
    """``DoctorFinding`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    kind: str
    target: str
    message: str
    evidence: str
    fix: str
    step: int
    node: str
    scope: str


CheckpointMode = Literal["non_reentrant", "reentrant"]


class CheckpointOp(TypedDict):
    """``CheckpointOp`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    id: str
    call: str
    seq: int
    flops: int
    saved: list[int]
    packs: bool
    saves_output: bool


class CheckpointInput(TypedDict):
    """``CheckpointInput`` of ``js/src/payload.ts`` (field for field; the TypeScript documents each field)."""

    call: str
    storages: list[int]
    producers: list[str]


class CheckpointTable(TypedDict):
    """What the checkpointing what-if reads of a graph (``gradviz_nb/analysis/checkpointing.py``)."""

    rng_bytes: int
    storages: list[int]
    ops: list[CheckpointOp]
    inputs: list[CheckpointInput]


class CheckpointVerification(TypedDict):
    """A checkpointed re-run against the prediction (``gradviz_nb/probes/rerun/checkpoint.py``)."""

    marks: dict[str, CheckpointMode]
    predicted_bytes: int
    measured_bytes: int
    predicted_before: int
    measured_before: int
    rng_bytes: int
    frames: int
    predicted_recomputed: int
    measured_recomputed: int
    predicted_recomputed_flops: Number
    measured_recomputed_flops: Number
    predicted_lost: list[str]
    actual_lost: list[str]
    agree: bool
    checked: list[str]
    unchecked: list[str]
    error: str


class Traits(TypedDict):
    """The widget's synced traits, all of them (``GraphWidget``'s ``.tag(sync=True)`` traits minus
    anywidget's plumbing): what an exported page embeds and what the page's ``Traits`` reads."""

    graph_data: GraphPayload
    expanded: list[str]
    unfolded: list[str]
    selected: str
    height: int
    toggles: Toggles
    verified: Verification | Empty
    can_verify: bool
    overlay: Overlay | Empty
    recording: Recording | Empty
    step: int
    diff: GraphDiff | Empty
    findings: list[DoctorFinding]
    checkpoints: dict[str, CheckpointMode]
    checkpoint_table: CheckpointTable | Empty
    checkpoint_verified: CheckpointVerification | Empty

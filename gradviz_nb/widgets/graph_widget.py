"""``GraphWidget``: the autograd graph on an anywidget canvas, modules expandable by click."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anywidget
import torch
import traitlets
from torch import nn

from gradviz_nb.analysis.what_if import WhatIf
from gradviz_nb.doctor.findings import Diagnosis
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.backward import BackwardRecording
from gradviz_nb.probes.rerun import Rerunnable
from gradviz_nb.tracing import AutogradGraph, Capture, trace
from gradviz_nb.widgets.finite_json import finite_json, finite_nodes
from gradviz_nb.widgets.lazy import LAZY_NODES, LazyGraph
from gradviz_nb.widgets.payload import initial_expanded, to_payload
from gradviz_nb.widgets.toggles import toggle_args

_STATIC = pathlib.Path(__file__).parent.parent / "static"


class GraphWidget(anywidget.AnyWidget):
    """Interactive view of the autograd graph behind ``roots``.

    Displays when it is the last expression of a cell. Click a module box to expand it, its header
    to collapse it, a node to see its details.

    Example::

        with gv.capture(model) as cap:
            loss = criterion(model(x), y)
        gv.GraphWidget(loss, model=model, capture=cap)

    ``roots`` may also be an already traced :class:`AutogradGraph`, or a recording from
    :func:`gv.record_backward` (the widget then offers a stepper through the real backward pass), or a
    :func:`gv.doctor` diagnosis (its findings listed above the graph and marked on their nodes).

    Big graphs are sent lazily (``gradviz_nb.widgets.lazy``): the page gets the module tree and the
    compact wiring of every node first, and each box's node records when it is opened. That happens
    by itself for a graph with module calls and more than ``LAZY_NODES`` (4,000) nodes, unless a
    ``recording`` or ``diff`` is given; ``lazy=True`` / ``lazy=False`` decides instead (``lazy=True``
    on a graph without module calls is allowed: everything is top level, hence loaded at once).
    """

    _esm = _STATIC / "widget.js"

    graph_data = traitlets.Dict().tag(sync=True)
    """dict: the graph as plain JSON (``js/src/payload.ts``); the page draws only from traits."""

    expanded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """list[str]: ids of the module calls shown open (e.g. ``["blocks.0"]``); set it to open boxes."""

    selected = traitlets.Unicode("").tag(sync=True)
    """str: id of the node or module call the user clicked last (``""`` for none)."""

    height = traitlets.Int(600).tag(sync=True)
    """int: height of the canvas in pixels."""

    toggles: traitlets.Dict[str, Any] = traitlets.Dict({"detach": [], "freeze": []}).tag(sync=True)
    """dict: what-if toggles, ``{"detach": [...], "freeze": [...]}`` (see :func:`toggle_args`); the page
    answers them itself, instantly; :meth:`what_if` gives Python's answer to the same toggles."""

    overlay: traitlets.Dict[str, Any] = traitlets.Dict({}).tag(sync=True)
    """dict: per-node values drawn over the graph (``js/src/payload.ts`` ``Overlay``; ``{}`` for none):
    title, values (node id or ``"call:<id>"`` -> number), scale, encoding, marks, unit."""

    recording: traitlets.Dict[str, Any] = traitlets.Dict({}).tag(sync=True)
    """dict: a recorded backward pass for the stepper (``js/src/payload.ts`` ``Recording``; ``{}``
    for none). Set by ``GraphWidget(gv.record_backward(loss))``."""

    step = traitlets.Int(-1).tag(sync=True)
    """int: the stepper's cursor: -1 before the first step, else an index into ``recording["steps"]``."""

    diff: traitlets.Dict[str, Any] = traitlets.Dict({}).tag(sync=True)
    """dict: the diff view (``js/src/payload.ts`` ``GraphDiff``; ``{}`` for none): per-node status
    added/removed/changed/same, leaves that gained/lost a gradient path, summary. Set it with
    ``GraphWidget(d.merged(), diff=d.to_payload())`` for ``d = gv.diff(before, after)``."""

    can_verify = traitlets.Bool(False).tag(sync=True)
    """bool: True when built by :meth:`from_fn`, so the page offers "Verify (re-run)"."""

    verified = traitlets.Dict({}).tag(sync=True)
    """dict: result of the last verified re-run (``{}`` for none): toggles, predicted_lost,
    actual_lost, agree, unverifiable, error."""

    findings = traitlets.List(traitlets.Dict()).tag(sync=True)
    """list[dict]: :func:`gv.doctor`'s findings listed above the graph (``js/src/payload.ts``
    ``DoctorFinding``; ``[]`` for none). Set by ``GraphWidget(diagnosis)``; a click on one reveals its node."""

    unfolded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """list[str]: ids of the fold groups (``graph_data["folds"]``, e.g. ``"fold:blocks.0"``) the user
    unfolded. The page draws a group as one stacked box ("6 × Block") when its id is not in
    ``unfolded`` and none of its calls is in :attr:`expanded`."""

    def __init__(
        self,
        roots: torch.Tensor | Sequence[torch.Tensor] | AutogradGraph | BackwardRecording | Diagnosis,
        model: nn.Module | None = None,
        capture: Capture | None = None,
        names: Mapping[str, torch.Tensor] | None = None,
        height: int = 600,
        lazy: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if not _STATIC.joinpath("widget.js").exists():
            raise GradvizError(
                "the widget's front-end bundle is missing (gradviz_nb/static/widget.js): "
                "run `npm --prefix js ci && npm --prefix js run build` in the repository."
            )
        if isinstance(roots, Diagnosis):
            if roots.graph is None:
                raise GradvizError("this diagnosis has no graph to draw: the step ran no backward.")
            kwargs.setdefault("findings", roots.to_page())
            kwargs.setdefault("overlay", roots.to_overlay())
            roots = roots.graph
        if isinstance(roots, BackwardRecording):
            kwargs.setdefault("recording", roots.to_payload())
            roots = roots.graph
        graph = roots if isinstance(roots, AutogradGraph) else trace(roots, model, capture, names)
        self.graph = graph
        """AutogradGraph: the traced graph this widget shows."""
        self._rerun: Rerunnable | None = None
        if lazy is None:
            lazy = bool(graph.calls) and len(graph) > LAZY_NODES and not (kwargs.get("recording") or kwargs.get("diff"))
        self.lazy = lazy
        """bool: True when the page gets a skeleton and loads each box's records when opened."""
        self._lazy_graph = LazyGraph(graph) if lazy else None
        expanded = initial_expanded(graph)
        graph_data = self._lazy_graph.skeleton(["", *expanded]) if self._lazy_graph else to_payload(graph)
        super().__init__(graph_data=graph_data, expanded=expanded, height=height, **kwargs)
        self.on_msg(self._on_page_message)

    # NaN / Inf (a NaN value, gradient or norm: what users debug) cannot cross a comm as JSON.
    @traitlets.validate("graph_data")
    def _finite_graph(self, proposal: Any) -> Any:
        return finite_nodes(proposal["value"])

    @traitlets.validate("recording", "overlay", "diff", "findings", "verified")
    def _finite(self, proposal: Any) -> Any:
        return finite_json(proposal["value"])

    def lazy_graph(self) -> LazyGraph:
        """The index that answers the page's load requests (built on first use for an eager widget)."""
        if self._lazy_graph is None:
            self._lazy_graph = LazyGraph(self.graph)
        return self._lazy_graph

    @classmethod
    def from_fn(
        cls,
        fn: Callable[[], torch.Tensor],
        model: nn.Module | None = None,
        names: Mapping[str, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> GraphWidget:
        """A widget whose what-if toggles can be checked against PyTorch by re-running ``fn``.

        ``fn`` computes and returns the loss; it is run once now (with module capture) and again for
        each verification, with frozen parameters' ``requires_grad`` off and chosen tensors detached.
        The model ends exactly as it began (``requires_grad``, ``.grad``, training mode). Example::

            w = gv.GraphWidget.from_fn(lambda: criterion(model(x), y), model=model)
            w.toggles = {"detach": ["call:blocks.3"], "freeze": []}
            w.verify()["agree"]   # True
        """
        rerun = Rerunnable(fn, model, names)
        widget = cls(rerun.graph, can_verify=True, **kwargs)
        widget._rerun = rerun
        return widget

    def what_if(self) -> WhatIf:
        """Python's answer to the current :attr:`toggles` (the page computes the same, instantly)."""
        return self.graph.what_if(*toggle_args(self.graph, self.toggles))

    def verify(self) -> dict[str, Any]:
        """Re-run ``fn`` with the current toggles (only for :meth:`from_fn`); sets :attr:`verified`."""
        if self._rerun is None:
            raise GradvizError("verify needs a re-runnable widget: build it with GraphWidget.from_fn(fn, model=...).")
        toggles = {"detach": list(self.toggles.get("detach", [])), "freeze": list(self.toggles.get("freeze", []))}
        try:
            result = self._rerun.verify(*toggle_args(self.graph, toggles))
        except Exception as err:  # shown in the page; the user's state was restored by the re-run
            result = {"predicted_lost": [], "actual_lost": [], "agree": False, "unverifiable": [],
                      "error": f"{type(err).__name__}: {err}"}
        self.verified = {"toggles": toggles, **result}
        return self.verified

    def save_html(self, path: str | os.PathLike[str], title: str | None = None) -> pathlib.Path:
        """One self-contained HTML file of this view (its current state), interactive without a kernel."""
        from gradviz_nb.export.html import export_html

        return export_html(self, path, title)

    def save_svg(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """The current view as SVG (rendered in headless Chromium; see ``gradviz_nb.export.image``)."""
        from gradviz_nb.export.image import save_svg

        return save_svg(self, path)

    def save_png(self, path: str | os.PathLike[str], scale: float = 2) -> pathlib.Path:
        """The current view as PNG (rendered in headless Chromium; see ``gradviz_nb.export.image``)."""
        from gradviz_nb.export.image import save_png

        return save_png(self, path, scale)

    def _on_page_message(self, _: Any, content: dict[str, Any], buffers: Any) -> None:
        if content.get("kind") == "verify" and self._rerun is not None:
            self.verify()
        elif content.get("kind") == "load":
            self.send(self.load_reply(content.get("calls")))

    def load_reply(self, calls: Any) -> dict[str, Any]:
        """The answer to the page's ``{"kind": "load", "calls": [...]}`` (``LoadReply`` in
        ``js/src/payload.ts``): ``{"kind": "chunks", "chunks": [...]}``, one chunk per call in the order
        asked, or ``{"kind": "chunks", "chunks": [], "error": "..."}``; never raises."""
        try:
            if not isinstance(calls, list):
                raise GradvizError(f"load: 'calls' must be a list of module call ids, got {type(calls).__name__}.")
            return {"kind": "chunks", "chunks": [finite_nodes(c) for c in self.lazy_graph().chunks(calls)]}
        except Exception as err:  # reported to the page; raising here would only reach the comm's log
            message = str(err) if isinstance(err, GradvizError) else f"load failed: {type(err).__name__}: {err}"
            return {"kind": "chunks", "chunks": [], "error": message}

    def __repr__(self) -> str:
        return f"<GraphWidget: {self.graph!r}>"

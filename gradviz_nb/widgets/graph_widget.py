"""``GraphWidget``: the autograd graph on an anywidget canvas, modules expandable by click."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any, cast

import anywidget
import torch
from ipywidgets import Widget
from torch import nn

from gradviz_nb.analysis.checkpointing import CheckpointPlan
from gradviz_nb.analysis.what_if import WhatIf
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.backward import BackwardRecording, Stop
from gradviz_nb.probes.rerun import Rerunnable
from gradviz_nb.tracing import AutogradGraph, Capture
from gradviz_nb.validate import function, model_or_none, tensor_mapping
from gradviz_nb.widgets.page.contract import Empty, PageReply, Traits
from gradviz_nb.widgets.page.convert import recording as recording_page
from gradviz_nb.widgets.page.finite_json import finite_json
from gradviz_nb.widgets.page.lazy import LazyGraph
from gradviz_nb.widgets.page.messages import Body, dispatch, load_body
from gradviz_nb.widgets.page.state import Snapshot, build, snapshot
from gradviz_nb.widgets.page.traits import PageTrait
from gradviz_nb.widgets.page.values import values_body
from gradviz_nb.widgets.page.why import why_body
from gradviz_nb.widgets.questions import ask
from gradviz_nb.widgets.questions import verify as verify_question
from gradviz_nb.widgets.runtime import RuntimeReference, widget_esm

_STATIC = pathlib.Path(__file__).parent.parent / "static"


def _forget_file_watch(widget: anywidget.AnyWidget) -> None:
    """anywidget connects every instance to its class's ``_esm`` file (hot reload: a new bundle reaches
    open widgets) through a strong reference to the instance: without this, no widget is ever freed."""
    # traitlets' add_traits made type(widget) a subclass whose _esm is a trait: the file is further up
    sources = [vars(k)[key] for k in type(widget).__mro__ for key in ("_esm", "_css") if key in vars(k)]
    for source in sources:
        changed = getattr(source, "changed", None)
        if changed is None:
            continue
        for slot in list(getattr(changed, "_slots", ())):
            fn = slot.dereference()
            cells = getattr(fn, "__closure__", None) or ()
            if any(_cell_holds(c, widget) for c in cells):
                changed.disconnect(fn)


def _cell_holds(cell: Any, obj: object) -> bool:
    try:
        return cell.cell_contents is obj
    except ValueError:  # an empty cell
        return False


class GraphWidget(anywidget.AnyWidget):
    """Interactive view of the autograd graph behind ``roots``.

    Displays when it is the last expression of a cell. Click a module box to expand it, its header
    to collapse it, a node to see its details.

    Example::

        with gv.capture(model) as cap:
            loss = criterion(model(x), y)
        gv.GraphWidget(loss, model=model, capture=cap)

    ``roots`` may also be anything else the canvas shows (one route, ``gradviz_nb.widgets.page.state``):
    an already traced :class:`AutogradGraph`; a recording from :func:`gv.record_backward` (the widget then
    offers a stepper through the real backward pass); a :func:`gv.diff` (its merged graph coloured by
    status); a :func:`gv.doctor` diagnosis (its findings listed beside the graph and marked on their
    nodes); a :func:`gv.memory_held` report or a :func:`gv.gradcheck` result (drawn as an overlay). A
    :func:`gv.gradient_flow` goes in as ``overlay=flow`` (or ``w.overlay = flow``): it has no graph.

    Big graphs are sent lazily (``gradviz_nb.widgets.page.lazy``): the page gets the module tree and the
    compact wiring of every node first, and each box's node records when it is opened. That happens
    by itself for a graph with module calls and more than ``LAZY_NODES`` (4,000) nodes, unless a
    ``recording`` or ``diff`` is given; ``lazy=True`` / ``lazy=False`` decides instead (``lazy=True``
    on a graph without module calls is allowed: everything is top level, hence loaded at once).
    """

    # A 2 kB loader that imports the canvas from the kernel's one runtime model (saved once per notebook,
    # not once per widget); the whole bundle with ANYWIDGET_HMR=1. See gradviz_nb/widgets/runtime.py.
    _esm = widget_esm()
    _runtime = RuntimeReference()

    graph_data = PageTrait({}).tag(sync=True)
    """dict: the graph as plain JSON (``GraphPayload`` in ``js/src/payload.ts``); the page draws only from traits."""

    expanded = PageTrait([]).tag(sync=True)
    """list[str]: ids of the module calls shown open (e.g. ``["blocks.0"]``); set it to open boxes."""

    selected = PageTrait("").tag(sync=True)
    """str: id of the node or module call the user clicked last (``""`` for none)."""

    height = PageTrait(600).tag(sync=True)
    """int: height of the canvas in pixels. A small graph (up to 40 drawn items) may grow past it, up to
    900 px, so that it is shown whole at a readable zoom."""

    toggles = PageTrait({"detach": [], "freeze": []}).tag(sync=True)
    """dict: what-if toggles, ``{"detach": [...], "freeze": [...]}`` (see :func:`toggle_args`); the page
    answers them itself, instantly; :meth:`what_if` gives Python's answer to the same toggles."""

    overlay = PageTrait({}).tag(sync=True)
    """dict: per-node values drawn over the graph (``Overlay`` in ``js/src/payload.ts``; ``{}`` for none):
    title, values (node id or ``"call:<id>"`` -> number), scale, encoding, marks, unit. Assign a source
    and it is converted: ``w.overlay = gv.memory_held(g)``, ``= gv.gradient_flow(model)``, ``= gradcheck
    result``, ``= diagnosis``; anything else is refused with a message saying what is accepted."""

    recording = PageTrait({}).tag(sync=True)
    """dict: a recorded backward pass for the stepper (``Recording``; ``{}`` for none). Set by
    ``GraphWidget(gv.record_backward(loss))``; ``w.recording = rec`` converts a recording too."""

    step = PageTrait(-1).tag(sync=True)
    """int: the stepper's cursor: -1 before the first step, else an index into ``recording["steps"]``."""

    diff = PageTrait({}).tag(sync=True)
    """dict: the diff view (``GraphDiff`` in ``js/src/payload.ts``; ``{}`` for none): per-node status
    added/removed/changed/same, leaves that gained/lost a gradient path, summary. ``GraphWidget(d)`` for
    ``d = gv.diff(before, after)`` draws ``d.merged()`` with it."""

    can_verify = PageTrait(False).tag(sync=True)
    """bool: True when built by :meth:`from_fn`, so the page offers "Verify (re-run)"."""

    verified = PageTrait({}).tag(sync=True)
    """dict: result of the last verified re-run (``Verification``; ``{}`` for none): toggles,
    predicted_lost, actual_lost, agree, unverifiable, error."""

    findings = PageTrait([]).tag(sync=True)
    """list[dict]: :func:`gv.doctor`'s findings listed beside the graph (``DoctorFinding``; ``[]`` for
    none). Set by ``GraphWidget(diagnosis)`` (or ``w.findings = diagnosis``); a click on one reveals its node."""

    unfolded = PageTrait([]).tag(sync=True)
    """list[str]: ids of the fold groups (``graph_data["folds"]``, e.g. ``"fold:blocks.0"``) the user
    unfolded. The page draws a group as one stacked box ("6 × Block") when its id is not in
    ``unfolded`` and none of its calls is in :attr:`expanded`."""

    checkpoints = PageTrait({}).tag(sync=True)
    """dict: checkpointing what-if marks, ``{call id: "non_reentrant" | "reentrant"}``; a shift-click on a box
    (or a click in checkpoint mode) cycles non-reentrant -> reentrant -> off. :meth:`checkpoint_what_if`
    gives Python's answer, :meth:`verify_checkpoint` PyTorch's."""

    checkpoint_table = PageTrait({}).tag(sync=True)
    """dict: what the page's checkpointing rule reads of the graph (``CheckpointTable``; ``{}`` without
    module calls); set from the graph when the widget is built."""

    checkpoint_verified = PageTrait({}).tag(sync=True)
    """dict: the last checkpointed re-run against the prediction (``CheckpointVerification``; ``{}``)."""

    def __init__(
        self,
        roots: Any,
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
        page_traits = {k: kwargs.pop(k) for k in list(kwargs) if k in Traits.__annotations__}
        built = build(roots, model, capture, names, lazy, height=height, **page_traits)
        self._graph: AutogradGraph | None = built.graph
        self._rerun: Rerunnable | None = None
        self.lazy = built.lazy is not None
        """bool: True when the page gets a skeleton and loads each box's records when opened."""
        self._lazy_graph = built.lazy
        self._why_source = built.why_source
        super().__init__(**built.state, **kwargs)
        self.on_msg(self._on_page_message)

    def close(self) -> None:
        """Release this widget: its comm (the page stops answering), then the graph, the lazy index, the
        re-run, the synced data (graph, recording, diff, overlay, ...) and every observer.

        ipywidgets keeps each widget in its registry of live widgets (``Widget.widgets``) until it is
        closed, so a widget you only drop (``del w``, a cell run again) stays in memory with its graph.
        Call ``close()`` when a view is done with, e.g. before making a new one in a loop. A closed
        widget cannot be shown again: build a new one."""
        self.on_msg(self._on_page_message, remove=True)
        layout = self._trait_values.get("layout")
        super().close()
        if isinstance(layout, Widget):
            layout.close()  # a DOMWidget's own Layout is a widget too: registered until closed
        _forget_file_watch(self)
        self.unobserve_all()
        with self.hold_trait_notifications():
            for name in Traits.__annotations__:  # drop the data without sending it anywhere
                self._trait_values[name] = self.trait_defaults(name)
        self._lazy_graph = None
        self._why_source = None
        self._rerun = None
        self._graph = None

    @property
    def graph(self) -> AutogradGraph:
        """AutogradGraph: the traced graph this widget shows (a closed widget has none: it raises)."""
        if self._graph is None:
            raise GradvizError("this GraphWidget was closed (w.close() released its graph); build a new one: "
                               "gv.GraphWidget(loss).")
        return self._graph

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
        The model ends exactly as it began: each run is in the probes' sandbox (parameters, buffers,
        the same ``.grad`` objects, ``requires_grad``, modes, hooks, RNGs; :mod:`gradviz_nb.probes.sandbox`),
        also when ``fn`` raises. Example::

            w = gv.GraphWidget.from_fn(lambda: criterion(model(x), y), model=model)
            w.toggles = {"detach": ["call:blocks.3"], "freeze": []}
            w.verify()["agree"]   # True
        """
        function("fn", fn, "lambda: criterion(model(x), y) (it computes and returns the loss)")
        model_or_none("model", model)
        if names is not None:
            tensor_mapping("names", names)
        rerun = Rerunnable(fn, model, names)
        widget = cls(rerun.graph, can_verify=True, **kwargs)
        widget._rerun = rerun
        return widget

    def predict(self, question: str) -> Any:
        """Python's prediction for a question's current marks (``"whatif"``: :attr:`toggles`,
        ``"checkpoint"``: :attr:`checkpoints`; see :mod:`gradviz_nb.widgets.questions`), as the page computes it."""
        q = ask(question)
        return q.predict(self.graph, getattr(self, q.marks))

    def verify(self, question: str = "whatif") -> dict[str, Any]:
        """Re-run ``fn`` (only for :meth:`from_fn`) with the question's marks really applied, in the sandbox,
        and compare with the prediction; the record goes to the question's result trait (:attr:`verified`
        for ``"whatif"``, :attr:`checkpoint_verified` for ``"checkpoint"``) and is returned."""
        q = ask(question)
        result = verify_question(q, self._rerun, self.graph, getattr(self, q.marks))
        setattr(self, q.result, result)
        return cast(dict[str, Any], getattr(self, q.result))

    def what_if(self) -> WhatIf:
        """Python's answer to the current :attr:`toggles` (the page computes the same, instantly)."""
        return cast(WhatIf, self.predict("whatif"))

    def run_to(self, rec: BackwardRecording, rule: str = "", *, threshold: float | None = None, module: str = "",
               leaf: str = "") -> Stop:
        """Move the stepper where ``rec.find(rule, ...)`` stops (the page's "Run to" menu, from Python);
        a breakpoint that never hits leaves the cursor where it is. Returns the :class:`Stop`. ``rec`` must be
        the recording this widget shows (a stop's index means nothing in another one's steps)."""
        if not isinstance(rec, BackwardRecording) or finite_json(recording_page(rec)) != self.recording:
            raise GradvizError("run_to(rec, ...): rec is not the recording this widget shows; give that one "
                               "(w = gv.GraphWidget(rec); w.run_to(rec, 'nonfinite')), or show it: w.recording = rec.")
        stop = rec.find(rule, threshold=threshold, module=module, leaf=leaf)
        if stop.hit:
            self.step = stop.index
        return stop

    def checkpoint_what_if(self) -> CheckpointPlan:
        """Python's answer to the current :attr:`checkpoints` marks (the page computes the same, instantly)."""
        return cast(CheckpointPlan, self.predict("checkpoint"))

    def verify_checkpoint(self) -> dict[str, Any]:
        """``verify("checkpoint")``: saved bytes, recomputed ops and lost gradients of the marked calls really
        checkpointed, against the prediction. Example::

            w = gv.GraphWidget.from_fn(lambda: gpt2_loss(model), model=model)
            w.checkpoints = {"blocks.0": "non_reentrant", "blocks.2": "reentrant"}
            w.verify_checkpoint()["agree"]   # True
        """
        return self.verify("checkpoint")

    def page_state(self) -> Traits:
        """The synced traits as the page sees them (``contract.Traits``), as plain values."""
        state: dict[str, Any] = {name: getattr(self, name) for name in Traits.__annotations__}
        return cast(Traits, state)

    def page_snapshot(self, **traits: Any) -> Snapshot:
        """This view's current state (with ``traits`` converted over it) and the answers to the requests
        an exported page sends: what :mod:`gradviz_nb.export` writes."""
        return snapshot(self.graph, self.page_state(), self._lazy_graph if self.lazy else None, self._why_source,
                        **traits)

    def save_html(self, path: str | os.PathLike[str], title: str | None = None) -> pathlib.Path:
        """One self-contained HTML file of this view (its current state), interactive without a kernel."""
        from gradviz_nb.export.html import write_html

        return write_html(self.page_snapshot(), path, title)

    def save_svg(self, path: str | os.PathLike[str], aspect: float | None = None) -> pathlib.Path:
        """The current view as SVG (rendered in headless Chromium; see ``gradviz_nb.export.image``).
        ``aspect`` (width / height, e.g. ``16 / 9``) lays a long graph out in columns that fit a slide."""
        from gradviz_nb.export.image import save_svg

        return save_svg(self.page_snapshot(), path, aspect)

    def save_png(self, path: str | os.PathLike[str], scale: float = 2, aspect: float | None = None) -> pathlib.Path:
        """The current view as PNG (rendered in headless Chromium; see ``gradviz_nb.export.image``).
        ``aspect`` (width / height, e.g. ``16 / 9``) lays a long graph out in columns that fit a slide."""
        from gradviz_nb.export.image import save_png

        return save_png(self.page_snapshot(), path, scale, aspect)

    def answer(self, message: Any) -> PageReply | None:
        """The reply to one page message (a ``PageRequest``), as the comm handler sends it; never raises.
        ``None`` when there is nothing to reply to (not a dict, no integer id: logged). Example::

            w.answer({"id": 1, "kind": "load", "body": {"calls": ["blocks.0"]}})["body"]["chunks"]
        """
        return dispatch(message, {"load": self._load, "verify": self._verify_request, "values": self._values,
                                  "why": self._why})

    def _on_page_message(self, _: Any, content: Any, buffers: Any) -> None:
        # The comm calls this with whatever the page sent: `answer` logs and drops what is malformed.
        reply = self.answer(content)
        if reply is not None:
            self.send(reply)

    def _load(self, body: Mapping[str, Any]) -> Body:
        return load_body(self.lazy_graph(), body)

    def _values(self, body: Mapping[str, Any]) -> Body:
        return values_body(self.graph, body)  # read now, through the graph's weak references

    def _why(self, body: Mapping[str, Any]) -> Body:
        return why_body(self._why_source, self.graph, body)  # the doctor's why, imported when first asked

    def _verify_request(self, body: Mapping[str, Any]) -> Empty:
        # {"question": name}; the result arrives in the question's trait. A GradvizError (nothing to re-run,
        # an unknown question) is sent back as the reply's error.
        self.verify(body.get("question", "whatif"))
        return {}

    # --- static fallback (gradviz_nb/widgets/static_fallback.py) -------------------------------------
    def _ipython_display_(self) -> None:
        """Show the widget, then a hidden static SVG of the graph that only front ends unable to draw the
        widget reveal (nbconvert HTML offline, a notebook reopened without widget state)."""
        from gradviz_nb.widgets.static_fallback import display_with_fallback

        display_with_fallback(self)

    def __repr__(self) -> str:
        if "graph" not in self.__dict__:
            return "<GraphWidget: closed>"
        return f"<GraphWidget: {self._graph!r}>" if self._graph is not None else "<GraphWidget: closed>"

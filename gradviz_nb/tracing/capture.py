"""Module attribution: which module call created each autograd node.

Every autograd node gets a sequence number when it is created (``Node._sequence_nr()``), from a
per-thread counter that ``torch.autograd._get_sequence_nr()`` reads. Recording that counter in a
forward pre-hook and a forward hook gives each module call a half-open interval ``[start, end)``.
Calls nest in time, so a node belongs to the deepest call whose interval holds its number.
This sees functional ops, fused kernels, SDPA and non-reentrant checkpoint alike, and costs two
counter reads per module call.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.compiled import compiling, real_named_modules, unwrap_compiled
from gradviz_nb.tracing.evidence import Evidence
from gradviz_nb.tracing.ghosts import Ghost
from gradviz_nb.tracing.lines import OpLines
from gradviz_nb.tracing.observer import ForwardObserver, InplaceWrite
from gradviz_nb.validate import boolean, module, positive_int


def _sequence_counter() -> int:
    getter = getattr(torch.autograd, "_get_sequence_nr", None)
    if getter is None:  # private API: fail loudly rather than attribute wrongly
        raise GradvizError(
            f"torch {torch.__version__} has no torch.autograd._get_sequence_nr; module capture needs it. "
            "Trace without capture, or use a torch version from 2.13 to 2.15."
        )
    return int(getter())


def _in_backward() -> bool:
    # Non-reentrant checkpoint re-runs module forwards during backward; those calls are not the forward.
    return int(torch._C._current_graph_task_id()) != -1


@dataclass(eq=False)
class ModuleCall:
    """One call of a module: the autograd nodes numbered in ``[start, end)`` were made inside it.

    Calls are told apart by identity; the ids users see ("blocks.0 (call 2)") are given when a graph
    is traced, numbering the calls of each module path that graph uses.
    """

    path: str
    type: str
    parent: ModuleCall | None
    start: int
    end: int = -1  # -1 while the call is running
    index: int = 1  # 1 for the first call of this path in the capture (in watch mode: in its forward)


@dataclass
class _Forward:
    """The calls of one outermost forward (a 'session'), kept together so old ones can be dropped."""

    calls: list[ModuleCall] = field(default_factory=list)


class Capture:
    """Context manager that records module calls of ``model``; see :func:`capture`.

    Example::

        with gv.capture(model) as cap:
            loss = model(x).sum()
        gv.GraphWidget(loss, capture=cap)
    """

    def __init__(self, model: nn.Module | None, keep_forwards: int | None = None, ghosts: bool = True,
                 weak: bool = False) -> None:
        if model is not None and not isinstance(model, nn.Module):
            raise GradvizError(f"gv.capture expects an nn.Module, got {type(model).__name__}.")
        if keep_forwards is not None:
            positive_int("keep_forwards", keep_forwards, hint="None keeps every forward.")
        boolean("ghosts", ghosts)
        _sequence_counter()  # check the private API exists before any forward runs
        # torch.compile's wrapper is hooked too; names come from the model it wraps. ``weak`` (watch mode):
        # the model is held by weak reference, so a model the user dropped is collected.
        inner = unwrap_compiled(model)
        self._hooked_ref: Callable[[], nn.Module | None] = weakref.ref(model) if weak and model is not None \
            else (lambda: model)
        self._model_ref: Callable[[], nn.Module | None] = weakref.ref(inner) if weak and inner is not None \
            else (lambda: inner)
        self._forwards: deque[_Forward] = deque(maxlen=keep_forwards)
        self._stack: list[ModuleCall] = []
        self._handles: list[Any] = []
        self._counts: dict[str, int] = {}
        self._observer = ForwardObserver(model, self._current) if ghosts else None

    @property
    def model(self) -> nn.Module | None:
        """The model whose calls are recorded (None once a watched model was collected)."""
        return self._model_ref()

    # -- hooks -------------------------------------------------------------------------------------
    def _pre(self, path: str, module: nn.Module) -> None:
        if _in_backward():
            return
        if not self._stack:
            self._forwards.append(_Forward())
            if self._forwards.maxlen is not None:
                self._counts.clear()  # watch mode: number calls within each outermost forward
        self._counts[path] = self._counts.get(path, 0) + 1
        parent = self._stack[-1] if self._stack else None
        kind = type(unwrap_compiled(module)).__name__  # a compiled submodule's box says what it wraps
        call = ModuleCall(path, kind, parent, _sequence_counter(), index=self._counts[path])
        self._forwards[-1].calls.append(call)
        self._stack.append(call)

    def _post(self, path: str) -> None:
        if _in_backward() or not self._stack:
            return
        # A module that raised still gets its post hook (always_call); pop down to it.
        while self._stack:
            call = self._stack.pop()
            call.end = _sequence_counter()
            if call.path == path:
                break

    def _current(self) -> ModuleCall | None:
        return self._stack[-1] if self._stack else None

    def start(self) -> Capture:
        """Begin recording module calls (what ``with gv.capture(model):`` does on entry); returns the capture."""
        if self._handles:
            return self
        if self._observer is not None:
            self._observer.start()
            inner = self._model_ref()  # held weakly: the record of recent captures never keeps a model alive
            held: Callable[[], nn.Module | None] = weakref.ref(inner) if inner is not None else (lambda: None)
            _RECENT.append(_Span(_sequence_counter(), None, self._observer.events, held, self._observer.lines))
        # Two global hooks instead of two per module: starting and stopping cost O(1) hook
        # registrations, and modules outside the model are skipped by one dict lookup.
        hooked = self._hooked_ref()
        paths = real_named_modules(hooked) if hooked is not None else {}
        del hooked  # the hooks below hold module ids and paths, never a module

        # While dynamo traces (torch.compile), the hooks do nothing: reading the sequence counter there would
        # split the user's compiled graph. The compiled region lands in the eager call around it. The hooks are
        # global, so they fire in every thread; sequence numbers are per thread, so only the thread that
        # started the capture is recorded.
        thread = threading.get_ident()

        def pre(module: nn.Module, args: Any) -> None:
            if compiling() or threading.get_ident() != thread:
                return
            path = paths.get(id(module))
            if path is not None:
                self._pre(path, module)

        def post(module: nn.Module, args: Any, out: Any) -> None:
            if compiling() or threading.get_ident() != thread:
                return
            path = paths.get(id(module))
            if path is not None:
                self._post(path)

        self._handles.append(register_module_forward_pre_hook(pre))
        self._handles.append(register_module_forward_hook(post, always_call=True))
        return self

    def stop(self) -> None:
        """Stop recording (what leaving the ``with`` block does); the calls recorded so far stay."""
        if self._observer is not None and self._handles:
            self._observer.stop()
            for span in _RECENT:
                if span.events is self._observer.events and span.end is None:
                    span.end = _sequence_counter()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for call in self._stack:  # calls interrupted by an exception end now
            call.end = _sequence_counter()
        self._stack.clear()

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- results -----------------------------------------------------------------------------------
    @property
    def calls(self) -> list[ModuleCall]:
        """All finished module calls, in the order they started (parents before children)."""
        return [c for c in itertools.chain.from_iterable(f.calls for f in self._forwards) if c.end >= 0]

    @property
    def values(self) -> dict[int, list[float]]:
        """Forward values of small op outputs, by autograd sequence number."""
        return dict(self._observer.values) if self._observer is not None else {}

    @property
    def ghosts(self) -> list[Ghost]:
        """Detached results and frozen parameters seen in the forward (not in the backward graph)."""
        return list(self._observer.ghosts) if self._observer is not None else []

    @property
    def evidence(self) -> list[Evidence]:
        """Forward-time evidence for missing or small gradients (values leaving the graph, zero-derivative
        and saturating ops with measured fractions, tensor hooks, no_grad uses), in forward order."""
        return list(self._observer.events) if self._observer is not None else []

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop observing tensors for a while: for tools that read tensors during a captured step (their
        own ``detach()`` calls must not be recorded as the user's)."""
        observer = self._observer
        was = observer.paused if observer is not None else False
        if observer is not None:
            observer.paused = True
        try:
            yield
        finally:
            if observer is not None:
                observer.paused = was

    @property
    def inplace(self) -> list[InplaceWrite]:
        """In-place ops on autograd-tracked tensors seen in the forward (for naming a broken saved tensor)."""
        return list(self._observer.inplace) if self._observer is not None else []

    def __repr__(self) -> str:
        state = "recording" if self._handles else "stopped"
        of = type(self.model).__name__ if self.model is not None else "no model"
        return f"<gv.Capture of {of}: {len(self.calls)} module calls, {state}>"


@dataclass(eq=False)
class _Span:
    """The autograd sequence numbers a capture was recording over, and its evidence (plain records)."""

    start: int
    end: int | None
    events: list[Evidence]
    model: Callable[[], nn.Module | None]  # a weak reference
    lines: OpLines | None = None


# The evidence of the last captures, by sequence-number span: a graph traced from one of them finds its
# evidence by its nodes' numbers (unique per thread), after the Capture object itself is gone (gv.doctor's).
_RECENT: deque[_Span] = deque(maxlen=16)


def recent_evidence(seqs: Iterable[int]) -> tuple[list[Evidence], nn.Module | None]:
    """The evidence of every recent capture whose span holds one of these autograd sequence numbers, and the
    model of the last of them."""
    numbers = sorted(seqs)
    out: list[Evidence] = []
    model = None
    for span in list(_RECENT):
        end = span.end if span.end is not None else _sequence_counter()
        i = bisect.bisect_left(numbers, span.start)
        if i < len(numbers) and numbers[i] < end:
            out += span.events
            model = span.model() or model
    return out, model


def recent_line(seq: int) -> str:
    """``file:line`` of the user's code that made the autograd node numbered ``seq``, from the recent captures
    with a ghost observer (``gv.capture``; not ``gv.watch``, which runs no mode), or "" when none saw it."""
    for span in reversed(list(_RECENT)):
        end = span.end if span.end is not None else _sequence_counter()
        if span.lines is not None and span.start <= seq < end:
            line = span.lines.line_at(seq)
            if line:
                return line
    return ""


class Attribution:
    """Maps autograd sequence numbers to the innermost module call that made them."""

    def __init__(self, calls: list[ModuleCall]) -> None:
        # Outer calls first on equal starts, so the last call starting at or before a number is the
        # innermost candidate.
        # Empty calls (no nodes: under no_grad, dropout in eval) hold nothing and would break the
        # nesting argument below when they share a start with a real call; keep them aside.
        self.calls = sorted((c for c in calls if c.end > c.start), key=lambda c: (c.start, -c.end))
        self._starts = [c.start for c in self.calls]
        # Outermost empty call per start: calls come in start order, so the first one wins.
        self._empty = {c.start: c for c in reversed(calls) if c.end == c.start}

    def call_of(self, seq: int, op: str) -> ModuleCall | None:
        """Innermost call whose interval holds ``seq``; None at top level."""
        if op == "CheckpointFunctionBackward":
            # Reentrant checkpoint runs the wrapped module under no_grad: its call is empty and starts
            # right after the checkpoint node's number. The opaque node stands for that module.
            wrapped = self._empty.get(seq + 1)
            if wrapped is not None:
                return wrapped
        i = bisect.bisect_right(self._starts, seq) - 1
        # Calls nest, so the innermost call holding seq is calls[i] or one of its ancestors.
        call = self.calls[i] if i >= 0 else None
        while call is not None and not (call.start <= seq < call.end):
            call = call.parent
        return call


def capture(model: nn.Module | None = None, ghosts: bool = True) -> Capture:
    """Record which module call creates each autograd node made inside the ``with`` block.

    Hooks are added to every submodule of ``model`` on entry and all removed on exit, even if the
    block raises. With ``ghosts`` (default), a ``TorchFunctionMode`` also records ``.detach()`` /
    ``.data`` results and uses of frozen parameters, so the graph can show where gradient paths were
    cut, and forward values of small outputs. ``model=None`` records only those (for a scalar
    teaching example with no module). Example::

        with gv.capture(model) as cap:
            loss = criterion(model(x), y)
        g = gv.trace(loss, model=model, capture=cap)
    """
    return Capture(model, ghosts=ghosts)


_WATCHED: dict[int, tuple[weakref.ref[nn.Module], Capture]] = {}  # id(model) -> (weak ref, its capture)
KEEP_FORWARDS = 8  # watch() keeps the calls of this many recent outermost forwards


def watch(model: nn.Module) -> Capture:
    """Keep capturing module calls of ``model`` until :func:`unwatch`, or until the model is collected.

    A later ``gv.GraphWidget(loss)`` or ``gv.trace(loss)`` then gets module boxes with no extra
    argument. Only the last few forwards are kept, so memory stays bounded. The model is held by weak
    reference: a model you drop is freed, and its hooks are removed with it. Example::

        gv.watch(model)
        loss = model(x).sum()
        gv.GraphWidget(loss)
    """
    module("gv.watch(model)", model)
    key = id(model)
    known = _WATCHED.get(key)
    if known is None or known[0]() is not model:
        # No ghost observer: a TorchFunctionMode left pushed across cells would interleave with the
        # user's own modes; ghosts need `with gv.capture(model)`.
        cap = Capture(model, keep_forwards=KEEP_FORWARDS, ghosts=False, weak=True).start()

        def collected(ref: weakref.ref[nn.Module]) -> None:  # the model is gone: its hooks go too
            entry = _WATCHED.get(key)
            if entry is not None and entry[0] is ref:
                del _WATCHED[key]
                entry[1].stop()

        known = _WATCHED[key] = (weakref.ref(model, collected), cap)
    return known[1]


def unwatch(model: nn.Module) -> None:
    """Stop :func:`watch` on ``model`` and remove its hooks (no-op if not watched)."""
    module("gv.unwatch(model)", model)
    entry = _WATCHED.get(id(model))
    if entry is not None and entry[0]() is model:
        del _WATCHED[id(model)]
        entry[1].stop()


def watched() -> list[Capture]:
    """The captures started by :func:`watch` that are still running."""
    return [cap for ref, cap in list(_WATCHED.values()) if ref() is not None]

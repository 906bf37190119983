"""The capture's torch function mode: what the forward pass shows and the backward graph cannot.

:class:`ForwardObserver` is active while ``gv.capture`` runs. At every torch call it hands detaches and uses
of frozen parameters to the :class:`~gradviz_nb.tracing.ghosts.GhostFollower` (ghost tensors), keeps the
forward values of small outputs (at most ``SMALL`` elements, so a teaching graph can show every node's value
and gradient), records in-place writes on tensors autograd tracks (:class:`InplaceWrite`, which the doctor
names when PyTorch's in-place error fires), keeps the user's source line of every op that made autograd nodes
(:class:`~gradviz_nb.tracing.lines.OpLines`, what a recording of a NaN loss names), and records the evidence
``gv.why`` reads (:mod:`gradviz_nb.tracing.evidence`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz_nb.tracing.cuts import carries_values, describe_value, dropped_grad, grad_input, op_text
from gradviz_nb.tracing.evidence import (
    WATCHED,
    Evidence,
    checkpoint_call_line,
    hook_name,
    hook_wrapper,
    saturation_stats,
)
from gradviz_nb.tracing.ghosts import (
    CUT_WALKS,
    Ghost,
    GhostFollower,
    called_by_user,
    has_grad_fn,
    is_detach,
    is_library,
    made_by_user,
    made_seq,
    next_sequence_nr,
    tensors_in,
    upstream_leaves,
    user_line,
)
from gradviz_nb.tracing.lines import OpLines
from gradviz_nb.tracing.summary import SMALL

if TYPE_CHECKING:
    from gradviz_nb.tracing.capture import ModuleCall

__all__ = ["ForwardObserver", "InplaceWrite"]


@dataclass(frozen=True)
class InplaceWrite:
    """An in-place op on a tensor that autograd tracks (``h.add_(1)``, ``relu_``), seen in the forward.

    ``target_op`` / ``target_output``: which autograd node made the tensor it overwrote (as PyTorch's
    "output 0 of ReluBackward0" names it); ``version``: the tensor's version after the write.
    """

    op: str
    target_op: str
    target_output: int
    shape: tuple[int, ...]
    version: int
    where: str
    line: str


def _in_backward() -> bool:
    # checkpoint recomputes forwards during backward; that is not the forward the user ran
    return int(torch._C._current_graph_task_id()) != -1


def _grad_off() -> str:
    """How grad mode was switched off, as the user wrote it."""
    return "torch.inference_mode()" if torch.is_inference_mode_enabled() else "torch.no_grad()"


def _readable_values(t: torch.Tensor) -> bool:
    """Values a node can show: real numbers in memory. Not a meta tensor (shapes only, no data), a sparse
    or other non-strided layout, or a complex tensor (a node shows real numbers, never a silent real part)."""
    return not t.is_meta and t.layout == torch.strided and not t.is_complex()


class ForwardObserver(TorchFunctionMode):
    """The capture's torch function mode: while active it records ghosts (through a :class:`GhostFollower`),
    the values of small outputs, in-place writes and the evidence ``gv.why`` reads; ``current_call`` tells which
    module call runs."""

    def __init__(self, model: nn.Module | None, current_call: Callable[[], ModuleCall | None]) -> None:
        super().__init__()
        self.values: dict[int, list[float]] = {}  # grad_fn sequence number -> first output's values
        self._current_call = current_call
        params = list(model.named_parameters()) if model is not None else []
        self._follower = GhostFollower(params, current_call)
        self._param_names = self._follower.param_names
        self.inplace: list[InplaceWrite] = []
        self.lines = OpLines()  # the user's line of every op that made autograd nodes, by sequence number
        self.events: list[Evidence] = []  # forward-time evidence for why a gradient is missing (evidence.py)
        self._left: Evidence | None = None  # the last value that left the graph, until a new tensor enters
        self._no_grad_seen: set[int] = set()
        self._walks = 0
        self._active = contextlib.ExitStack()
        self.paused = False  # True while a tool inspects tensors mid-forward: its own detaches are not the user's

    @property
    def ghosts(self) -> list[Ghost]:
        """Every ghost seen so far (detached results and frozen parameters), in order."""
        return self._follower.ghosts

    def start(self) -> None:
        """Make this mode active (its ``__enter__``, through a typed ``ExitStack``); :meth:`stop` ends it."""
        self._active = contextlib.ExitStack()
        self._active.enter_context(self)

    def stop(self) -> None:
        """End this mode (its ``__exit__`` with no error)."""
        self._active.close()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.paused or torch.compiler.is_compiling():
            # Under torch.compile the mode is traced by dynamo: it must stay transparent there, or its
            # reads (.tolist(), weakrefs) would split the user's graph and run the model eagerly instead.
            return func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        target = args[0] if args and name.endswith("_") and not name.endswith("__") else None
        made_by = target.grad_fn if isinstance(target, torch.Tensor) and has_grad_fn(target) else None
        made_nr = target.output_nr if made_by is not None and isinstance(target, torch.Tensor) else 0
        watched = WATCHED.get(func)  # the hot path's one extra cost: a dict lookup
        if watched == "hook" and not _in_backward():
            args = self._measure_hook(args)
        before = next_sequence_nr()
        out = func(*args, **(kwargs or {}))
        self.lines.note(before, next_sequence_nr())  # the user's line of the nodes it made (tracing/lines.py)
        if watched is not None and watched != "hook" and not _in_backward():
            self._record(watched, func, args, kwargs, out, before)
        elif not torch.is_grad_enabled() and self._param_names and not _in_backward():
            self._used_without_grad((*args, *kwargs.values()) if kwargs else args)  # F.layer_norm: weight=, bias=
        if not (type(out) is torch.Tensor and out.requires_grad) and dropped_grad(out) and torch.is_grad_enabled() \
                and not is_detach(func) and not _in_backward():
            self._maybe_cut(func, watched, args, kwargs or {}, out)  # the one rule: see tracing/cuts.py
        if made_by is not None and isinstance(target, torch.Tensor) and not target.requires_grad \
                and torch.is_grad_enabled() and not _in_backward():  # an in-place op took the history away
            self._follower.carry(target, [self._detached(target, func, made_by, made_nr)])
        if made_by is not None and isinstance(target, torch.Tensor) and not _in_backward():
            call = self._current_call()
            self.inplace.append(InplaceWrite(name, made_by.name(), target.output_nr, tuple(target.shape),
                                             target._version, call.path if call else "", user_line()))
        if type(out) is torch.Tensor and has_grad_fn(out) and out.numel() <= SMALL:
            seq = made_seq(out, before)
            if seq is not None and _readable_values(out):
                self.values.setdefault(seq, out.detach().flatten().tolist())
        # Hot path (every torch call in the forward): nothing to do unless a detach happens or a ghost
        # (or a frozen parameter) may be among the inputs.
        if is_detach(func):
            if isinstance(out, torch.Tensor) and args and args[0].requires_grad and not _in_backward():
                self._follower.carry(out, [self._detached(args[0], func)])
        elif self._follower.watching:
            carried = self._follower.carried_by(tensors_in((*args, *(kwargs or {}).values())))
            if carried and not _in_backward():
                self._follower.follow(out, carried, before)
        return out

    def _detached(self, source: torch.Tensor, func: Any, grad_fn: Any = None, output_nr: int = 0) -> Ghost:
        ghost = self._follower.detached(source, func, grad_fn, output_nr)
        ghost.evidence = self._evidence("data-access" if ghost.label == ".data" else "detached", ghost.label,
                                        cut=ghost.cut, shape=ghost.shape, targets=ghost.target_seqs)
        return ghost

    # -- evidence (tracing/evidence.py) ---------------------------------------------------------------------
    def _evidence(self, kind: str, op: str, **fields: Any) -> Evidence:
        call = self._current_call()
        line = fields.pop("line", None)
        event = Evidence(kind, op, call.path if call else "", user_line() if line is None else line,
                         len(self.events), **fields)
        self.events.append(event)
        return event

    def _cut_names(self, t: torch.Tensor) -> list[str]:
        """The parameters upstream of ``t`` (whose gradient would flow through it), by name."""
        if t.grad_fn is None:
            name = self._param_names.get(id(t))
            return [name] if name is not None else []
        if self._walks >= CUT_WALKS:
            return []
        self._walks += 1
        return self._follower.names_of(upstream_leaves(t.grad_fn))

    def _maybe_cut(self, func: Any, watched: str | None, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        """An op whose output autograd does not follow, with an input that requires grad: a cut when the output
        depends on that input's values (measured, :func:`~gradviz_nb.tracing.cuts.carries_values`)."""
        found = grad_input(args, kwargs)
        # Cached answers first; a measurement only for the user's own calls (``worth``): a library's reads of a
        # parameter (``.shape``, ``_version`` of a 38M-element embedding) are never the user's cut.
        if found is None or not carries_values(func, args, kwargs, worth=made_by_user) or not made_by_user():
            return
        pos, t = found
        where = f"argument {pos!r}" if isinstance(pos, str) else f"input {pos if isinstance(pos, int) else pos[0]}"
        arg = f"{where}, a {str(t.dtype).removeprefix('torch.')} tensor {list(t.shape)}"
        name = getattr(func, "__name__", "")
        op = op_text(func)
        if watched == "cast" and isinstance(out, torch.Tensor):
            op = f".{name}() to {str(out.dtype).removeprefix('torch.')}"
        kind = "zero-derivative" if watched == "compare" else "left-graph"  # wording: a comparison
        event = self._evidence(kind, op, cut=self._cut_names(t), shape=list(t.shape), arg=arg,
                               value=describe_value(out))
        if not isinstance(out, torch.Tensor):
            self._left = event  # a Python value: watch for it coming back as a new tensor

    def _record(self, watched: str, func: Any, args: Any, kwargs: Any, out: Any, before: int) -> None:
        """Wording and measurements for known ops (zero derivatives, saturation, a value coming back); cuts
        are found by :meth:`_maybe_cut` for every op."""
        name = getattr(func, "__name__", str(func))
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if watched == "saturating":
            if type(out) is torch.Tensor and has_grad_fn(out):
                self._evidence("saturated", name, seq=made_seq(out, before), shape=list(out.shape),
                            _stats=saturation_stats(func, out, args, kwargs or {}))
        elif watched == "zero-derivative":
            if isinstance(out, torch.Tensor) and has_grad_fn(out):
                with torch.no_grad():  # share of exact zeros (an all-zero output starves the next layer's weight)
                    stats = torch.stack([(out.detach() == 0).sum().float(), torch.zeros((), device=out.device),
                                         torch.tensor(float(out.numel()), device=out.device)])
                self._evidence("zero-derivative", name, seq=made_seq(out, before), shape=list(out.shape),
                               _stats=stats)
        elif watched == "leave" and first is not None and not first.requires_grad:
            self._detach_left(first, f"{name.strip('_')}(...)" if name.startswith("__") else f".{name}()")
        elif watched == "enter" and self._left is not None and isinstance(out, torch.Tensor) \
                and grad_input(args, kwargs or {}) is None and called_by_user():
            entered = self._evidence("entered", f"torch.{name}(...)", shape=list(out.shape))
            self._left.via = entered.line
            self._left = None

    def _detach_left(self, t: torch.Tensor, op: str) -> None:
        for ghost in self._follower.carried(t):
            e = ghost.evidence
            if e is not None and e.kind in ("detached", "data-access"):
                e.kind, e.op = "left-graph", f"{e.op}{op}" if e.op == ".data" else f".detach(){op}"
                self._left = e

    def _measure_hook(self, args: Any) -> Any:
        """``tensor.register_hook(fn)``: register a wrapper that measures what ``fn`` did to the gradient."""
        if len(args) < 2 or not isinstance(args[0], torch.Tensor) or not callable(args[1]):
            return args
        t = args[0]
        fn = t.grad_fn if has_grad_fn(t) else None
        seq = int(fn._sequence_nr()) if fn is not None else None
        name = self._param_names.get(id(t))
        event = self._evidence("hook", hook_name(args[1]), seq=seq, cut=[name] if name else [], shape=list(t.shape),
                            hook=hook_name(args[1]))
        return (t, hook_wrapper(args[1], event), *args[2:])

    def _used_without_grad(self, args: Any) -> None:
        """A parameter that requires grad used while grad mode is off, inside one of the model's calls (an
        optimizer step runs outside them). Once per parameter."""
        call = self._current_call()
        if call is None:
            return
        for t in tensors_in(args):
            key = id(t)
            name = self._param_names.get(key)
            if name is None and has_grad_fn(t) and id(call) not in self._no_grad_seen:
                self._no_grad_seen.add(id(call))  # an activation with history: what it cuts, once per call
                if not checkpoint_call_line(is_library):  # a reentrant checkpoint's inputs: its normal way
                    self._evidence("no-grad", _grad_off(), cut=self._cut_names(t), shape=list(t.shape))
            if name is None or key in self._no_grad_seen or not t.requires_grad:
                continue
            self._no_grad_seen.add(key)
            via = checkpoint_call_line(is_library)
            if via:
                self._evidence("reentrant-checkpoint", "checkpoint(use_reentrant=True)", cut=[name], via=via,
                            shape=list(t.shape))
            else:
                self._evidence("no-grad", _grad_off(), cut=[name], shape=list(t.shape))

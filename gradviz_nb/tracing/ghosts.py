"""What the forward pass shows and the backward graph cannot: ghost tensors and small values.

Ghosts are detached results and frozen parameters, seen in the forward pass.

They never reach the backward graph (nothing there requires grad), so walking ``grad_fn`` cannot show
*where* a gradient path was cut. A ``TorchFunctionMode`` during capture sees them: every ``.detach()``
/ ``.data`` result, and every use of a parameter with ``requires_grad=False``. Their grad-less
descendants are followed until an op whose output is in the graph: that op is the ghost's target.
The same mode keeps the forward values of small outputs (at most ``SMALL_VALUE`` elements), so a
teaching graph can show every node's value and gradient.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz_nb.tracing.evidence import (
    WATCHED,
    Evidence,
    checkpoint_call_line,
    hook_name,
    hook_wrapper,
    saturation_stats,
)
from gradviz_nb.tracing.walk import anchor

if TYPE_CHECKING:
    from gradviz_nb.tracing.capture import ModuleCall

_DATA_GETTER = torch._C.TensorBase.__dict__["data"]
SMALL_VALUE = 64
CUT_WALK_LIMIT = 20_000  # grad_fn nodes walked per detach to find the parameters it cuts off
CUT_WALKS = 64  # such walks per capture for comparisons / values leaving the graph (a mask per layer is common)
# Frames of torch and of this tracing package sit between the user's detach and the mode that sees it.
_TORCH_DIR = os.path.dirname(torch.__file__)
_LIBRARY_DIRS = (_TORCH_DIR, os.path.dirname(__file__), "<frozen ")
# Other tools of this package may run their own torch function mode below this one (the doctor's step
# arithmetic): their frames are not the user's either. The bug zoo and the demo models are user code.
_PACKAGE = os.path.dirname(os.path.dirname(__file__))
_USER_IN_PACKAGE = (os.path.join(_PACKAGE, "bugzoo"), os.path.join(_PACKAGE, "demo_models.py"))


def is_library(filename: str) -> bool:
    """A frame of torch or of this package's tools (not the user's code)."""
    return filename.startswith(_LIBRARY_DIRS) or (filename.startswith(_PACKAGE)
                                                  and not filename.startswith(_USER_IN_PACKAGE))


def _called_by_user() -> bool:
    """The torch call being observed was made by user code, not by torch itself (an optimizer's step
    counters are tensors too)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_TORCH_DIR):
            return name.endswith(("overrides.py", "_device.py"))
        if not is_library(name):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def user_line() -> str:
    """``file:line`` of the innermost frame of user code (outside torch and gradviz_nb's tools), or ``""``."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not is_library(name):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return ""


def upstream_leaves(fn: Any, limit: int = CUT_WALK_LIMIT) -> set[int]:
    """``id()`` of the leaf tensors whose gradient flows through ``fn`` (bounded walk)."""
    leaves: set[int] = set()
    seen: dict[Any, int] = {}
    order: list[Any] = []  # visited nodes and their producers' positions, to anchor (tracing/walk.py)
    producers: list[list[Any]] = []
    stack = [fn]
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen[node] = len(order)
        order.append(node)
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.add(id(variable))
        nexts = [nxt for nxt, _ in node.next_functions if nxt is not None]
        producers.append(nexts)
        stack.extend(nexts)
    # Reading the nodes gave them Python wrappers: anchor them so freeing the graph stays iterative.
    anchor(order, [[seen.get(p, -1) for p in ps] for ps in producers])
    return leaves


@dataclass(eq=False)
class Ghost:
    """One detached or frozen tensor. Sources and targets are autograd sequence numbers."""

    kind: str  # "detached" | "frozen"
    label: str
    shape: list[int]
    call: ModuleCall | None
    source_seq: int | None = None  # grad_fn of the tensor that was detached (None: a leaf or no graph)
    source_leaf: int | None = None  # id() of the leaf tensor that was detached / the frozen parameter
    output_nr: int = 0
    target_seqs: list[int] = field(default_factory=list)
    where: str = ""  # module path whose forward made the detach/use ("" = top level), before any re-homing
    line: str = ""  # "file:line" of the user code that made it (first frame outside torch and gradviz_nb)
    cut: list[str] = field(default_factory=list)  # parameters upstream of a detached tensor: their path ends here
    evidence: Evidence | None = None  # the same detach as forward evidence (tracing/evidence.py)


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


def _has_grad_fn(t: torch.Tensor) -> bool:
    """``t.grad_fn is not None`` without reading ``grad_fn``: reading it gives the node a Python wrapper,
    which makes freeing a deep graph recursive (see ``tracing/walk.py``); the forward hot path must not."""
    return t.requires_grad and not t.is_leaf


def _next_sequence_nr() -> int:
    return int(torch.autograd._get_sequence_nr())  # type: ignore[attr-defined]


def _made_seq(t: torch.Tensor, before: int) -> int | None:
    """Sequence number of ``t.grad_fn`` for an op output: the last node the op made (the counter moved
    from ``before``), else (the op returned an existing tensor) the node's own number."""
    after = _next_sequence_nr()
    if after > before:
        return after - 1
    fn = t.grad_fn
    return int(fn._sequence_nr()) if fn is not None else None


def _readable_values(t: torch.Tensor) -> bool:
    """Values a node can show: real numbers in memory. Not a meta tensor (shapes only, no data), a sparse
    or other non-strided layout, or a complex tensor (a node shows real numbers, never a silent real part)."""
    return not t.is_meta and t.layout == torch.strided and not t.is_complex()


def _is_detach(func: Any) -> bool:
    return func is torch.Tensor.detach or getattr(func, "__self__", None) is _DATA_GETTER


def _tensors_in(values: Iterable[Any]) -> Iterable[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, torch.Tensor))


class ForwardObserver(TorchFunctionMode):
    """Records ghosts and small values while active; ``current_call`` tells which module call runs."""

    def __init__(self, model: nn.Module | None, current_call: Callable[[], ModuleCall | None]) -> None:
        super().__init__()
        self.ghosts: list[Ghost] = []
        self.values: dict[int, list[float]] = {}  # grad_fn sequence number -> first output's values
        self._current_call = current_call
        params = list(model.named_parameters()) if model is not None else []
        self._frozen = {id(p): (name, p) for name, p in params if not p.requires_grad}
        self._param_names = {id(p): name for name, p in params}
        self._frozen_ghost: dict[int, Ghost] = {}
        self.inplace: list[InplaceWrite] = []
        self.events: list[Evidence] = []  # forward-time evidence for why a gradient is missing (evidence.py)
        self._left: Evidence | None = None  # the last value that left the graph, until a new tensor enters
        self._no_grad_seen: set[int] = set()
        self._walks = 0
        self.paused = False  # True while a tool inspects tensors mid-forward: its own detaches are not the user's
        # id(tensor) -> (weak ref, ghost it carries): by identity (tensor == is elementwise), and weak so
        # observing never keeps activations alive
        self._carrier: dict[int, tuple[weakref.ref[torch.Tensor], list[Ghost]]] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.paused or torch.compiler.is_compiling():
            # Under torch.compile the mode is traced by dynamo: it must stay transparent there, or its
            # reads (.tolist(), weakrefs) would split the user's graph and run the model eagerly instead.
            return func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        target = args[0] if args and name.endswith("_") and not name.endswith("__") else None
        made_by = target.grad_fn if isinstance(target, torch.Tensor) and _has_grad_fn(target) else None
        watched = WATCHED.get(func)  # the hot path's one extra cost: a dict lookup
        if watched == "hook" and not _in_backward():
            args = self._measure_hook(args)
        before = _next_sequence_nr()
        out = func(*args, **(kwargs or {}))
        if watched is not None and watched != "hook" and not _in_backward():
            self._record(watched, func, args, kwargs, out, before)
        elif not torch.is_grad_enabled() and self._param_names and not _in_backward():
            self._used_without_grad(args)
        if made_by is not None and isinstance(target, torch.Tensor) and not _in_backward():
            call = self._current_call()
            self.inplace.append(InplaceWrite(name, made_by.name(), target.output_nr, tuple(target.shape),
                                             target._version, call.path if call else "", user_line()))
        if type(out) is torch.Tensor and _has_grad_fn(out) and out.numel() <= SMALL_VALUE:
            seq = _made_seq(out, before)
            if seq is not None and _readable_values(out):
                self.values.setdefault(seq, out.detach().flatten().tolist())
        # Hot path (every torch call in the forward): nothing to do unless a detach happens or a ghost
        # (or a frozen parameter) may be among the inputs.
        if _is_detach(func):
            if isinstance(out, torch.Tensor) and args and args[0].requires_grad and not _in_backward():
                self._carry(out, [self._detached(args[0], func)])
        elif self._carrier or self._frozen:
            carried = self._carried_by(_tensors_in((*args, *(kwargs or {}).values())))
            if carried and not _in_backward():
                self._follow(out, carried, before)
        return out

    def _follow(self, out: Any, carried: list[Ghost], before: int) -> None:
        for t in _tensors_in([out]):
            seq = _made_seq(t, before) if _has_grad_fn(t) else None
            if seq is not None:
                for ghost in carried:
                    if seq not in ghost.target_seqs:
                        ghost.target_seqs.append(seq)
            elif not t.requires_grad:
                self._carry(t, carried)  # keep following until an op enters the graph

    def _carry(self, t: torch.Tensor, ghosts: list[Ghost]) -> None:
        key = id(t)

        def forget(ref: weakref.ref[torch.Tensor]) -> None:
            if self._carrier.get(key, (None,))[0] is ref:
                del self._carrier[key]

        self._carrier[key] = (weakref.ref(t, forget), ghosts)

    def _carried(self, t: torch.Tensor) -> list[Ghost]:
        ref, ghosts = self._carrier.get(id(t), (None, []))
        return ghosts if ref is not None and ref() is t else []

    def _detached(self, source: torch.Tensor, func: Any) -> Ghost:
        label = ".data" if func is not torch.Tensor.detach else "detach()"
        call = self._current_call()
        ghost = Ghost("detached", label, list(source.shape), call, where=call.path if call else "", line=user_line())
        if source.grad_fn is not None:
            ghost.source_seq, ghost.output_nr = source.grad_fn._sequence_nr(), source.output_nr
            cut = upstream_leaves(source.grad_fn)
        else:
            ghost.source_leaf = id(source)
            cut = {id(source)}
        ghost.cut = [name for key, name in self._param_names.items() if key in cut]
        self.ghosts.append(ghost)
        ghost.evidence = self._evidence("data-access" if label == ".data" else "detached", label, cut=ghost.cut,
                                     shape=ghost.shape, targets=ghost.target_seqs)
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
        cut = upstream_leaves(t.grad_fn)
        return [name for key, name in self._param_names.items() if key in cut]

    def _record(self, watched: str, func: Any, args: Any, kwargs: Any, out: Any, before: int) -> None:
        name = getattr(func, "__name__", str(func))
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        grad_in = first is not None and first.requires_grad and torch.is_grad_enabled()
        if watched == "saturating":
            if type(out) is torch.Tensor and _has_grad_fn(out):
                self._evidence("saturated", name, seq=_made_seq(out, before), shape=list(out.shape),
                            _stats=saturation_stats(func, out, args, kwargs or {}))
        elif watched == "zero-derivative":
            if isinstance(out, torch.Tensor) and _has_grad_fn(out):
                with torch.no_grad():  # share of exact zeros (an all-zero output starves the next layer's weight)
                    stats = torch.stack([(out.detach() == 0).sum().float(), torch.zeros((), device=out.device),
                                         torch.tensor(float(out.numel()), device=out.device)])
                self._evidence("zero-derivative", name, seq=_made_seq(out, before), shape=list(out.shape),
                               _stats=stats)
        elif watched == "compare" and grad_in and first is not None:
            self._evidence("zero-derivative", name, cut=self._cut_names(first), shape=list(first.shape))
        elif watched == "leave" and first is not None:
            op = f"{name.strip('_')}(...)" if name.startswith("__") else f".{name}()"
            if first.requires_grad:
                self._left = self._evidence("left-graph", op, cut=self._cut_names(first), shape=list(first.shape))
            else:  # x.detach().numpy(): the detach was the way out of the graph
                self._detach_left(first, op)
        elif watched == "cast" and grad_in and first is not None and isinstance(out, torch.Tensor) \
                and not (out.is_floating_point() or out.is_complex()):
            self._evidence("left-graph", f".{name}() to {str(out.dtype).removeprefix('torch.')}",
                           cut=self._cut_names(first), shape=list(first.shape))
        elif watched == "enter" and first is not None and first.requires_grad and isinstance(out, torch.Tensor) \
                and not out.requires_grad:  # torch.tensor(t): a copy with no history
            self._evidence("left-graph", f"torch.{name}(...)", cut=self._cut_names(first), shape=list(first.shape))
        elif watched == "enter" and self._left is not None and isinstance(out, torch.Tensor) and _called_by_user():
            entered = self._evidence("entered", f"torch.{name}(...)", shape=list(out.shape))
            self._left.via = entered.line
            self._left = None

    def _detach_left(self, t: torch.Tensor, op: str) -> None:
        for ghost in self._carried(t):
            e = ghost.evidence
            if e is not None and e.kind in ("detached", "data-access"):
                e.kind, e.op = "left-graph", f"{e.op}{op}" if e.op == ".data" else f".detach(){op}"
                self._left = e

    def _measure_hook(self, args: Any) -> Any:
        """``tensor.register_hook(fn)``: register a wrapper that measures what ``fn`` did to the gradient."""
        if len(args) < 2 or not isinstance(args[0], torch.Tensor) or not callable(args[1]):
            return args
        t = args[0]
        fn = t.grad_fn if _has_grad_fn(t) else None
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
        for t in _tensors_in(args):
            key = id(t)
            name = self._param_names.get(key)
            if name is None and _has_grad_fn(t) and id(call) not in self._no_grad_seen:
                self._no_grad_seen.add(id(call))  # an activation with history: what it cuts, once per call
                if not checkpoint_call_line(is_library):  # a reentrant checkpoint's inputs: its normal way
                    self._evidence("no-grad", "torch.no_grad()", cut=self._cut_names(t), shape=list(t.shape))
            if name is None or key in self._no_grad_seen or not t.requires_grad:
                continue
            self._no_grad_seen.add(key)
            via = checkpoint_call_line(is_library)
            if via:
                self._evidence("reentrant-checkpoint", "checkpoint(use_reentrant=True)", cut=[name], via=via,
                            shape=list(t.shape))
            else:
                self._evidence("no-grad", "torch.no_grad()", cut=[name], shape=list(t.shape))

    def _carried_by(self, tensors: Iterable[torch.Tensor]) -> list[Ghost]:
        found: list[Ghost] = []
        for t in tensors:
            ghosts = self._carried(t) or ([self._frozen_param(t)] if id(t) in self._frozen else [])
            found += [g for g in ghosts if g not in found]
        return found

    def _frozen_param(self, t: torch.Tensor) -> Ghost:
        ghost = self._frozen_ghost.get(id(t))
        if ghost is None:
            name, p = self._frozen[id(t)]
            call = self._current_call()
            ghost = Ghost("frozen", name, list(p.shape), call, source_leaf=id(p), where=call.path if call else "",
                          line=user_line())
            self._frozen_ghost[id(t)] = ghost
            self.ghosts.append(ghost)
        return ghost

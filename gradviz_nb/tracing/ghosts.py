"""Ghost tensors: what the forward pass shows and the backward graph cannot.

Ghosts are detached results and frozen parameters, seen in the forward pass.

They never reach the backward graph (nothing there requires grad), so walking ``grad_fn`` cannot show
*where* a gradient path was cut. :class:`GhostFollower` is told of every ``.detach()`` / ``.data`` result and
every use of a parameter with ``requires_grad=False`` (by the capture's torch function mode,
:class:`~gradviz_nb.tracing.observer.ForwardObserver`); it follows their grad-less descendants until an op
whose output is in the graph: that op is the ghost's target. Also here: where the user's code is
(:func:`user_line`, :func:`is_library`) and the small tensor facts the mode's hot path reads.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gradviz_nb.tracing.evidence import Evidence
from gradviz_nb.tracing.places import source_line
from gradviz_nb.tracing.walk import anchor

if TYPE_CHECKING:
    from gradviz_nb.tracing.capture import ModuleCall

DATA_GETTER = torch._C.TensorBase.__dict__["data"]  # what .data calls (a ``__torch_function__`` sees it)
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


def called_by_user() -> bool:
    """The torch call being observed was made by user code, not by torch itself (an optimizer's step
    counters are tensors too)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_TORCH_DIR):
            return name.endswith(("overrides.py", "_device.py"))
        if not is_library(name):
            return True
        frame = frame.f_back
    return False


def made_by_user() -> bool:
    """The innermost caller outside torch, this tracing package and any torch function mode's handler (a mode is
    dispatch) is the user's code, not another tool of gradviz_nb reading tensors while the capture is on."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith((_TORCH_DIR, os.path.dirname(__file__), "<frozen ")) and \
                frame.f_code.co_name != "__torch_function__":
            return not is_library(name)
        frame = frame.f_back
    return False


def user_line() -> str:
    """Where the innermost frame of user code is (outside torch and gradviz_nb's tools): ``cell [3], line 13``
    or ``file:line`` (:mod:`gradviz_nb.tracing.places`), or ``""``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not is_library(name):
            return source_line(name, frame.f_lineno)
        frame = frame.f_back
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


def has_grad_fn(t: torch.Tensor) -> bool:
    """``t.grad_fn is not None`` without reading ``grad_fn``: reading it gives the node a Python wrapper,
    which makes freeing a deep graph recursive (see ``tracing/walk.py``); the forward hot path must not.
    A view made under no_grad whose base was then written with grad enabled (Adam on complex parameters
    steps through ``view_as_real``) refuses to say: such a tensor is not in the graph."""
    if not t.requires_grad:
        return False
    try:
        return not t.is_leaf
    except RuntimeError:
        return False


# torch's stubs do not list it; read from the module's namespace (a plain dict) instead of as an attribute
_GET_SEQUENCE_NR: Callable[[], int] = torch.autograd.__dict__["_get_sequence_nr"]


def next_sequence_nr() -> int:
    """The autograd sequence number the next node made will get."""
    return int(_GET_SEQUENCE_NR())


def made_seq(t: torch.Tensor, before: int) -> int | None:
    """Sequence number of ``t.grad_fn`` for an op output: the last node the op made (the counter moved
    from ``before``), else (the op returned an existing tensor) the node's own number."""
    after = next_sequence_nr()
    if after > before:
        return after - 1
    fn = t.grad_fn
    return int(fn._sequence_nr()) if fn is not None else None


def is_detach(func: Any) -> bool:
    """Whether a torch function call is ``.detach()`` or a ``.data`` read."""
    return func is torch.Tensor.detach or getattr(func, "__self__", None) is DATA_GETTER


def tensors_in(values: Iterable[Any]) -> Iterable[torch.Tensor]:
    """The tensors among call arguments (one level of lists and tuples)."""
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, torch.Tensor))


class GhostFollower:
    """Ghosts of one capture, followed from their detach (or frozen parameter) to the first op in the graph.

    ``ghosts``: every ghost seen, in order. ``param_names``: ``id()`` of each model parameter -> its name.
    """

    def __init__(self, params: list[tuple[str, nn.Parameter]], current_call: Callable[[], ModuleCall | None]
                 ) -> None:
        self.ghosts: list[Ghost] = []
        self.param_names = {id(p): name for name, p in params}
        self._param_order = {key: i for i, key in enumerate(self.param_names)}
        self._frozen = {id(p): (name, p) for name, p in params if not p.requires_grad}
        self._frozen_ghost: dict[int, Ghost] = {}
        self._current_call = current_call
        # id(tensor) -> (weak ref, ghost it carries): by identity (tensor == is elementwise), and weak so
        # observing never keeps activations alive
        self._carrier: dict[int, tuple[weakref.ref[torch.Tensor], list[Ghost]]] = {}

    @property
    def watching(self) -> bool:
        """Whether any input may carry a ghost (a carried tensor is alive, or a parameter is frozen)."""
        return bool(self._carrier or self._frozen)

    def detached(self, source: torch.Tensor, func: Any, grad_fn: Any = None, output_nr: int = 0) -> Ghost:
        """A new ghost for ``source.detach()`` / ``source.data``, with the parameters the cut leaves behind;
        ``grad_fn`` / ``output_nr``: the history an in-place op (``detach_()``) just took from ``source``."""
        name = getattr(func, "__name__", "")
        label = ("detach()" if func is torch.Tensor.detach else f".{name}()" if grad_fn is not None and name
                 else ".data")
        call = self._current_call()
        ghost = Ghost("detached", label, list(source.shape), call, where=call.path if call else "", line=user_line())
        if grad_fn is not None:
            ghost.source_seq, ghost.output_nr = grad_fn._sequence_nr(), output_nr
            cut = upstream_leaves(grad_fn)
        elif source.grad_fn is not None:
            ghost.source_seq, ghost.output_nr = source.grad_fn._sequence_nr(), source.output_nr
            cut = upstream_leaves(source.grad_fn)
        else:
            ghost.source_leaf = id(source)
            cut = {id(source)}
        ghost.cut = self.names_of(cut)
        self.ghosts.append(ghost)
        return ghost

    def names_of(self, cut: set[int]) -> list[str]:
        """The parameters among ``cut`` by name, in model order: from the cut, not from every parameter (a
        detach per parameter, as an optimizer step makes, was quadratic)."""
        keys = sorted((k for k in cut if k in self._param_order), key=self._param_order.__getitem__)
        return [self.param_names[k] for k in keys]

    def follow(self, out: Any, carried: list[Ghost], before: int) -> None:
        """An op's outputs: one in the graph is the target of the ghosts its inputs carried; a grad-less one
        carries them on."""
        for t in tensors_in([out]):
            seq = made_seq(t, before) if has_grad_fn(t) else None
            if seq is not None:
                for ghost in carried:
                    if seq not in ghost.target_seqs:
                        ghost.target_seqs.append(seq)
            elif not t.requires_grad:
                self.carry(t, carried)  # keep following until an op enters the graph

    def carry(self, t: torch.Tensor, ghosts: list[Ghost]) -> None:
        """Remember that ``t`` carries ``ghosts`` (forgotten when ``t`` is freed)."""
        key = id(t)

        def forget(ref: weakref.ref[torch.Tensor]) -> None:
            if self._carrier.get(key, (None,))[0] is ref:
                del self._carrier[key]

        self._carrier[key] = (weakref.ref(t, forget), ghosts)

    def carried(self, t: torch.Tensor) -> list[Ghost]:
        """The ghosts ``t`` carries (``[]`` for none)."""
        ref, ghosts = self._carrier.get(id(t), (None, []))
        return ghosts if ref is not None and ref() is t else []

    def carried_by(self, tensors: Iterable[torch.Tensor]) -> list[Ghost]:
        """The ghosts any of ``tensors`` carries, a frozen parameter being its own ghost."""
        found: list[Ghost] = []
        for t in tensors:
            ghosts = self.carried(t) or ([self._frozen_param(t)] if id(t) in self._frozen else [])
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

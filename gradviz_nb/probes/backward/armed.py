"""An armed backward recording: a plain backward that only checks, and the full record once the check fires.

``gv.record_backward(loss, until="nonfinite")`` first runs the real backward with one cheap check per
gradient, its sum instead of full statistics: a NaN/Inf anywhere makes the sum non-finite, and a sum is
one read of memory (``isfinite(g).all()`` measured 30x slower on a 38M-element gradient). A sum that
overflows is never an alarm: on CPU a non-finite sum is confirmed with ``isfinite`` at once, elsewhere the
sum is taken in a dtype it cannot overflow (:func:`_cheap`); complex gradients are checked too. When
every gradient was finite it returns a recording with no steps that says how many it checked; when one
was not, it records that backward again in full (the graph was kept), so the stepper and ``rec.find``
see everything around the first NaN/Inf. Only gradients a node *sent* are checked, plus what arrives in
a buffer fed by several producers (a sum of finite values can overflow); a one-slot buffer holds exactly
what its producer sent, already checked. The armed pass does not trace: it only visits the nodes to hook
them (:func:`~gradviz_nb.tracing.walk.reachable`), and a quiet recording traces its graph when first asked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.backward.nested import Nested
from gradviz_nb.probes.backward.undo import HOOK_NODE, undone, user_hooks
from gradviz_nb.tracing import typed_torch
from gradviz_nb.tracing.walk import reachable

__all__ = ["UNTIL", "Armed", "armed_check"]

UNTIL = ("nonfinite",)


@dataclass(frozen=True)
class Armed:
    """What the armed pass checked: the rule, how many engine steps ran, and the first step (engine
    order) where its check fired (-1: never)."""

    until: str
    steps: int
    first: int

    @property
    def hit(self) -> bool:
        """True when the armed pass saw a NaN/Inf (and so recorded the full pass)."""
        return self.first >= 0


def _cheap(g: torch.Tensor) -> torch.Tensor | None:
    """The flag of one gradient: a 0-d tensor that is non-finite exactly when ``g`` holds a NaN or Inf.

    On CPU the sum is read at once (one float, 1 us; a CPU has nothing to wait for) and a non-finite sum is
    confirmed with ``isfinite``: a sum of finite values that overflows (float16 past 65,504) is no alarm.
    Elsewhere nothing is read back: float16 sums in float32, float32 and bfloat16 in float64 (neither can
    overflow), float64 as ``(g * 0).sum()`` (NaN exactly when an element is NaN or Inf). Complex gradients
    are checked as their real and imaginary parts. ``None``: the gradient is finite (CPU) or not floating."""
    if g.is_complex():
        g = torch.view_as_real(g.detach())
    elif not g.is_floating_point():
        return None
    g = g.detach()
    if g.is_sparse:
        g = g.coalesce()._values()
    if g.device.type == "cpu":
        total = g.sum(dtype=torch.float32) if g.dtype == torch.float16 else g.sum()
        if math.isfinite(total.item()) or bool(torch.isfinite(g).all()):
            return None
        return total.float()
    if g.dtype == torch.float16:
        return g.sum(dtype=torch.float32)
    if g.dtype == torch.float64:
        return (g * 0).sum()
    return g.sum(dtype=torch.float64)


def _flags(grads: tuple[Any, ...], into: list[torch.Tensor]) -> None:
    for g in grads:
        if isinstance(g, torch.Tensor) and (flag := _cheap(g)) is not None:
            into.append(flag)


class _Checks:
    """The armed pass's hooks: one cheap flag per gradient, numbered by the engine step it belongs to."""

    def __init__(self) -> None:
        self.flags: list[torch.Tensor] = []
        self.step_of: list[int] = []  # flag -> engine step (set when the step finishes: the full record's order)
        self.order: list[Any] = []  # nodes in the order they finished, as the full record numbers its steps
        self.pending: dict[Any, list[int]] = {}  # flags a node's pre-hook read, until it finishes
        self.inner_grads: dict[int, tuple[torch.Tensor, Any]] = {}  # leaves of nested calls: .grad put back
        self.outer_ids: set[int] = set()

    def pre(self, fn: Any, many: bool) -> Callable[[tuple[Any, ...]], None]:
        # many: the root's buffer and sums of several producers (a one-slot buffer holds what was checked)
        def hook(grad_outputs: tuple[Any, ...]) -> None:
            if many:
                n = len(self.flags)
                _flags(grad_outputs, self.flags)
                self.pending[fn] = list(range(n, len(self.flags)))
                self.step_of.extend([-1] * (len(self.flags) - n))
        return hook

    def post(self, fn: Any) -> Callable[[tuple[Any, ...], tuple[Any, ...]], None]:
        def hook(grad_inputs: tuple[Any, ...], _: tuple[Any, ...]) -> None:
            step = len(self.order)
            for k in self.pending.pop(fn, ()):
                self.step_of[k] = step
            n = len(self.flags)
            _flags(grad_inputs, self.flags)
            self.step_of.extend([step] * (len(self.flags) - n))
            self.order.append(fn)
        return hook

    def hook_all(self, visited: list[tuple[Any, Any]]) -> list[Any]:
        slots: dict[Any, int] = {}
        for _, next_functions in visited:
            for nxt, _ in next_functions:
                if nxt is not None:
                    slots[nxt] = slots.get(nxt, 0) + 1
        return [h for fn, _ in visited
                for h in (fn.register_prehook(self.pre(fn, slots.get(fn, 0) != 1)), fn.register_hook(self.post(fn)))]

    def nested(self, roots: list[torch.Tensor], outer: Any) -> Callable[[], None]:
        """An engine call inside the backward (a reentrant checkpoint's inner backward): its nodes checked too."""
        inner = reachable([t.grad_fn for t in roots])
        for fn, _ in inner:
            var = getattr(fn, "variable", None)
            if isinstance(var, torch.Tensor) and id(var) not in self.inner_grads and id(var) not in self.outer_ids:
                self.inner_grads[id(var)] = (var, var.grad)
                var.grad = None
        inner_handles = self.hook_all(inner)
        del inner

        def undo() -> None:
            for h in inner_handles:
                h.remove()
        return undo

    def first_bad_step(self) -> int:
        """The engine step of the first non-finite flag, or -1."""
        if not self.flags:
            return -1
        flags = self.flags
        sums = torch.stack([f.cpu() for f in flags]) if len({f.device for f in flags}) > 1 else torch.stack(flags)
        bad = (~torch.isfinite(sums)).nonzero()
        return self.step_of[int(bad[0])] if len(bad) else -1


def armed_check(loss: torch.Tensor, grad: torch.Tensor | None, until: str, model: nn.Module | None = None) -> Armed:
    """Run ``loss.backward`` (graph kept, ``.grad`` of every leaf put back as it was, what the user's backward
    hooks change undone: :mod:`.undo`) with the cheap check of ``until`` on every step."""
    if until not in UNTIL:
        raise GradvizError(f"record_backward(until={until!r}): give one of {', '.join(map(repr, UNTIL))}.")
    nodes = reachable([loss.grad_fn])
    checks = _Checks()
    leaves = [fn.variable for fn, _ in nodes if hasattr(fn, "variable")]
    checks.outer_ids = {id(t) for t in leaves}
    saved = [t.grad for t in leaves]
    hooked = user_hooks(leaves, ()) or any(HOOK_NODE in fn.name() for fn, _ in nodes)
    handles = checks.hook_all(nodes)
    try:
        for t in leaves:
            t.grad = None
        with undone(leaves, model, hooked=hooked), Nested(checks.nested):
            typed_torch.backward(loss, grad, retain_graph=True)
    finally:
        for h in handles:
            h.remove()
        for t, g in zip(leaves, saved, strict=True):
            t.grad = g
        for t, g in checks.inner_grads.values():
            t.grad = g
        del nodes, handles
    return Armed(until, len(checks.order), checks.first_bad_step())

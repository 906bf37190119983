"""``Why.prove()``: apply a mechanical fix in a re-run, inside the sandbox, and measure the gradient.

Mechanical fixes: drop the recorded ``detach()`` / ``.data`` (matched by its source line), keep the value a
tensor where it left the graph (``.item()`` / ``.tolist()`` / ``.numpy()`` / an integer cast return the tensor,
and ``torch.tensor(t)`` at the line where it came back returns ``t``), unfreeze the parameter (or its frozen
parent), run a ``torch.no_grad()`` region with grad enabled, run a reentrant checkpoint's function directly
(what ``use_reentrant=False`` computes), and leave out the hook that zeroed the gradient. The same forward
and backward run once without and once with the fix, from the same RNG state; the sandbox puts back the
parameters, their ``.grad``, ``requires_grad``, hooks, modes and RNG afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz_nb import schema
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.sandbox import sandbox
from gradviz_nb.tracing import typed_torch
from gradviz_nb.tracing.evidence import WATCHED, Evidence
from gradviz_nb.tracing.ghosts import DATA_GETTER, user_line

if TYPE_CHECKING:
    from gradviz_nb.doctor.why import Why

__all__ = ["MECHANICAL", "Proof", "fix_context", "prove"]

MECHANICAL = ("detached", "data-access", "left-graph", "frozen", "no-grad", "reentrant-checkpoint", "hook-zeroed")


@dataclass(frozen=True)
class Proof:
    """``applied``: whether a fix was applied in a re-run; ``before`` / ``after``: the gradient norm of the
    parameter without and with it (None: no gradient); ``proven``: the gradient appeared (or grew from tiny)."""

    name: str
    fix: str
    applied: bool
    before: float | None = None
    after: float | None = None
    message: str = ""

    def to_json(self, indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``proof`` type)."""
        return schema.dumps(schema.proof(self), indent)

    @property
    def proven(self) -> bool:
        """True when the fix was applied in a re-run and the gradient came back (non-zero, and over 10x what it was)."""
        return self.applied and self.after is not None and self.after > 0 and (
            self.before is None or self.after > 10 * self.before)

    def text(self) -> str:
        """The proof as text: proven or not, the gradient norm with and without the fix, or why no fix was applied."""
        if not self.applied:
            return f"{self.name}: not proven: {self.message}"
        def fmt(v: float | None) -> str:
            return "None" if v is None else f"{v:.4g}"

        verdict = "proven" if self.proven else "NOT proven"
        return (f"{self.name}: {verdict}: with the fix ({self.fix}) |grad| = {fmt(self.after)}, without it "
                f"{fmt(self.before)}{'; ' + self.message if self.message else ''} (re-run in the sandbox; the model "
                "is unchanged)")

    def __repr__(self) -> str:
        return self.text()


class _Fix(TorchFunctionMode):
    """Undo the one recorded cut at its source line during the re-run."""

    def __init__(self, event: Evidence, entered: str) -> None:
        super().__init__()
        self.event, self.entered, self.hits = event, entered, 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        e = self.event
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if first is not None and e.kind in ("detached", "data-access") and (
                func is torch.Tensor.detach or getattr(func, "__self__", None) is DATA_GETTER) and \
                user_line() == e.line:
            self.hits += 1
            return first
        if e.kind == "left-graph" and first is not None:
            kind = WATCHED.get(func)
            if kind in ("leave", "cast") and user_line() == e.line:
                self.hits += 1
                return first.reshape(()) if getattr(func, "__name__", "") in ("item", "__float__") else first
            if kind == "enter" and self.entered and user_line() == self.entered:
                return first
        if e.kind == "hook" and func is torch.Tensor.register_hook and user_line() == e.line:
            self.hits += 1
            return torch.utils.hooks.RemovableHandle({})
        return func(*args, **kwargs)


@contextlib.contextmanager
def _patched(obj: Any, attr: str, value: Any) -> Iterator[None]:
    old = obj.__dict__[attr] if attr in obj.__dict__ else getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


def _grad_enabled_no_grad() -> contextlib.ExitStack[bool | None]:
    """``torch.no_grad()`` blocks run with grad enabled (only while the user's forward runs)."""
    cls = torch.autograd.grad_mode.no_grad
    stack = contextlib.ExitStack()
    stack.enter_context(_patched(cls, "__enter__", lambda self: None))
    stack.enter_context(_patched(cls, "__exit__", lambda self, *exc: None))
    return stack


def _reentrant_direct() -> contextlib.AbstractContextManager[None]:
    from torch.utils import checkpoint as ckpt

    return _patched(ckpt.CheckpointFunction, "apply", staticmethod(lambda function, preserve, *args: function(*args)))


def fix_context(w: Why, model: nn.Module, p: torch.Tensor) -> tuple[contextlib.AbstractContextManager[Any], str]:
    """The mechanical fix of ``w`` as a context to run the forward in (and the fix in words); a frozen parameter
    is unfrozen right away. ``model`` and ``p`` are the live model and parameter (also of a re-run script)."""
    e = w._event
    if w.kind == "frozen":
        parent = w.cause.split("'")[1] if "parent module" in w.cause else ""
        targets = list(model.get_submodule(parent).parameters()) if parent else [p]
        for q in targets:
            q.requires_grad_(True)
        return contextlib.nullcontext(), (f"model.{parent}.requires_grad_(True)" if parent else
                                          f"{w.name}.requires_grad_(True)")
    if w.kind == "no-grad":
        return _grad_enabled_no_grad(), "torch.no_grad() blocks run with grad enabled"
    if w.kind == "reentrant-checkpoint":
        return _reentrant_direct(), "the block run without reentrant checkpointing (what use_reentrant=False computes)"
    if w.kind == "hook-zeroed" and e is None and w._hook is not None:
        owners = [p, *model.modules()]  # the parameter's own hook, or a module's full backward hook
        for owner in owners:
            hooks = getattr(owner, "_backward_hooks", None) or {}
            for key in [k for k, h in hooks.items() if h is w._hook]:
                del hooks[key]  # the sandbox puts the hooks back
        return contextlib.nullcontext(), "the hook left out"
    if e is None:
        raise GradvizError("no recorded evidence to apply the fix at")
    entered = e.via if e.kind == "left-graph" else ""
    text = {"detached": f"the detach() at {e.line} dropped", "data-access": f"the .data at {e.line} dropped",
            "left-graph": f"{e.op} at {e.line} kept a tensor", "hook-zeroed": f"the hook at {e.line} left out"}
    return _Fix(e, entered), text.get(e.kind, "")


def _run(fn: Callable[[], Any], p: torch.Tensor, model: nn.Module, rng: torch.Tensor,
         fix: contextlib.AbstractContextManager[Any]) -> float | None:
    torch.set_rng_state(rng)
    for q in model.parameters():
        q.grad = None
    p.grad = None
    with fix:
        loss = fn()
    if not isinstance(loss, torch.Tensor):
        raise GradvizError(f"fn must return the loss tensor, got {type(loss).__name__}.")
    if loss.requires_grad:
        typed_torch.backward(loss, torch.ones_like(loss))
    g = p.grad
    return None if g is None else float(g.detach().double().norm())


def prove(w: Why, fn: Callable[[], Any] | None, model: nn.Module | None) -> Proof:
    """Re-run forward and backward with the mechanical fix for ``w``'s cause applied, in the sandbox, and measure
    the parameter's gradient with and without it (see :meth:`Why.prove`)."""
    if w.kind not in MECHANICAL:
        what = "nothing is wrong" if w.kind is None else f"this cause ({w.kind}) has no mechanical fix"
        return Proof(w.name, w.fix, False, message=f"{what}; the fix is yours to make: {w.fix}")
    if fn is None or model is None:
        return Proof(w.name, w.fix, False, message="prove() re-runs the forward: pass the loss function and the "
                     "model, w.prove(fn=lambda: loss_fn(model(x), y), model=model), or ask gv.why(model, name, fn=...)")
    if not callable(fn) or not isinstance(model, nn.Module):
        raise GradvizError("prove(fn, model): fn must be a function returning the loss and model an nn.Module.")
    named = dict(model.named_parameters(remove_duplicate=False))
    if w.name not in named:
        raise GradvizError(f"the model has no parameter {w.name!r}")
    p = named[w.name]
    rng = torch.get_rng_state()
    with sandbox(model):
        before = _run(fn, p, model, rng, contextlib.nullcontext())
        try:
            fix, text = fix_context(w, model, p)
            after = _run(fn, p, model, rng, fix)
        except Exception as err:  # the fixed forward failing is a finding of its own, not a crash
            return Proof(w.name, w.fix, False, before, message=f"the re-run with the fix raised "
                         f"{type(err).__name__}: {err}")
        hits = getattr(fix, "hits", None)
        if hits == 0:
            return Proof(w.name, text, False, before, message="the recorded op was not reached in the re-run "
                         f"({w._event.line if w._event else ''})")
    return Proof(w.name, text, True, before, after)

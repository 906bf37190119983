"""``Why.prove()``: apply a mechanical fix in a re-run, inside the sandbox, and measure the gradient.

Mechanical fixes: drop the recorded ``detach()`` / ``.data`` / in-place ``detach_()`` (matched by its source
line); at the line where a value left the graph, keep the tensor (``.item()`` / ``.tolist()`` / a copy constructor
/ a cast return the tensor; ``float(t)`` / ``int(t)`` / ``.numpy()`` return the number or array, and the
``torch.tensor(...)`` that brings that very number back, or a tensor over that array's memory
(``torch.from_numpy``), stands for ``t``); unfreeze the parameter (or its frozen parent), and keep it unfrozen if
the forward switches it off again; run a ``torch.no_grad()`` or ``torch.inference_mode()`` region with grad
enabled; run a reentrant checkpoint as ``use_reentrant=False``; and leave out the hook (tensor, module forward,
forward pre, full backward, backward pre) that zeroed the gradient.

Nothing is patched for the process: every switch is per thread. Grad mode is lifted by a ``TorchFunctionMode``
(modes are per thread) that runs each torch call made with grad off under ``enable_grad``; the checkpoint is
switched by a profile function (``sys.setprofile`` is per thread) that sets ``use_reentrant=False`` in the
``checkpoint(...)`` call's frame. Another thread inside ``torch.no_grad()`` meanwhile sees grad off, and
``CheckpointFunction`` keeps its class dict.

The same forward and backward run once without and once with the fix, from the same RNG state; the sandbox puts
back the parameters, their ``.grad``, ``requires_grad``, hooks, modes and RNG afterwards. What counts as proven
is connection, measured: ``None`` before and any gradient after (even an exact zero: the path is there);
zero before and non-zero after; for a tiny or scaled gradient, a different gradient with the fix.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz_nb import schema
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.sandbox import MODULE_HOOKS, TENSOR_HOOKS, sandbox
from gradviz_nb.tracing import typed_torch
from gradviz_nb.tracing.cuts import dropped_grad, grad_input
from gradviz_nb.tracing.evidence import WATCHED, Evidence
from gradviz_nb.tracing.ghosts import DATA_GETTER, user_line

if TYPE_CHECKING:
    from gradviz_nb.doctor.why import Why

__all__ = ["MECHANICAL", "Proof", "fix_context", "prove"]

MECHANICAL = ("detached", "data-access", "left-graph", "frozen", "no-grad", "reentrant-checkpoint", "hook-zeroed")
SAME = 1e-6  # relative change below this: the fix left a tiny or scaled gradient as it was


@dataclass(frozen=True)
class Proof:
    """``applied``: whether a fix was applied in a re-run; ``before`` / ``after``: the gradient norm of the
    parameter without and with it (None: no gradient); ``status``: what was measured before (``"none"``,
    ``"zero"``, ``"tiny"``, ``"scaled"``); ``proven``: connection, measured (see the module docstring)."""

    name: str
    fix: str
    applied: bool
    before: float | None = None
    after: float | None = None
    message: str = ""
    status: str = ""

    def to_json(self, indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``proof`` type)."""
        return schema.dumps(schema.proof(self), indent)

    @property
    def proven(self) -> bool:
        """Connection, measured: None before and any gradient after (an exact zero included), zero before and
        non-zero after, or a tiny or scaled gradient the fix changed."""
        if not self.applied or self.after is None:
            return False
        if self.before is None:
            return True  # None -> any gradient, an exact zero included: the parameter is connected again
        if self.status == "zero" or self.before == 0:
            return self.after > 0
        return abs(self.after - self.before) > SAME * max(abs(self.before), abs(self.after))

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


def _like(t: torch.Tensor, out: Any) -> Any:
    """``t`` standing in for ``out`` (same number of values), or None when it cannot."""
    if isinstance(out, torch.Tensor) and (out.is_floating_point() or out.is_complex()) and out.numel() == t.numel():
        return t.reshape(out.shape).to(out.dtype)
    return None


class _Fix(TorchFunctionMode):
    """Undo the one recorded cut at its source line during the re-run (this thread only)."""

    def __init__(self, event: Evidence) -> None:
        super().__init__()
        self.event, self.hits, self.refused = event, 0, ""
        self.lines = {line for line in (event.line, event.via) if line}
        self._kept: dict[int, tuple[Any, torch.Tensor]] = {}  # id(number float(t) returned) -> (number, t)
        self._arrays: list[tuple[int, torch.Tensor]] = []  # (address of an array .numpy() gave, t)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        e = self.event
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if first is not None and e.kind in ("detached", "data-access") and (
                func is torch.Tensor.detach or getattr(func, "__self__", None) is DATA_GETTER) and \
                user_line() == e.line:
            self.hits += 1
            return first
        if first is not None and e.kind == "detached" and e.op == f".{getattr(func, '__name__', '')}()" and \
                first.grad_fn is not None and user_line() == e.line:  # an in-place op that took the history
            self.hits += 1
            return first
        if e.kind == "hook" and func is torch.Tensor.register_hook and user_line() == e.line:
            self.hits += 1
            return torch.utils.hooks.RemovableHandle(OrderedDict())  # a handle to nothing (it weak-refs the dict)
        if self._arrays:
            args = tuple(self._from_array(a) for a in args)
        out = func(*args, **kwargs)
        if e.kind in ("left-graph", "zero-derivative") and torch.is_grad_enabled():
            return self._keep(func, args, kwargs, out)
        return out

    def _from_array(self, a: Any) -> Any:
        """A tensor without history over the memory of an array ``.numpy()`` gave (``torch.from_numpy``, which
        torch functions do not see): ``t`` again."""
        if isinstance(a, torch.Tensor) and not a.requires_grad and a.device.type == "cpu":
            for ptr, t in self._arrays:
                if a.data_ptr() == ptr and a.numel() == t.numel():
                    return t.reshape(a.shape).to(a.dtype)
        return a

    def _keep(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> Any:
        back = next((kept for v in (*args, *kwargs.values()) if (kept := self._kept.get(id(v))) and kept[0] is v),
                    None)
        if back is not None and _like(back[1], out) is not None:
            return _like(back[1], out)  # torch.tensor(float(t)): the number float() gave back is t again
        found = grad_input(args, kwargs)
        if found is None or not dropped_grad(out) or user_line() not in self.lines:
            return out
        t = found[1]
        name = getattr(func, "__name__", "")
        if isinstance(out, (float, int, bool, complex)) and t.numel() == 1:
            self.hits += 1
            if name.startswith("__"):  # float(t), int(t): Python insists on a number; remember which one
                self._kept[id(out)] = (out, t)
                return out
            return t.reshape(())
        if isinstance(out, list):
            self.hits += 1
            return t
        if type(out).__module__ == "numpy" and getattr(out, "size", -1) == t.numel():
            self.hits += 1  # .numpy(): the array stays (numpy code may read it); a tensor over its memory is t
            self._arrays.append((int(out.__array_interface__["data"][0]), t))
            return out
        stand_in = _like(t, out)
        if stand_in is None and WATCHED.get(func) == "cast" and isinstance(out, torch.Tensor) \
                and out.numel() == t.numel():
            stand_in = t.reshape(out.shape)  # an integer cast dropped: the values stay as computed
        if stand_in is None:
            self.refused = (f"{self.event.op} returns {self.event.value or 'a value'} with no derivative: keeping a "
                            "tensor there needs a differentiable replacement (a soft version of the op), not a "
                            "mechanical fix")
            return out
        self.hits += 1
        return stand_in


class _LiftGrad(TorchFunctionMode):
    """This thread only: each torch call made while grad mode is off (``no_grad``, ``set_grad_enabled(False)``,
    ``inference_mode``) runs with grad on. Calls inside the backward are left alone."""

    def __init__(self) -> None:
        super().__init__()
        self.hits = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if (not torch.is_grad_enabled() or torch.is_inference_mode_enabled()) and \
                int(torch._C._current_graph_task_id()) == -1:
            self.hits += 1
            with torch.inference_mode(False), torch.enable_grad():
                return func(*args, **kwargs)
        return func(*args, **kwargs)


class _KeepGrad(TorchFunctionMode):
    """This thread only: ``requires_grad_(False)`` / ``.requires_grad = False`` on the unfrozen parameters is
    skipped, so a step or hook that freezes them again in the re-run does not undo the fix."""

    def __init__(self, targets: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.ids = {id(t) for t in targets}
        self.kept = 0  # freezes skipped (not ``hits``: a plain frozen parameter has none to skip)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _SWITCH and args and id(args[0]) in self.ids:
            value = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
            if not value:
                self.kept += 1
                return args[0] if func is torch.Tensor.requires_grad_ else None
        return func(*args, **kwargs)


_SWITCH = (torch.Tensor.requires_grad_, vars(torch._C.TensorBase)["requires_grad"].__set__)


def _set_local(frame: Any, name: str, value: Any) -> None:
    frame.f_locals[name] = value  # Python 3.13+: f_locals writes through (PEP 667)
    if sys.version_info < (3, 13):
        import ctypes

        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


class _NoReentrant:
    """This thread only: every ``torch.utils.checkpoint.checkpoint(...)`` call runs as ``use_reentrant=False``
    (a profile function, per thread, sets the argument in the call's frame; the user's own profile function is
    still called and put back afterwards)."""

    def __init__(self) -> None:
        from torch.utils import checkpoint as ckpt

        self.code = inspect.unwrap(ckpt.checkpoint).__code__
        self.hits = 0
        self._old: Any = None

    def _profile(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code is self.code and frame.f_locals.get("use_reentrant") is not False:
            _set_local(frame, "use_reentrant", False)
            self.hits += 1
        if self._old is not None:
            return self._old(frame, event, arg)
        return None

    def __enter__(self) -> _NoReentrant:
        self._old = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(self._old)


def _drop_hook(hook: Any, owners: list[Any]) -> int:
    """Leave ``hook`` out of every hook dict of ``owners`` (the sandbox puts them back). How many were found."""
    found = 0
    for owner in owners:
        for attr in (*MODULE_HOOKS, *TENSOR_HOOKS):
            hooks = getattr(owner, attr, None)
            if not isinstance(hooks, dict):
                continue
            for key in [k for k, h in hooks.items() if h is hook or getattr(h, "__wrapped__", None) is hook]:
                del hooks[key]
                found += 1
    return found


def fix_context(w: Why, model: nn.Module, p: torch.Tensor) -> tuple[contextlib.AbstractContextManager[Any], str]:
    """The mechanical fix of ``w`` as a context to run the forward in (and the fix in words); a frozen parameter
    is unfrozen right away. ``model`` and ``p`` are the live model and parameter (also of a re-run script)."""
    e = w._event
    if w.kind == "frozen":
        parent = w.cause.split("'")[1] if "parent module" in w.cause else ""
        targets = list(model.get_submodule(parent).parameters()) if parent else [p]
        for q in targets:
            q.requires_grad_(True)
        return _KeepGrad(targets), (f"model.{parent}.requires_grad_(True)" if parent else
                                          f"{w.name}.requires_grad_(True)")
    if w.kind == "no-grad":
        how = e.op if e is not None and e.op.startswith("torch.") else "torch.no_grad()"
        return _LiftGrad(), f"{how} blocks run with grad enabled (this thread only)"
    if w.kind == "reentrant-checkpoint":
        return _NoReentrant(), "the checkpoint run with use_reentrant=False"
    if w.kind == "hook-zeroed" and (e is None or e.kind != "hook") and w._hook is not None:
        hits = _drop_hook(w._hook, [p, *model.modules()])
        if not hits:
            raise GradvizError("the hook was not found on the parameter or on any module of the model")
        return contextlib.nullcontext(), "the hook left out"
    if e is None:
        raise GradvizError("no recorded evidence to apply the fix at")
    text = {"detached": f"the detach() at {e.line} dropped", "data-access": f"the .data at {e.line} dropped",
            "left-graph": f"{e.op} at {e.line} kept a tensor", "zero-derivative": f"{e.op} at {e.line} kept a tensor",
            "hook": f"the hook at {e.line} left out"}
    return _Fix(e), text.get(e.kind, "")


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
                         f"{type(err).__name__}: {err}", status=w.status)
        hits = getattr(fix, "hits", None)
        if hits == 0:
            refused = getattr(fix, "refused", "")
            return Proof(w.name, text, False, before, message=refused or "the recorded op was not reached in the "
                         f"re-run ({w._event.line if w._event else ''})", status=w.status)
    return Proof(w.name, text, True, before, after, status=w.status)

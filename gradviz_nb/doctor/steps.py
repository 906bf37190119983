"""The arithmetic of one training step, event by event: every backward, ``zero_grad()``, optimizer and scheduler step.

:class:`StepWatch` is installed around one run of the user's step (by :mod:`gradviz_nb.doctor.observe`) and
records, in order:

- each backward: its loss value, the numbers the loss was multiplied or divided by on its way to
  ``backward()`` (seen by a ``TorchFunctionMode`` on one-element tensors), which model forward it followed
  and that forward's input fingerprint, and each tensor's gradient *contribution* (the ``.grad`` delta it
  added, as an L2 norm);
- each ``zero_grad()`` of any optimizer or module (a patch of ``torch.optim.Optimizer.zero_grad`` and
  ``nn.Module.zero_grad``) with its source line;
- each step of ANY optimizer (torch's global optimizer step pre/post hooks): the gradient it used, the
  value change each tensor really received, what the optimizer's rule gives for that gradient, and the
  tensors a backward of this step fed that were ``None`` or zero again when it stepped;
- each LR scheduler step (a patch of ``step`` on the scheduler classes), with the learning rates around it.

Every hook and patch is removed in ``finally``, also when the step raises. ``on_sight`` is called with each
optimizer and scheduler the first time it is touched, before the touch, so the doctor can snapshot it.
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.optim.optimizer as optimizer_globals
from torch import nn
from torch.optim.lr_scheduler import LRScheduler
from torch.overrides import TorchFunctionMode

from gradviz_nb.doctor.grad_edits import GradEdits
from gradviz_nb.doctor.step_events import (
    Backward,
    Foreign,
    OptimizerStep,
    SchedulerStep,
    StepEvents,
    ZeroGrad,
    caller_line,
)
from gradviz_nb.doctor.values_watch import ValueWatch
from gradviz_nb.probes.owned import for_this_thread, in_this_thread

__all__ = ["StepWatch"]

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gradviz_nb/
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


# Ways to reach a tensor's memory past its version counter (a write through them bumps nothing): after one of
# these, values can no longer be judged unchanged by version counters (``StepWatch.escapes``).
_ESCAPES = {torch.Tensor.numpy, torch.Tensor.untyped_storage, torch.Tensor.storage, torch.Tensor._typed_storage,
            torch.Tensor.data_ptr, torch.Tensor.__array__, torch.Tensor.__dlpack__}


def _escape(func: Any) -> bool:
    if func in _ESCAPES:
        return True
    owner = getattr(func, "__self__", None) if type(func).__name__ == "method-wrapper" else None
    return owner is not None and getattr(owner, "__name__", "") == "data"  # ``t.data``: a new version counter


_DIV = {torch.Tensor.div, torch.Tensor.div_, torch.Tensor.true_divide, torch.div, torch.true_divide}
_MUL = {torch.Tensor.mul, torch.Tensor.mul_, torch.mul}
_ADD = {torch.Tensor.add, torch.Tensor.add_, torch.add}
_SWITCH = {torch.Tensor.requires_grad_, vars(torch._C.TensorBase)["requires_grad"].__set__}  # .requires_grad_(b), = b


class _ScaleMode(TorchFunctionMode):
    """Follows one-element tensors that require grad through multiplications and divisions by a number, so a
    backward can say what its loss was scaled by (``loss / accumulation_steps``) and where."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[int, tuple[weakref.ref[torch.Tensor], float, tuple[str, ...]]] = {}
        self.amp: dict[int, float] = {}  # product of tensor multipliers (a GradScaler's scale) on the way
        self.edits = GradEdits()
        self.values = ValueWatch()
        self.order: Callable[[], int] = lambda: 0
        self.params: dict[int, str] = {}  # the model's parameters by id, for requires_grad switches
        self.switched_off: dict[str, str] = {}
        self.escapes = 0  # calls that reached a tensor's memory past its version counter (see _ESCAPES)

    def amp_of(self, t: object) -> float:
        return self.amp.get(id(t), 1.0) if self.lookup(t) is not None else 1.0

    def lookup(self, t: object) -> tuple[float, tuple[str, ...]] | None:
        hit = self.seen.get(id(t))
        return (hit[1], hit[2]) if hit is not None and hit[0]() is t else None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in _SWITCH and args and id(args[0]) in self.params:
            self._switch(args, kwargs)
        if _escape(func):
            self.escapes += 1
        hit = self.edits.hit(func, args)
        before = GradEdits.norm(hit) if hit else 0.0
        watching = self.values.in_forward
        old = self.values.before(func, args) if watching else None
        out = func(*args, **(kwargs or {}))
        if hit:
            self.edits.record(self.order(), func, hit, before)
        if watching:
            self.values.after(func, args, out, old)
        if (func in _DIV or func in _MUL or func in _ADD) and isinstance(out, torch.Tensor) and len(args) == 2 \
                and out.requires_grad and out.numel() == 1 and not torch.compiler.is_compiling():
            self._note(func, args, out)
        return out

    def _switch(self, args: Any, kwargs: Any) -> None:
        """A parameter's requires_grad set to False during the step: where (the first time)."""
        value = args[1] if len(args) > 1 else (kwargs or {}).get("requires_grad", True)
        if not value:
            self.switched_off.setdefault(self.params[id(args[0])], caller_line())

    def _note(self, func: Any, args: Any, out: torch.Tensor) -> None:
        a, b = args
        if not isinstance(a, torch.Tensor):
            a, b = b, a
        base = self.lookup(a)
        if func in _ADD:
            other = self.lookup(b) if isinstance(b, torch.Tensor) else base
            if base is None or other is None or abs(base[0] - other[0]) > 1e-6 * abs(base[0]):
                return
            self.seen[id(out)] = (weakref.ref(out), base[0], base[1])
            self.amp[id(out)] = self.amp_of(a)
            return
        f0, lines = base if base is not None else (1.0, ())
        number = float(b) if isinstance(b, (int, float)) and not isinstance(b, bool) else None
        if number is None and isinstance(b, torch.Tensor) and b.numel() == 1 and not b.requires_grad \
                and func in _DIV:
            number = float(b)  # a divisor held in a tensor
        if number is None or (number == 0 and func in _DIV):
            if isinstance(b, torch.Tensor) and not b.requires_grad:  # a GradScaler's scale: follow, not counted
                self.seen[id(out)] = (weakref.ref(out), f0, lines)
                self.amp[id(out)] = self.amp_of(a) * (float(b) if b.numel() == 1 and func in _MUL else 1.0)
            return
        factor = 1 / number if func in _DIV else number
        amp = self.amp_of(a)
        self.seen[id(out)] = (weakref.ref(out), f0 * factor, (*lines, caller_line()))
        self.amp[id(out)] = amp


def _local(t: torch.Tensor) -> torch.Tensor:
    to_local = getattr(t, "to_local", None)  # a DTensor shard: this rank's part
    return to_local() if callable(to_local) else t


def _norm(t: torch.Tensor) -> float:
    t = _local(t).detach()
    if t.is_sparse:
        t = t.coalesce().values()
    if t.is_complex():
        return float(t.abs().float().norm())  # .float() of a complex tensor would drop the imaginary part
    return float(t.float().norm()) if t.is_floating_point() else 0.0


def _max_abs(t: torch.Tensor) -> float:
    """The largest ``|element|`` (NaN if any is NaN), without an ``abs()`` copy of the tensor."""
    if not t.numel():
        return 0.0
    if t.is_complex() or t.is_sparse:
        return float(t.abs().max())
    low, top = torch.aminmax(t) if t.is_contiguous() else (t.amin(), t.amax())
    hi, lo = float(top), float(low)
    return math.nan if math.isnan(hi) or math.isnan(lo) else max(hi, -lo)


def _fingerprint(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Shapes and two checksums of a forward's tensor inputs: the same batch gives the same fingerprint."""
    out = []
    for v in [*args, *kwargs.values()][:8]:
        if isinstance(v, torch.Tensor) and v.device.type != "meta" and v.numel() <= 10_000_000 \
                and not hasattr(v, "to_local"):
            with torch.no_grad():
                d = v.detach()
                d = torch.view_as_real(d.resolve_conj()).double() if d.is_complex() else d.double()  # both parts
                out.append((tuple(v.shape), float(d.sum()), float(d.abs().sum())))
    return tuple(out)


def _lr(group: dict[str, Any]) -> float:
    lr = group.get("lr", 0.0)
    return float(lr.item() if isinstance(lr, torch.Tensor) else lr)


_ADAM = ("Adam", "AdamW", "NAdam", "RAdam", "Adamax", "SparseAdam")


class StepWatch:
    """Records one step's :class:`StepEvents` while :meth:`installed` is active (see the module docstring)."""

    def __init__(self, model: nn.Module, extra: dict[str, torch.Tensor], labels: dict[int, str],
                 known: dict[int, torch.optim.Optimizer], on_sight: Callable[[object], None],
                 start: Mapping[int, tuple[torch.Tensor, torch.Tensor, int]] | None = None) -> None:
        self.model, self.extra, self._labels, self._known = model, extra, labels, known
        # id(tensor) -> (tensor, a copy of its values, its version counter) at the start of the step, taken by
        # the caller: an optimizer step that finds a tensor unwritten since compares with that copy
        self._start = start or {}
        self._sight = on_sight
        self.ev = StepEvents()
        self._order = 0
        self.start = dict(model.named_parameters())
        self._scales = _ScaleMode()
        self._batch: tuple[Any, ...] | None = None
        self._roots: list[weakref.ref[torch.Tensor]] = []
        self._pending: dict[int, list[tuple[str, torch.Tensor, torch.Tensor, dict[str, Any], bool]]] = {}
        self._depth = 0
        self._fed: set[str] = set()  # tensors a backward fed that no optimizer has stepped since
        self._scales.order = self._next
        self.ev.edits = self._scales.edits.log
        self.ev.writes = self._scales.values.writes
        self.ev.calls = self._scales.values.calls
        self._scales.params = {id(p): n for n, p in self.start.items()}
        self.ev.switched_off = self._scales.switched_off

    def _next(self) -> int:
        self._order += 1
        return self._order

    def on_sight(self, obj: object) -> None:
        if isinstance(obj, torch.optim.Optimizer):
            self._known.setdefault(id(obj), obj)
        self._sight(obj)

    @property
    def escapes(self) -> int:
        """How many calls so far reached a tensor's memory past its version counter (``.data``, ``.numpy()``,
        a storage, a pointer): while it stays the same, a tensor whose version counter did not move holds the
        values it held (what lets the doctor reuse statistics it read)."""
        return self._scales.escapes

    def label(self, opt: object) -> str:
        name = self._labels.get(id(opt))
        return f"{name} ({type(opt).__name__})" if name else type(opt).__name__

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor whose gradient is followed, by name: the model's parameters as they are now, the
        originals of any the step replaced, the weights outside ``parameters()``, and what optimizers hold."""
        out = dict(self.extra)
        now = dict(self.model.named_parameters())
        out.update(now)
        ids = {id(t) for t in out.values()}
        for n, p in self.start.items():
            if id(p) not in ids:
                out[f"{n} (original)"] = p
                ids.add(id(p))
        for opt in self._known.values():
            for gi, g in enumerate(opt.param_groups):
                for pi, p in enumerate(g["params"]):
                    if id(p) not in ids:
                        out[f"{self.label(opt)}.param_groups[{gi}][{pi}]"] = p
                        ids.add(id(p))
        return out

    def check_recreated(self) -> None:
        for n, p in self.model.named_parameters():
            old = self.start.get(n)
            if old is None or hasattr(old, "to_local") or hasattr(p, "to_local"):
                continue  # FSDP2 swaps its DTensor shards for unsharded parameters around forward: by design
            if old is not p and n not in self.ev.recreated:
                self.ev.recreated[n] = id(old)

    # -- backward -----------------------------------------------------------------------------------------
    def before_backward(self, root: object) -> Callable[[Any], Backward]:
        """Call before the engine runs; the returned function, called after it (with the traced graph or
        None), makes the :class:`Backward` record."""
        self.check_recreated()
        self._scales.values.in_forward = False
        self._scales.values.aliases.clear()
        order = self._next()
        tensors = self.tensors()
        before = {n: t.grad.detach().clone() for n, t in tensors.items() if t.grad is not None}
        loss = None
        repeat = None
        scale: tuple[float, tuple[str, ...]] | None = None
        amp = 1.0
        if isinstance(root, torch.Tensor):
            loss = float(root.detach().float().sum()) if root.numel() else None
            repeat = next((i for i, r in enumerate(self._roots) if r() is root), None)
            scale = self._scales.lookup(root)
            amp = self._scales.amp_of(root)
            self._roots.append(weakref.ref(root))
        rec = Backward(order, len(self.ev.backwards), loss, *(scale or (1.0, ())), self.ev.forwards, self._batch,
                       repeat, amp=amp, frozen=frozenset(n for n, t in tensors.items() if not t.requires_grad),
                       line=caller_line())
        if self._fed:
            with torch.no_grad():
                rec.cleared = frozenset(n for n in self._fed if n not in before or not bool(before[n].any()))

        def after(graph: Any) -> Backward:
            for n, t in tensors.items():
                g = t.grad
                if g is None:
                    continue
                old = before.get(n)
                delta = g if old is None or old.shape != g.shape or old.layout != g.layout else g - old
                v = _norm(delta) / (amp if amp > 0 and math.isfinite(amp) else 1.0)
                if v > 0:
                    rec.contrib[n] = v
            if graph is not None:
                self._foreign(graph, {id(t) for t in tensors.values()})
            self.ev.backwards.append(rec)
            self._fed |= set(rec.contrib)
            self._scales.edits.track({n: t.grad for n, t in tensors.items() if t.grad is not None})
            return rec

        return after

    def _foreign(self, graph: Any, known: set[int]) -> None:
        for node, ref in getattr(graph, "tensors", {}).items():
            t = ref()
            if isinstance(t, nn.Parameter) and id(t) not in known:
                where = str(graph.nx.nodes[node].get("call", "")) if node in graph.nx else ""
                self.ev.foreign.append(Foreign(tuple(t.shape), where or "(model)", weakref.ref(t)))

    def finish(self) -> None:
        """After the step: gradients of the outside parameters, and which replaced parameters an optimizer
        holds in their new form."""
        self.check_recreated()
        for f in self.ev.foreign:
            t = f.ref()
            f.grad = _norm(t.grad) if t is not None and t.grad is not None else 0.0
        now = dict(self.model.named_parameters())
        held = {id(p) for o in self._known.values() for g in o.param_groups for p in g["params"]}
        for n in self.ev.recreated:
            self.ev.recreated_held[n] = n in now and id(now[n]) in held

    # -- forward, zero_grad, optimizers, schedulers -------------------------------------------------------
    def _forward(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not torch.compiler.is_compiling():
            self.ev.forwards += 1
            self._batch = _fingerprint(args, kwargs)
            values = self._scales.values
            values.params = {id(p): n for n, p in self.model.named_parameters()}
            values.in_forward = True

    def _zero(self, owner: object) -> None:
        if isinstance(owner, torch.optim.Optimizer):
            self.on_sight(owner)
            who = f"{self._labels.get(id(owner)) or type(owner).__name__}.zero_grad()"
        else:
            who = f"{'model' if owner is self.model else type(owner).__name__}.zero_grad()"
        self.ev.zeros.append(ZeroGrad(self._next(), who, caller_line()))

    def _pre_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.on_sight(opt)
        key = id(opt)
        self.ev.optimizers[key] = opt
        self.ev.labels.setdefault(key, self.label(opt))
        names = {id(t): n for n, t in self.tensors().items()}
        last = max((s.order for s in self.ev.optimizer_steps if s.key == key), default=0)
        fed = {n for b in self.ev.backwards if b.order > last for n in b.contrib}
        step = OptimizerStep(self._next(), self.ev.labels[key], type(opt).__name__, key, line=caller_line())
        pending = []
        for g in opt.param_groups:
            for p in g["params"]:
                n = names.get(id(p), f"tensor {tuple(p.shape)}")
                step.lr_all[n] = _lr(g)
                norm = _norm(p.grad) if p.grad is not None else 0.0
                if norm == 0:
                    if n in fed:
                        step.zeroed[n] = "None" if p.grad is None else "all zeros"
                    continue
                state = opt.state.get(p, {})
                fresh = not state or (state.get("momentum_buffer") is None and "step" not in state)
                step.lr[n], step.grad[n] = _lr(g), norm
                pending.append((n, p, self._values_now(p), g, fresh))
        self._pending[key] = pending
        self.ev.optimizer_steps.append(step)

    def _values_now(self, p: torch.Tensor) -> torch.Tensor:
        """A copy of ``p``'s values now: the step's starting copy when ``p`` was not written since (its version
        counter did not move and nothing reached any tensor's memory past its counter), else a new one."""
        start = self._start.get(id(p))
        # Metadata read past the step's modes: through them, each read of a parameter's shape or version is an
        # op the capture would measure as a possible cut (once per shape, with probe tensors of its size).
        with torch._C.DisableTorchFunction():
            same = start is not None and start[0] is p and self.escapes == 0 and p._version == start[2] \
                and start[1].shape == p.shape and start[1].dtype == p.dtype
        if start is not None and same:
            return start[1]
        return p.detach().clone()

    def _post_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        step = next((s for s in reversed(self.ev.optimizer_steps) if s.key == id(opt)), None)
        if step is None:
            return
        self._fed -= set(step.lr_all)
        self._scales.edits.tracked = {}
        for n, p, before, group, fresh in self._pending.pop(id(opt), []):
            with torch.no_grad():
                delta = _local(p.detach()) - _local(before)
                step.update[n] = _norm(delta)
                step.update_max[n] = _max_abs(delta)
            step.rule[n] = self._rule(step, n, p, before, group, fresh)
        step.rule_is_bound = step.kind in _ADAM

    @staticmethod
    def _rule(step: OptimizerStep, n: str, p: torch.Tensor, before: torch.Tensor, group: dict[str, Any],
              fresh: bool) -> float:
        lr, wd = step.lr[n], float(group.get("weight_decay", 0.0) or 0.0)
        if not fresh or p.grad is None:
            return float("nan")
        if step.kind == "SGD":
            g = _local(p.grad.detach()).float()
            if wd:
                g = g + wd * _local(before).float()
            nesterov = 1 + float(group.get("momentum", 0.0) or 0.0) if group.get("nesterov") else 1.0
            return lr * nesterov * _norm(g)
        if step.kind in _ADAM:
            decay = lr * wd * _max_abs(_local(before)) if step.kind == "AdamW" else 0.0
            return lr + decay
        return float("nan")

    def _sched(self, sched: Any) -> None:
        self.on_sight(sched)
        opt = getattr(sched, "optimizer", None)
        if opt is not None:
            self.on_sight(opt)

    # -- installing -----------------------------------------------------------------------------------------
    @contextmanager
    def installed(self) -> Iterator[StepWatch]:
        """Every hook and patch for one step, removed on exit (also when the block raises)."""
        with ExitStack() as stack:
            # global hooks fire in every thread: only this thread's steps are this step's
            hooks = [optimizer_globals.register_optimizer_step_pre_hook(in_this_thread(self._pre_step)),
                     optimizer_globals.register_optimizer_step_post_hook(in_this_thread(self._post_step)),
                     self.model.register_forward_pre_hook(in_this_thread(self._forward), with_kwargs=True)]
            for h in hooks:
                stack.callback(h.remove)
            stack.enter_context(_patched(torch.optim.Optimizer, "zero_grad", self._zero))
            stack.enter_context(_patched(nn.Module, "zero_grad", self._zero))
            for cls in _scheduler_classes():
                stack.enter_context(self._scheduler_patch(cls))
            stack.enter_context(self._scales)
            stack.enter_context(self._scales.values.functions())
            yield self

    @contextmanager
    def _scheduler_patch(self, cls: type) -> Iterator[None]:
        watch = self

        def step(original: Callable[..., Any], sched: Any, *args: Any, **kwargs: Any) -> Any:
            watch._sched(sched)
            if watch._depth:
                return original(sched, *args, **kwargs)
            opt = getattr(sched, "optimizer", None)
            before = [_lr(g) for g in opt.param_groups] if opt is not None else []
            watch._depth += 1
            try:
                return original(sched, *args, **kwargs)
            finally:
                watch._depth -= 1
                after = [_lr(g) for g in opt.param_groups] if opt is not None else []
                watch.ev.scheduler_steps.append(SchedulerStep(watch._next(), type(sched).__name__, before, after))

        with for_this_thread(cls, "step", step):
            yield


def _scheduler_classes() -> list[type]:
    out: list[type] = []
    todo: list[type] = [LRScheduler]
    while todo:
        cls = todo.pop()
        if "step" in vars(cls) and cls not in out:
            out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


@contextmanager
def _patched(cls: type, name: str, before: Callable[[object], None]) -> Iterator[None]:
    """``cls.name`` calls ``before(self)`` first in this thread, until the block exits (other threads' calls
    are not seen: probes/owned.py)."""

    def wrapper(original: Callable[..., Any], self: object, *args: Any, **kwargs: Any) -> Any:
        before(self)
        return original(self, *args, **kwargs)

    with for_this_thread(cls, name, wrapper):
        yield

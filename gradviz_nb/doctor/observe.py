"""Running the user's training step under observation, one step at a time.

The step is the user's own code, so the doctor cannot be told where the loss is. It watches instead:
``torch.autograd.backward`` (which ``loss.backward()`` calls) is wrapped while the step runs, so the
doctor sees each backward's root, traces its graph before the engine frees it, checks whether
``.grad`` was cleared since the previous step, and reads the gradients right after backward, before
the optimizer or a ``zero_grad()`` can change them, and again just before each optimizer's ``step()``,
when they are final (accumulated, unscaled by a GradScaler, clipped). The step's arithmetic (every
backward's contribution, every ``zero_grad()``, every optimizer and scheduler step, the update each tensor
received) is recorded by :class:`~gradviz_nb.doctor.steps.StepWatch`. Everything is undone when the step
returns or raises.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.optim.optimizer as optimizer_globals
from torch import nn

from gradviz_nb.doctor.step_events import StepEvents
from gradviz_nb.doctor.steps import StepWatch
from gradviz_nb.probes.flow import GradientFlow, gradient_flow
from gradviz_nb.probes.owned import for_this_thread, in_this_thread
from gradviz_nb.probes.sharded import reshard_fsdp
from gradviz_nb.tracing import AutogradGraph, Capture, capture, trace

if TYPE_CHECKING:
    from gradviz_nb.doctor.why import Why

__all__ = ["Sightings", "StepRecord", "mode_matters", "observe_step", "observing"]


@dataclass
class StepRecord:
    """What one observed step did. ``backwards``, ``loss``, ``graph`` and ``flow`` describe the first
    backward (``flow`` is refreshed at each later backward, and just before an optimizer step unless that step
    found the gradients cleared); ``events`` holds every backward, zero_grad and optimizer/scheduler step."""

    index: int
    backwards: int = 0
    graph: AutogradGraph | None = None
    cap: Capture | None = None
    flow: GradientFlow | None = None
    loss: float | None = None
    training_at_backward: bool | None = None
    eval_at_backward: list[str] = field(default_factory=list)  # dropout / batch-norm modules in eval() then
    training_at_forward: bool | None = None
    stale: dict[str, int] = field(default_factory=dict)  # parameter -> version its .grad still had when the
    # first backward of this step that fed it ran (per parameter: another optimizer's backward does not count)
    moved: set[str] = field(default_factory=set)  # parameters whose value changed during the step
    written: set[str] = field(default_factory=set)  # parameters written in place during the step (version counter)
    error: BaseException | None = None
    grads_after: dict[str, tuple[weakref.ref[torch.Tensor], int]] = field(default_factory=dict)
    events: StepEvents = field(default_factory=StepEvents)
    measured: dict[str, Why] = field(default_factory=dict)  # zero/tiny gradients explained by the zero replay


@dataclass
class Sightings:
    """What the doctor learns across steps: names for optimizers (from the step function's variables), the
    optimizers touched so far, and ``on_sight`` (called before an optimizer or scheduler is first touched)."""

    labels: dict[int, str] = field(default_factory=dict)
    known: dict[int, torch.optim.Optimizer] = field(default_factory=dict)
    on_sight: Callable[[object], None] = lambda _: None
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # weights outside model.parameters()


def mode_matters(m: nn.Module) -> bool:
    """Whether ``m`` computes differently in train() and eval(): dropout that drops, batch norm that keeps
    running statistics."""
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return bool(m.track_running_stats)
    if isinstance(m, nn.modules.dropout._DropoutNd) or "Dropout" in type(m).__name__:
        return float(getattr(m, "p", 1.0)) > 0
    return False


def _flow_marks(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> list[Any]:
    """What a :class:`GradientFlow` of the step reads, by identity and version counter: each parameter (its
    object, version, ``requires_grad``), its ``.grad`` (object and version), and the optimizer's groups
    (which tensors, which hyper-parameters). Equal marks: the same numbers, so the flow is not computed again
    (an optimizer step right after the backward used the gradients the backward left)."""
    marks: list[Any] = []
    with torch._C.DisableTorchFunction():  # reading addresses is not the step's (StepWatch.escapes)
        _marks_into(marks, model, optimizer)
    return marks


def _marks_into(marks: list[Any], model: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    for p in model.parameters():
        g = p.grad
        marks.append((weakref.ref(p), _version(p), p.requires_grad,
                      None if g is None else weakref.ref(g), None if g is None else (_version(g), _address(g))))
    if optimizer is not None:
        for group in optimizer.param_groups:
            marks.append(([id(p) for p in group["params"]],
                          {k: v.detach().clone() if isinstance(v, torch.Tensor) else v
                           for k, v in group.items() if k != "params"}))


def _version(t: torch.Tensor) -> tuple[int, int]:
    """The version counter of ``t`` and of its local shard: an in-place op on a DTensor (``clip_grad_norm_``'s
    ``_foreach_mul_`` on sharded gradients) moves the shard's counter, not the wrapper's."""
    to_local = getattr(t, "to_local", None)
    return (t._version, to_local()._version if callable(to_local) else t._version)


def _held(values: Mapping[str, torch.Tensor | None] | None, name: str, p: torch.Tensor) -> torch.Tensor:
    """The caller's copy of ``p``'s values when it has one of the same shape and dtype, else a new copy."""
    held = values.get(name) if values is not None else None
    if held is not None and held.shape == p.shape and held.dtype == p.dtype and held.device == p.device:
        return held
    return p.detach().clone()


def _address(t: torch.Tensor) -> int | None:
    try:
        return int(t.data_ptr())
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, wrapper subclasses
        return None


def _same_marks(now: list[Any], then: list[Any]) -> bool:
    if len(now) != len(then) or now[0] != then[0]:
        return False
    for a, b in zip(now[1:], then[1:], strict=True):
        if isinstance(a[0], weakref.ref):
            if a[0]() is not b[0]() or a[1:3] != b[1:3] or a[4] != b[4] or (a[3] is None) != (b[3] is None) \
                    or (a[3] is not None and a[3]() is not b[3]()):
                return False
        elif a[0] != b[0] or not _same_hyper(a[1], b[1]):
            return False
    return True


def _same_hyper(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, torch.Tensor) or isinstance(w, torch.Tensor):  # a tensor lr: compare its value
            if not (isinstance(v, torch.Tensor) and isinstance(w, torch.Tensor) and torch.equal(v, w)):
                return False
        elif v is not w:
            try:
                if bool(v != w):
                    return False
            except Exception:  # values that do not compare: count them as changed
                return False
    return True


def _grad_marks(named: dict[str, nn.Parameter]) -> dict[str, tuple[weakref.ref[torch.Tensor], int]]:
    return {n: (weakref.ref(p.grad), p.grad._version) for n, p in named.items() if p.grad is not None}


@contextmanager
def _watch_backward(on_backward: Callable[[Any, Callable[[], None]], None]) -> Iterator[None]:
    def backward(original: Callable[..., Any], tensors: Any, *args: Any, **kwargs: Any) -> Any:
        result: list[Any] = []
        on_backward(tensors, lambda: result.append(original(tensors, *args, **kwargs)))
        return result[0] if result else None

    with for_this_thread(torch.autograd, "backward", backward):  # this thread's backwards only
        yield


def observe_step(step: Callable[[], Any], model: nn.Module, optimizer: torch.optim.Optimizer | None, index: int,
                 previous: StepRecord | None, seen: Sightings | None = None,
                 values: Mapping[str, torch.Tensor | None] | None = None) -> StepRecord:
    """Run ``step()`` once, watching every backward it makes; exceptions are kept in ``.error``. ``values``:
    copies of the parameters' values as they are now, by name, if the caller holds some (see ``observing``)."""
    with observing(model, optimizer, index, previous, seen, values) as rec:
        try:
            step()
        except Exception as err:  # the doctor reports it; the state is restored by the caller
            rec.error = err
    return rec


def _intact(named: dict[str, nn.Parameter], previous: StepRecord | None, decided: set[str]) -> dict[str, int]:
    """Parameters whose .grad is still the tensor, at the version, the previous step's last backward left."""
    marks = previous.grads_after if previous is not None else {}
    out = {}
    for n, (ref, version) in marks.items():
        g = named[n].grad if n in named and n not in decided else None
        if g is not None and ref() is g and g._version == version:
            out[n] = version
    return out


def _count_backward(rec: StepRecord, model: nn.Module, root: Any, extra: dict[str, torch.Tensor]) -> None:
    """One more backward in this step; at the first, the model's modes, the loss and its traced graph."""
    rec.backwards += 1
    if rec.backwards != 1:
        return
    rec.training_at_backward = model.training
    rec.eval_at_backward = [path for path, m in model.named_modules() if not m.training and mode_matters(m)]
    if isinstance(root, torch.Tensor) and root.grad_fn is not None:
        rec.loss = float(root.detach().float().sum()) if root.numel() else None
        rec.graph = trace(root, model=model, capture=rec.cap, names=extra or None)


@contextmanager
def observing(model: nn.Module, optimizer: torch.optim.Optimizer | None, index: int, previous: StepRecord | None,
              seen: Sightings | None = None,
              values: Mapping[str, torch.Tensor | None] | None = None) -> Iterator[StepRecord]:
    """Watch whatever runs inside the block as one step (``observe_step`` runs a step function in it; the
    ``gradviz`` command opens it after one optimizer step of a script and closes it after the next).
    ``values``: copies of the parameters' values as they are at entry, by name (the doctor's snapshot, taken
    just before the first step), used instead of copying the model again; never written."""
    seen = seen if seen is not None else Sightings()
    if optimizer is not None:
        seen.known.setdefault(id(optimizer), optimizer)
    named = dict(model.named_parameters())
    rec = StepRecord(index)
    before = {n: _held(values, n, p) for n, p in named.items()}
    versions = {n: p._version for n, p in named.items()}
    start = {id(p): (p, before[n], versions[n]) for n, p in named.items()}  # shared with the optimizer steps
    watch = StepWatch(model, seen.extra, seen.labels, seen.known, seen.on_sight, start)
    rec.events = watch.ev

    last: list[Any] = []  # the marks the step's current flow was computed at (see _flow_marks)

    def flow() -> GradientFlow:
        marks = [watch.escapes, *_flow_marks(model, optimizer)]
        if rec.flow is None or not _same_marks(marks, last):  # the gradients changed since: read them again
            rec.flow = gradient_flow(model, graph=rec.graph, capture=rec.cap, optimizer=optimizer)
            marks[0] = watch.escapes  # the flow's own reads are not the step's
            last[:] = marks
        return rec.flow

    decided: set[str] = set()  # parameters a backward of this step has fed (their staleness is known)

    def on_backward(tensors: Any, run: Callable[[], None]) -> None:
        assert rec.cap is not None
        root = tensors if isinstance(tensors, torch.Tensor) else next(iter(tensors), None)
        with rec.cap.paused():
            _count_backward(rec, model, root, seen.extra)
            intact = _intact(named, previous, decided)
            done = watch.before_backward(root)
        try:
            run()
        finally:
            with rec.cap.paused():
                fed = done(rec.graph if rec.backwards == 1 else None).contrib
                for n in set(fed) - decided:
                    decided.add(n)
                    if n in intact:
                        rec.stale[n] = intact[n]
        with rec.cap.paused():
            rec.grads_after = _grad_marks(dict(model.named_parameters()))
            flow()

    def before_optimizer_step(opt: Any, *_: Any) -> None:
        # The gradients as the optimizer will use them: accumulated, unscaled by a GradScaler, clipped; not
        # when this step found them cleared (a zero_grad before step), where backward's are the evidence.
        last = watch.ev.optimizer_steps[-1] if watch.ev.optimizer_steps else None
        if rec.backwards and rec.cap is not None and opt is optimizer and not (last and last.zeroed):
            with rec.cap.paused():
                flow()

    rec.training_at_forward = model.training
    with capture(model) as cap:
        rec.cap = cap
        with watch.installed(), _watch_backward(on_backward):
            hook = optimizer_globals.register_optimizer_step_pre_hook(in_this_thread(before_optimizer_step))
            try:
                yield rec
            finally:
                hook.remove()
        watch.finish()
    if reshard_fsdp(model):  # a step without backward under FSDP2 ends unsharded: compare shards with shards
        named = dict(model.named_parameters())
    rec.moved = {n for n, p in named.items() if n in before and p.shape == before[n].shape
                 and not torch.equal(p.detach(), before[n])}
    rec.written = {n for n, p in named.items() if n in versions and p._version != versions[n]}

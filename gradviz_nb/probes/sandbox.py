"""The one sandbox every probe runs the user's code in: whatever the code changes is put back, in place.

``verify`` / :class:`~gradviz_nb.probes.rerun.Rerunnable` (and so ``GraphWidget.from_fn``), ``gv.doctor``,
``gv.gradcheck`` and ``gv.find_nonfinite`` run the user's forward, backward or whole training step. Each does
it inside :func:`sandbox`, which snapshots on entry and restores on exit, whether the code returned, raised,
or was interrupted (``KeyboardInterrupt``)::

    with sandbox(model, optimizer=opt, schedulers=[sched], tensors=[x]) as box:
        step()                      # the user's code: anything it changes below comes back
        box.track(handle)           # a hook added on something the snapshot does not cover

What comes back, *in place* (the user's objects stay the same objects, so references held by the user, an
optimizer's param groups, DDP buckets, tied weights keep working):

- values of every parameter and buffer (BatchNorm statistics, ``num_batches_tracked``) and of ``tensors``;
  a parameter or buffer replaced on its module (``module.weight = nn.Parameter(...)``), or whose ``.data``
  was swapped, gets its original object and storage back;
- ``.grad``: the same tensor object with its old values (``None`` where it was ``None``; an original
  gradient the code replaced or set to ``None`` is put back and refilled);
- ``requires_grad``, the training mode of every module;
- every hook added meanwhile, by the probe or by the code it ran: the forward / pre-forward / backward /
  state-dict hooks of every module, tensor hooks (``register_hook``, ``register_post_accumulate_grad_hook``)
  of the tensors covered, the optimizer's own hooks; hooks the code removed are put back (dicts are restored,
  not replaced);
- torch's *process-wide* hook dicts (the global module hooks of ``torch.nn.modules.module``, the global
  optimizer hooks) are shared by every thread, so they are never written back from a copy: this thread's own
  additions and removals are journaled and undone one by one (:class:`~gradviz_nb.probes.owned.Journal`); a
  hook another thread adds or removes meanwhile stays as that thread left it;
- the optimizer's state (momenta, step counts: the same tensors refilled; entries the code created are
  dropped) and its param groups' hyper-parameters (``lr``, ...); LR schedulers' state;
- the RNG states of torch (CPU, and CUDA when initialised), Python's ``random`` and NumPy;
- torch modes of this thread (torch keeps them per thread): grad mode, the ``TorchFunctionMode`` and
  ``TorchDispatchMode`` stacks (modes left pushed are popped), the saved-tensor hooks stack; and two
  process-wide ones, anomaly detection and the default dtype, written back only when they differ from the
  entry (so a thread that changed nothing changes nothing back); the ``torch.autograd.backward`` /
  ``torch.autograd.grad`` / ``torch.Tensor.backward`` functions if the code replaced them.

Threads. A probe never patches a function or class for the whole process. To change how torch behaves while
the user's code runs (see every backward, skip a ``no_grad``, run a checkpoint directly), a probe either
pushes a mode (``TorchFunctionMode`` / ``TorchDispatchMode`` stacks are per thread), or uses
:func:`~gradviz_nb.probes.owned.for_this_thread`::

    def replacement(original, *args, **kwargs):   # this thread's calls only; original: the next in line
        return original(*args, **kwargs)

    with for_this_thread(torch.autograd, "backward", replacement):
        step()

One dispatcher sits on the attribute while any thread uses it, calls from other threads go straight to the
original, and the last user puts the original object back (a class ``__dict__`` ends as it began). A hook in
a process-wide dict is made thread-bound with :func:`~gradviz_nb.probes.owned.in_this_thread`, and a capture
records only the module calls of the thread that started it (sequence numbers are per thread).

Comparisons come before copies: a tensor whose values did not change is not written, so its version
counter does not move and a graph the user still holds stays usable. A tensor whose version counter moved
(an in-place torch op wrote it) is written back without a comparison, which would cost as much as the copy;
the others are compared, since writes through ``.data``, a numpy view or a raw storage move no counter
(nor does BatchNorm's kernel when it updates its running statistics).

What cannot be restored: what the code printed or logged, files it wrote, data it sent (network,
collectives, a logger), data loader iterators it advanced, Python objects other than the ones above
(attributes the code set on the model, globals, caches, a ``GradScaler``'s scale), tensors the sandbox was
not told about (pass them in ``tensors=``), modules and optimizers it was not given (a model the code
closes over but the probe was not passed), version counters of tensors that were written, CUDA
memory-allocator state, and inference mode. The RNG states are one per process: a sandbox puts them back
as they were at its entry, so another thread drawing random numbers meanwhile has its draws replayed.
Holding the snapshot costs one copy of the parameters,
buffers, gradients and optimizer state (a lazy one, ``sandbox(..., lazy=True)``: of those written only).
After the ``with`` block the sandbox drops every reference it held
(the model can be garbage-collected even if the sandbox object is kept).
"""

from __future__ import annotations

import copy
import random
import sys
from collections import OrderedDict
from collections.abc import Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.owned import Journal, is_dispatcher
from gradviz_nb.probes.sharded import reshard_fsdp

__all__ = ["MODULE_HOOKS", "Snapshot", "sandbox"]

Optimizers = torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None

# Hook dicts of every nn.Module (OrderedDicts keyed by handle id), of the module module and of optimizers.
MODULE_HOOKS = (
    "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
)
OPTIMIZER_HOOKS = (
    "_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
    "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks", "_optimizer_load_state_dict_post_hooks",
)
TENSOR_HOOKS = ("_backward_hooks", "_post_accumulate_grad_hooks")


_ENTRY_POINTS = ((torch.autograd, "backward"), (torch.autograd, "grad"), (torch.Tensor, "backward"))

_DICTS = (dict, OrderedDict)  # what torch keeps hooks in: checked by type first (an ABC isinstance is slow)


def _hook_dicts(owner: object, names: Iterable[str]) -> list[tuple[MutableMapping[Any, Any], dict[Any, Any]]]:
    """(the live dict, a shallow copy of it) for each hook dict ``owner`` has. About 13 per module: on a
    150-module model these and :func:`_restore_dict` were a third of a sandbox's cost, most dicts empty."""
    out: list[tuple[MutableMapping[Any, Any], dict[Any, Any]]] = []
    for name in names:
        d = getattr(owner, name, None)
        if type(d) in _DICTS or isinstance(d, MutableMapping):
            out.append((cast(MutableMapping[Any, Any], d), dict(d) if d else {}))  # a MutableMapping by the test
    return out


def _tensor_hooks(t: torch.Tensor) -> list[tuple[str, dict[Any, Any] | None]]:
    """A tensor's hook dicts by attribute; ``None`` where torch has not made the dict yet."""
    out = []
    for name in TENSOR_HOOKS:
        d = getattr(t, name, None)
        out.append((name, dict(d) if isinstance(d, MutableMapping) else None))
    return out


def _ptr(t: torch.Tensor) -> int | None:
    try:
        return int(t.data_ptr())
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, wrapper subclasses
        return None


def _restore_dict(live: MutableMapping[Any, Any], saved: dict[Any, Any]) -> None:
    if not live and not saved:  # the usual hook dict: empty before and after
        return
    if live.keys() != saved.keys() or any(live[k] is not v for k, v in saved.items()):
        live.clear()
        live.update(saved)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values (NaN equal to NaN), so an unchanged tensor is never written."""
    if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
        return False
    if a.device.type == "meta":
        return True  # no values to compare or restore
    if a.is_sparse:
        a, b = a.to_dense(), b.to_dense()
    if torch.equal(a, b):
        return True
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num()))
    return False


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _same(a, b)
    try:
        return a is b or bool(a == b)
    except Exception:  # values that do not compare: write them back
        return False


def _copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


@dataclass
class _TensorState:
    name: str
    tensor: torch.Tensor
    alias: torch.Tensor  # shares the original storage: a `.data` swap is undone with it
    value: torch.Tensor | None  # None: nothing to compare (meta), or lazy and not written yet
    requires_grad: bool
    grad: torch.Tensor | None  # the very object
    grad_value: torch.Tensor | None
    hooks: list[tuple[str, dict[Any, Any] | None]]
    lazy: bool = False  # values copied by Snapshot.before_write only (see Snapshot's ``lazy``)
    version: int = -1  # the tensor's and its .grad's version counters as saved (see _written)
    grad_version: int = -1


def _lazy_ok(t: torch.Tensor | None) -> bool:
    """A tensor whose writes a dispatch mode sees and whose storage identifies it: copied on write."""
    return t is not None and type(t) in (torch.Tensor, nn.Parameter) and t.layout == torch.strided \
        and t.device.type != "meta"


def _tensor_state(name: str, t: torch.Tensor, lazy: bool = False) -> _TensorState:
    grad = t.grad if t.is_leaf else None
    meta = t.device.type == "meta"
    if lazy and _lazy_ok(t) and (grad is None or _lazy_ok(grad)):
        return _TensorState(name, t, t.detach(), None, t.requires_grad, grad, None, _tensor_hooks(t), lazy=True)
    return _TensorState(name, t, t.detach(), None if meta else _copy(t), t.requires_grad, grad,
                        None if grad is None or meta else _copy(grad), _tensor_hooks(t),
                        version=_version(t), grad_version=_version(grad))


def _version(t: torch.Tensor | None) -> int:
    try:
        return -1 if t is None else int(t._version)
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):  # a tensor without a version counter
        return -1


def _written(t: torch.Tensor, saved: torch.Tensor, version: int) -> bool:
    """Whether ``t`` must be written back with ``saved``: at once when its version counter moved (an in-place
    torch op wrote it: comparing would cost as much as the copy), else only when its values differ (a write
    no counter sees: ``.data``, ``.numpy()``), so an unchanged tensor is never written."""
    if version >= 0 and _version(t) != version and t.shape == saved.shape and t.dtype == saved.dtype \
            and t.layout == saved.layout == torch.strided:
        return True
    return not _same(t, saved)


def _storage_ptr(t: torch.Tensor) -> int | None:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _sums(tensors: list[torch.Tensor]) -> list[float]:
    """One float per tensor, its sum: a fingerprint of values written outside torch (``.numpy()`` views).
    Summed again on restore at the same thread count, the same values give the same bits."""
    if not tensors:
        return []
    with torch.no_grad():
        sums = [t.sum() for t in tensors]
        # Widened per group of one dtype and device, not per tensor: a conversion per 0-d tensor cost as much
        # as the sums. Each sum converts exactly, so entry and exit still give the same bits.
        groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
        for i, total in enumerate(sums):
            groups.setdefault((total.dtype, total.device), []).append(i)
        out: list[Any] = [0.0] * len(sums)
        for (dtype, _), members in groups.items():
            wide = torch.complex128 if dtype.is_complex else torch.float64
            values = torch.stack([sums[i] for i in members]).to(wide).cpu().tolist()
            for i, value in zip(members, values, strict=True):
                out[i] = value
        return out


def _same_number(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)  # NaN equals NaN here


class _CopyOnWrite:
    """Values of lazy tensor states, copied just before their first write (:meth:`Snapshot.before_write`).

    Holding a full copy of a 124M-parameter model costs more than a forward and backward of it, and a
    probe that only runs forward and backward writes no parameter. The rest is verified on restore: the
    version counter (every in-place torch op bumps it) and the sum (writes outside torch)."""

    def __init__(self, states: list[_TensorState]) -> None:
        self.by_storage: dict[int, list[tuple[_TensorState, bool]]] = {}
        self.watched: list[tuple[_TensorState, bool, torch.Tensor, int]] = []  # (state, is .grad, tensor, version)
        for s in states:
            for is_grad, t in ((False, s.alias), (True, s.grad)):
                if s.lazy and t is not None:
                    key = _storage_ptr(t)
                    if key is not None:
                        self.by_storage.setdefault(key, []).append((s, is_grad))
                    self.watched.append((s, is_grad, t, t._version))
        self.threads = torch.get_num_threads()
        self.sums = _sums([t for _, _, t, _ in self.watched])

    def before_write(self, t: torch.Tensor) -> None:
        key = _storage_ptr(t)
        for s, is_grad in self.by_storage.get(key, ()) if key is not None else ():
            if is_grad and s.grad_value is None and s.grad is not None:
                s.grad_value = _copy(s.grad)
            elif not is_grad and s.value is None:
                s.value = _copy(s.alias)

    def changed_uncopied(self) -> list[str]:
        """Lazy tensors written without a copy first (a write no dispatch mode saw): cannot be put back."""
        rest = [(i, s, g, t, v) for i, (s, g, t, v) in enumerate(self.watched)
                if (s.grad_value if g else s.value) is None]
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)  # the same reduction order as on entry
        try:
            now = _sums([t for _, _, _, t, _ in rest])
        finally:
            torch.set_num_threads(threads)
        return [s.name + (".grad" if g else "") for (i, s, g, t, v), total in zip(rest, now, strict=True)
                if t._version != v or not _same_number(total, self.sums[i])]


class Snapshot:
    """Everything the user's code may change, taken now; :meth:`restore` puts it back (as often as asked).

    ``model`` may be ``None`` (only global state then: RNGs, modes, hooks, ``tensors``). Names
    (``params``, ``buffers``, ``grads``, ``requires_grad``, ``modes``, ``optimizer_state``, ``rng_*``) are
    kept for comparisons (:func:`gradviz_nb.doctor.state.describe_differences`).
    """

    def __init__(self, model: nn.Module | None = None, optimizer: Optimizers = None, schedulers: Iterable[Any] = (),
                 tensors: Iterable[torch.Tensor] = (), lazy: bool = False) -> None:
        self.model = model
        if model is not None:
            reshard_fsdp(model)  # FSDP2: the sharded parameters, which every step ends with
        self.optimizers: list[torch.optim.Optimizer] = (
            [] if optimizer is None else [optimizer] if isinstance(optimizer, torch.optim.Optimizer) else [*optimizer])
        self.optimizer = self.optimizers[0] if self.optimizers else None
        self.schedulers = list(schedulers)
        self._handles: list[Any] = []
        modules = list({id(m): m for m in model.modules()}.values()) if model is not None else []
        # which object each module slot holds, to put a replaced parameter or buffer back
        self._slots = [(m, kind, dict(getattr(m, kind))) for m in modules for kind in ("_parameters", "_buffers")]
        named: dict[int, tuple[str, torch.Tensor]] = {}
        if model is not None:
            for n, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
                named.setdefault(id(t), (n, t))
        for i, t in enumerate(tensors):
            if isinstance(t, torch.Tensor):
                named.setdefault(id(t), (f"tensors[{i}]", t))
        self._tensors = [_tensor_state(n, t, lazy) for n, t in named.values()]
        self._cow = _CopyOnWrite(self._tensors) if lazy else None
        self._modes = [(m, m.training) for m in modules]
        self._module_hooks = [pair for m in modules for pair in _hook_dicts(m, MODULE_HOOKS)]
        # torch's global hook dicts are shared by every thread: this thread's changes are journaled and undone,
        # never a copy written back (probes/owned.py)
        self._journal: Journal | None = Journal().open()
        self._global_hooks = [pair for o in self.optimizers for pair in _hook_dicts(o, OPTIMIZER_HOOKS)]
        self._opt_groups = [(o, list(o.param_groups),
                             [copy.deepcopy({k: v for k, v in g.items() if k != "params"}) for g in o.param_groups],
                             [list(g["params"]) for g in o.param_groups]) for o in self.optimizers]
        self._opt_state = [(o, {p: (s, {k: _copy(v) if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                                        for k, v in s.items()},
                                    {k: _version(v) for k, v in s.items() if isinstance(v, torch.Tensor)})
                                for p, s in o.state.items()})
                           for o in self.optimizers]
        self._sched_state = [(s, copy.deepcopy(s.state_dict())) for s in self.schedulers]
        self.rng_torch = torch.get_rng_state()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        self.rng_cuda = torch.cuda.get_rng_state_all() if cuda else None
        self.rng_python = random.getstate()
        numpy = sys.modules.get("numpy")
        self.rng_numpy = numpy.random.get_state() if numpy is not None else None
        self._grad_enabled = torch.is_grad_enabled()
        self._anomaly = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
        self._dtype = torch.get_default_dtype()
        self._function_modes = torch._C._len_torch_function_stack()
        self._dispatch_modes = torch._C._len_torch_dispatch_stack()
        self._saved_hooks: tuple[Any, ...] | None = torch._C._autograd._top_saved_tensors_default_hooks(True)
        self._backward = tuple(getattr(owner, name) for owner, name in _ENTRY_POINTS)

    # -- names for comparisons ---------------------------------------------------------------------------
    def _named(self, kind: str) -> list[_TensorState]:
        if self.model is None:
            return []
        wanted = {id(t) for t in (self.model.parameters() if kind == "param" else self.model.buffers())}
        return [s for s in self._tensors if id(s.tensor) in wanted]

    @property
    def params(self) -> dict[str, torch.Tensor | None]:
        """The parameters' values as saved, by name (None: not saved)."""
        return {s.name: s.value for s in self._named("param")}

    @property
    def buffers(self) -> dict[str, torch.Tensor | None]:
        """The buffers' values as saved, by name (None: not saved)."""
        return {s.name: s.value for s in self._named("buffer")}

    @property
    def grads(self) -> dict[str, torch.Tensor | None]:
        """The parameters' ``.grad`` as saved, by name."""
        return {s.name: s.grad_value for s in self._named("param")}

    @property
    def grad_ids(self) -> dict[str, int | None]:
        """``id()`` of each parameter's ``.grad`` object as saved (the same objects are put back)."""
        return {s.name: None if s.grad is None else id(s.grad) for s in self._named("param")}

    @property
    def requires_grad(self) -> dict[str, bool]:
        """Each parameter's ``requires_grad`` as saved, by name."""
        return {s.name: s.requires_grad for s in self._named("param")}

    @property
    def modes(self) -> dict[str, bool]:
        """Each module's ``training`` flag as saved, by module path (``{}`` without a model)."""
        if self.model is None:
            return {}
        training = {id(m): t for m, t in self._modes}
        return {n: training[id(m)] for n, m in self.model.named_modules(remove_duplicate=False) if id(m) in training}

    @property
    def optimizer_state(self) -> dict[str, Any] | None:
        """The optimizer's state as saved (None without an optimizer)."""
        if self.optimizer is None:
            return None
        _, saved = self._opt_state[0]
        index = {id(p): i for i, p in enumerate(p for g in self._opt_groups[0][3] for p in g)}
        return {"state": {index.get(id(p), -1): values for p, (_, values, _) in saved.items()},
                "param_groups": self._opt_groups[0][2]}

    def untouched(self) -> bool:
        """Whether every tensor still has the version counter and storage it had when saved, so the saved copies
        are its values now, provided no code ran since that could write past a counter (``.data``, numpy): the
        caller's to know. Lets the doctor's first step use the snapshot's copies instead of copying again."""
        return all(not s.lazy and s.version >= 0 and _version(s.tensor) == s.version and _ptr(s.tensor) == _ptr(s.alias)
                   for s in self._tensors)

    # -- restoring ------------------------------------------------------------------------------------------
    def before_write(self, t: torch.Tensor) -> None:
        """``t`` (or a view of it) is about to be written in place: a lazy snapshot copies what it holds on
        that storage now (a no-op otherwise). The caller's dispatch mode calls it before every write."""
        if self._cow is not None:
            self._cow.before_write(t)

    def track(self, *handles: Any) -> None:
        """Hooks (anything with ``remove()``) to remove on restore, for objects the snapshot does not cover."""
        self._handles.extend(handles)

    def restore(self) -> None:
        """Put everything back (see the module docstring). Each part is restored even when another fails;
        the first failure is raised afterwards."""
        errors: list[BaseException] = []
        for part in (self._restore_modes, self._restore_hooks, self._restore_slots, self._restore_tensors,
                     self._check_lazy, self._restore_training, self._restore_optimizers, self._restore_rng):
            try:
                part()
            except Exception as err:  # keep restoring the rest
                errors.append(err)
        if errors:
            raise errors[0]

    def _restore_modes(self) -> None:
        while torch._C._len_torch_function_stack() > self._function_modes:
            torch._C._pop_torch_function_stack()
        from torch.utils._python_dispatch import _pop_mode

        while torch._C._len_torch_dispatch_stack() > self._dispatch_modes:
            _pop_mode()
        for _ in range(1000):  # saved-tensor hooks pushed and never popped (no depth API: compare the top)
            top = torch._C._autograd._top_saved_tensors_default_hooks(True)
            if top is None or (self._saved_hooks is not None and all(
                    a is b for a, b in zip(top, self._saved_hooks, strict=True))):
                break
            torch._C._autograd._pop_saved_tensors_default_hooks()
        torch.set_grad_enabled(self._grad_enabled)  # per thread
        # Anomaly mode and the default dtype are per process: written only if they differ, so a value another
        # thread set meanwhile is kept when this thread changed nothing.
        if (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()) != self._anomaly:
            torch.set_anomaly_enabled(*self._anomaly)
        if torch.get_default_dtype() != self._dtype:
            torch.set_default_dtype(self._dtype)
        for (owner, name), saved in zip(_ENTRY_POINTS, self._backward, strict=True):
            now = getattr(owner, name)
            # a probe's per-thread dispatcher (probes/owned.py) is removed by its last user, not from a copy
            if now is not saved and not is_dispatcher(now) and not is_dispatcher(saved):
                setattr(owner, name, saved)

    def _restore_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._journal is not None:
            self._journal.undo()
        for live, saved in [*self._module_hooks, *self._global_hooks]:
            _restore_dict(live, saved)
        for s in self._tensors:
            for name, hooks in s.hooks:
                now = getattr(s.tensor, name, None)
                if isinstance(now, MutableMapping):
                    _restore_dict(now, hooks or {})

    def _restore_slots(self) -> None:
        if self.model is not None:
            reshard_fsdp(self.model)
        for m, kind, saved in self._slots:
            _restore_dict(getattr(m, kind), saved)

    def _restore_tensors(self) -> None:
        with torch.no_grad():
            for s in self._tensors:
                t = s.tensor
                if (s.value is not None or s.lazy) and (_ptr(t) != _ptr(s.alias) or t.shape != s.alias.shape
                                                        or t.dtype != s.alias.dtype):
                    t.data = s.alias  # the `.data` was swapped: the original storage back
                if s.value is not None and _written(t, s.value, s.version):
                    t.copy_(s.value)
                if t.requires_grad != s.requires_grad and t.is_leaf:
                    t.requires_grad_(s.requires_grad)
                if not t.is_leaf:
                    continue
                if s.grad is None:
                    if t.grad is not None:
                        t.grad = None
                    continue
                if t.grad is not s.grad:
                    t.grad = s.grad  # the user's object, not a copy
                if s.grad_value is not None and _written(s.grad, s.grad_value, s.grad_version):
                    s.grad.copy_(s.grad_value)

    def _check_lazy(self) -> None:
        lost = self._cow.changed_uncopied() if self._cow is not None else []
        if lost:
            raise GradvizError(
                f"sandbox: {', '.join(lost[:5])} changed without an in-place torch op the probe could see (a write "
                "through .numpy(), a raw storage or with torch dispatch disabled), so its values were not copied "
                "first and cannot be put back.")

    def _restore_training(self) -> None:
        for m, training in self._modes:
            m.training = training

    def _restore_optimizers(self) -> None:
        for o, groups, hyper, params in self._opt_groups:
            o.param_groups[:] = groups
            for g, h, p in zip(groups, hyper, params, strict=True):
                g["params"][:] = p
                for k in [k for k in g if k != "params" and k not in h]:
                    del g[k]
                for k, v in h.items():
                    if k not in g or not _same_value(g[k], v):
                        g[k] = copy.deepcopy(v)
        for o, kept in self._opt_state:
            for param in [q for q in o.state if q not in kept]:
                del o.state[param]
            for param, (state, values, versions) in kept.items():
                o.state[param] = state
                for k in [k for k in state if k not in values]:
                    del state[k]
                for k, v in values.items():
                    old = state.get(k)
                    if isinstance(v, torch.Tensor) and isinstance(old, torch.Tensor) and old.shape == v.shape \
                            and old.dtype == v.dtype:
                        if _written(old, v, versions.get(k, -1)):
                            with torch.no_grad():
                                old.copy_(v)
                    else:
                        state[k] = v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
        for sched, sd in self._sched_state:
            sched.load_state_dict(copy.deepcopy(sd))

    def _restore_rng(self) -> None:
        torch.set_rng_state(self.rng_torch)
        if self.rng_cuda is not None:
            torch.cuda.set_rng_state_all(self.rng_cuda)
        random.setstate(self.rng_python)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.rng_numpy is not None:
            numpy.random.set_state(self.rng_numpy)

    def release(self) -> None:
        """Drop every reference the snapshot holds (it cannot restore afterwards)."""
        self.model = None
        self.optimizer = None
        self.optimizers, self.schedulers, self._handles = [], [], []
        self._slots, self._tensors, self._modes, self._module_hooks, self._global_hooks = [], [], [], [], []
        self._opt_groups, self._opt_state, self._sched_state = [], [], []
        self._cow = None
        self._saved_hooks = None
        if self._journal is not None:
            self._journal.close()
            self._journal = None


@contextmanager
def sandbox(model: nn.Module | None = None, *, optimizer: Optimizers = None, schedulers: Iterable[Any] = (),
            tensors: Iterable[torch.Tensor] = (), lazy: bool = False) -> Iterator[Snapshot]:
    """Run a block of the user's code and put back everything it changed (see the module docstring), on
    success, on any exception and on ``KeyboardInterrupt``; no reference is kept afterwards.

    ``lazy=True`` copies no value on entry: the caller must call ``box.before_write(t)`` before every
    in-place write (a ``TorchDispatchMode`` sees them all; find_nonfinite's does). Values are then copied
    only when about to be written, and the rest is verified on exit (version counter and sum): a write
    the mode could not see raises instead of passing unnoticed."""
    snap = Snapshot(model, optimizer, schedulers, tensors, lazy=lazy)
    try:
        yield snap
    finally:
        try:
            snap.restore()
        finally:
            snap.release()

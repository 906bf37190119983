"""The watch behind :func:`gv.find_nonfinite`: a ``TorchDispatchMode`` that checks every op's floating
outputs, keeps the provenance of non-finite tensors and where each reached (how and why:
:mod:`gradviz_nb.probes.nonfinite.find`)."""

from __future__ import annotations

import bisect
import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from gradviz_nb.probes.nonfinite.found import NonFinite, Site, _Birth, classify, input_info
from gradviz_nb.probes.owned import for_this_thread, in_this_thread
from gradviz_nb.tracing.lines import op_line

_SKIP = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "set_"}
_VALUE_TYPES = {"Tensor", "Optional[Tensor]", "List[Tensor]", "List[Optional[Tensor]]", "number", "Optional[number]"}
_ACCUMULATE = "torch::autograd::AccumulateGrad"
# Ops that write an argument their schema does not mark as written (Tensor? running_mean, not Tensor(a!)):
# base name -> positions. BatchNorm's running statistics in training.
_UNDECLARED_WRITES = {"native_batch_norm": (3, 4), "cudnn_batch_norm": (3, 4), "miopen_batch_norm": (3, 4)}
_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128}

# Private torch APIs, checked once by find_nonfinite: the autograd sequence counter (a backward node is
# matched to the forward op that made it) and the node the engine is running.
_sequence_nr: Callable[[], int] = getattr(torch.autograd, "_get_sequence_nr", lambda: -1)

_Prov = tuple[frozenset[int], frozenset[int]]  # (births of its NaN, births of its Inf)


def _checkable(t: object) -> TypeGuard[torch.Tensor]:
    """A plain dense floating tensor with elements (subclasses, sparse, meta are not checked)."""
    return ((type(t) is torch.Tensor or type(t) is nn.Parameter) and t.dtype in _DTYPES
            and t.layout == torch.strided and t.numel() > 0 and not t.is_meta)


def _finite(t: torch.Tensor) -> bool:
    """One reduction; a non-finite sum (NaN/Inf inside, or overflow of large finite values) is confirmed."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if math.isfinite(t.sum().item()):
        return True
    return math.isfinite((t * 0).sum().item())


def _tensors(x: Any) -> Iterator[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for item in x:
            if isinstance(item, torch.Tensor):
                yield item


def _returned_tensors(x: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """Tensors in what ``fn`` returned: a tensor, or nested lists, tuples and mappings (HF outputs)."""
    if isinstance(x, torch.Tensor):
        yield x
    elif depth < 4 and isinstance(x, (list, tuple)):
        for item in x:
            yield from _returned_tensors(item, depth + 1)
    elif depth < 4 and isinstance(x, Mapping):
        for item in x.values():
            yield from _returned_tensors(item, depth + 1)


def _storage_key(t: torch.Tensor) -> StorageWeakRef | None:
    try:
        return StorageWeakRef(t.untyped_storage())  # type: ignore[no-untyped-call]
    except (RuntimeError, NotImplementedError, TypeError):
        return None


@dataclass
class _OpInfo:
    name: str
    base: str
    skip: bool
    read: bool  # _local_scalar_dense: a value read into Python
    view: bool
    mutated: tuple[tuple[int, str], ...]  # (position, name) of written arguments
    writes: tuple[tuple[int, str], ...]  # mutated, plus writes the schema does not declare (_UNDECLARED_WRITES)
    values: tuple[tuple[int, str], ...]  # (position, name) of tensor / number arguments


def _op_info(func: Any) -> _OpInfo:
    schema = func._schema
    packet = str(func.overloadpacket)
    base = packet.split(".")[-1]
    base = base[:-1] if base.endswith("_") and not base.endswith("__") else base
    args = list(schema.arguments)
    mutated = tuple((i, a.name) for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write)
    view = not mutated and any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    values = tuple((i, a.name) for i, a in enumerate(args) if str(a.type) in _VALUE_TYPES)
    undeclared = tuple((i, args[i].name) for i in _UNDECLARED_WRITES.get(base, ()) if i < len(args))
    return _OpInfo(packet, base, base in _SKIP, base == "_local_scalar_dense", view, mutated, mutated + undeclared,
                   values)


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], pos: int, name: str) -> Any:
    return args[pos] if pos < len(args) else kwargs.get(name)


# -- the watcher ----------------------------------------------------------------------------------------------


class BareDispatchMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """A dispatch mode without the wrapper torch puts around ``__torch_dispatch__`` (the watch's base, and
    the benchmark's do-nothing mode that measures what watching every op costs)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._dynamo.disable unless this says no: 6 us of the
        # 28 us a do-nothing mode adds per op (a 12-block GPT's step runs 1,239 ops). The wrapper is not
        # needed here: Dynamo skips every frame while a dispatch mode is on the stack (convert_frame).
        return False


class _Watch(BareDispatchMode):
    """Checks every op's floating outputs and keeps the provenance of non-finite tensors."""

    def __init__(self, model: nn.Module | None, before_write: Callable[[torch.Tensor], None] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.model = model
        self.before_write = before_write  # the lazy sandbox copies a parameter or .grad before its first write
        self.prov: Any = WeakIdKeyDictionary()  # tensor -> _Prov, for non-finite tensors only
        # Something non-finite was seen: until then no lookup can find anything (and a weak dictionary's
        # len() is a Python call per op).
        self.tainted = False
        self.storages: dict[StorageWeakRef, _Prov] = {}
        self.births: list[_Birth] = []
        self.reached: dict[int, list[str]] = {}
        self.quiet = False  # our own checks outside __torch_dispatch__ pass straight through
        self._ops: dict[Any, _OpInfo] = {}
        self._frames: dict[Any, bool] = {}
        self._stack: list[tuple[int, str, str]] = []  # (id(module), path, type) of running module calls
        self._paths: dict[int, str] = {}
        self._names: dict[int, str] = {}
        self._by_storage: dict[int, str] | None = None
        if model is not None:
            self._paths = {id(m): p for p, m in model.named_modules()}
            self._names = {id(t): n for n, t in [*model.named_parameters(), *model.named_buffers()]}
        self._seqs: list[int] = []  # autograd sequence counter after each forward op that made a node
        self._where: list[tuple[str, str, str]] = []  # (module, module type, line) of that op
        self._last_seq = -1
        self._handles: list[Any] = []
        self._outer: _Watch | None = None

    # module calls ------------------------------------------------------------------------------------------
    def _pre(self, module: nn.Module, args: Any) -> None:
        path = self._paths.get(id(module))
        if path is None:
            if self.model is not None:
                return  # not part of the model (a loss module, ...): ops inside count as the caller's
            if not self._stack:  # without a model, the outermost module called names its submodules
                self._paths.update({id(m): p for p, m in module.named_modules()})
                path = ""
            else:
                path = type(module).__name__
        self._stack.append((id(module), path, type(module).__name__))

    def _post(self, module: nn.Module, args: Any, out: Any) -> None:
        key = id(module)
        if any(entry[0] == key for entry in self._stack):
            while self._stack and self._stack.pop()[0] != key:
                pass

    def start(self) -> None:
        self._handles = [register_module_forward_pre_hook(in_this_thread(self._pre)),
                         register_module_forward_hook(in_this_thread(self._post), always_call=True)]
        self._outer = getattr(_RUNNING, "watch", None)
        _RUNNING.watch = self

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._stack.clear()
        if getattr(_RUNNING, "watch", None) is self:
            _RUNNING.watch = self._outer

    def adopt(self, model: nn.Module) -> None:
        """Name modules, parameters and buffers by ``model``'s names from now on (a model made while ``fn``
        runs, e.g. by a script); nothing changes when the watch was given a model."""
        if self.model is not None:
            return
        self.model = model
        self._paths = {id(m): p for p, m in model.named_modules()}
        self._names = {id(t): n for n, t in [*model.named_parameters(), *model.named_buffers()]}
        self._by_storage = None


    # provenance ------------------------------------------------------------------------------------------------
    def _lookup(self, t: torch.Tensor) -> _Prov | None:
        p: _Prov | None = self.prov.get(t)
        if p is None and self.storages:
            key = _storage_key(t)
            if key is not None:
                p = self.storages.get(key)
        return p

    def _known(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Some input tensor is (or shares storage with) a tensor known to be non-finite."""
        for x in (*args, *kwargs.values()):
            for t in _tensors(x):
                if self._lookup(t) is not None:
                    return True
        return False

    def _set(self, t: torch.Tensor, p: _Prov) -> None:
        self.prov[t] = p
        self.tainted = True
        key = _storage_key(t)
        if key is not None:
            old = self.storages.get(key)
            self.storages[key] = p if old is None else (old[0] | p[0], old[1] | p[1])

    def _new(self, birth: _Birth) -> int:
        self.births.append(birth)
        return len(self.births) - 1

    def _reach(self, p: _Prov | None, where: str) -> None:
        if p is None:
            return
        for b in p[0] | p[1]:
            seen = self.reached.setdefault(b, [])
            if where not in seen and len(seen) < 5:
                seen.append(where)

    def _name(self, t: torch.Tensor) -> str:
        """The model's name for ``t`` (or for the parameter/buffer it is a view of, like ``weight.t()``)."""
        name = self._names.get(id(t))
        if name is None and self.model is not None:
            if self._by_storage is None:
                self._by_storage = {}
                for n, x in [*self.model.named_parameters(), *self.model.named_buffers()]:
                    with contextlib.suppress(RuntimeError, NotImplementedError):
                        self._by_storage.setdefault(x.untyped_storage().data_ptr(), n)
            with contextlib.suppress(RuntimeError, NotImplementedError):
                ptr = t.untyped_storage().data_ptr()
                name = self._by_storage.get(ptr) if ptr else None
            if name is not None:
                return f"{name} (a view of it)"
        return name if name is not None else f"a tensor of shape {list(t.shape)}"

    def _site(self, info: _OpInfo, backward: bool) -> Site:
        if not backward:
            _, path, typ = self._stack[-1] if self._stack else (0, "", "")
            return Site("forward", info.name, path, typ, op_line(self._frames))
        node = torch._C._current_autograd_node()
        if node is None:
            return Site("backward", info.name, "", "", op_line(self._frames))
        name = node.name()
        if name == _ACCUMULATE:
            var = getattr(node, "variable", None)
            leaf = self._name(var) if isinstance(var, torch.Tensor) else "a leaf"
            module = leaf.rsplit(".", 1)[0] if var is not None and id(var) in self._names and "." in leaf else ""
            return Site("backward", info.name, module, "", "", f"AccumulateGrad of {leaf}")
        i = bisect.bisect_right(self._seqs, int(node._sequence_nr()))
        path, typ, line = self._where[i] if i < len(self._where) else ("", "", "")
        return Site("backward", info.name, path, typ, line, name)

    def _external(self, t: torch.Tensor, info: _OpInfo, backward: bool) -> _Prov:
        """A tensor already non-finite when first seen: a birth at the op that reads it."""
        nan, inf = bool(t.detach().isnan().any()), bool(t.detach().isinf().any())
        kind = "NaN and Inf" if nan and inf else "NaN" if nan else "Inf"
        what = self._name(t)
        b = self._new(_Birth(self._site(info, backward), kind, "already non-finite",
                             f"{what} already held {kind} when {info.name} read it (made before find_nonfinite "
                             "ran, e.g. the data or a parameter broken by an earlier step)", (input_info(t),)))
        p = (frozenset([b]) if nan else frozenset(), frozenset([b]) if inf else frozenset())
        self._set(t, p)
        return p

    # the mode ----------------------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        info = self._ops.get(func)
        if info is None:
            info = self._ops[func] = _op_info(func)
        if info.writes and self.before_write is not None:
            for pos, name in info.writes:
                for t in _tensors(_arg(args, kwargs, pos, name)):
                    self.before_write(t)
        if self.quiet:
            return func(*args, **kwargs)
        pre: list[_Prov | None] | None = None
        if info.mutated and self.tainted:
            pre = [self._pre_state(t) for pos, name in info.mutated for t in _tensors(_arg(args, kwargs, pos, name))]
        out = func(*args, **kwargs)
        backward = torch._C._current_graph_task_id() != -1
        if not backward:
            seq = _sequence_nr()
            if seq != self._last_seq:  # this op made autograd nodes: remember where, for backward births
                self._last_seq = seq
                self._seqs.append(seq)
                _, path, typ = self._stack[-1] if self._stack else (0, "", "")
                self._where.append((path, typ, op_line(self._frames)))
        if info.skip:
            return out
        if info.read:  # loss.item(), float(loss): a value reaching the user
            x = args[0] if args else None
            if _checkable(x) and not _finite(x):
                self._reach(self._lookup(x) or self._external(x, info, backward), "read into Python (.item())")
            return out
        if info.view and not (self.tainted and self._known(args, kwargs)):
            return out
        if not info.mutated and type(out) is torch.Tensor:  # most ops: one new tensor, nothing written
            if _checkable(out):
                if not _finite(out):
                    self._nonfinite(info, args, kwargs, [out], [], pre, backward)
                elif self.tainted and out in self.prov:
                    del self.prov[out]
            return out
        written = [t for pos, name in info.mutated for t in _tensors(_arg(args, kwargs, pos, name))]
        bad: list[torch.Tensor] = []
        seen: set[int] = set()
        for t in (*_tensors(out), *written):
            if id(t) in seen or not _checkable(t):
                continue
            seen.add(id(t))
            if not _finite(t):
                bad.append(t)
            elif self.tainted and t in self.prov:  # made finite again in place
                del self.prov[t]
        if bad:
            self._nonfinite(info, args, kwargs, bad, written, pre, backward)
        return out

    def _pre_state(self, t: torch.Tensor) -> _Prov | None:
        p: _Prov | None = self.prov.get(t)
        if p is None and self.storages:
            key = _storage_key(t)
            if key is not None and key in self.storages and _checkable(t) and not _finite(t):
                p = self.storages[key]  # this view's own elements are non-finite: trust the storage's births
        return p

    def _nonfinite(self, info: _OpInfo, args: tuple[Any, ...], kwargs: dict[str, Any], bad: list[torch.Tensor],
                   written: list[torch.Tensor], pre: list[_Prov | None] | None, backward: bool) -> None:
        written_ids = {id(t): i for i, t in enumerate(written)}
        values: list[Any] = []
        nan_in: set[int] = set()
        inf_in: set[int] = set()
        for pos, name in info.values:
            for x in ([*_tensors(v)] if isinstance(v := _arg(args, kwargs, pos, name), (list, tuple, torch.Tensor))
                      else [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else []):
                values.append(x)
                if not isinstance(x, torch.Tensor):
                    continue
                p: _Prov | None = None
                if id(x) in written_ids:
                    p = pre[written_ids[id(x)]] if pre is not None else None
                elif _checkable(x) and not _finite(x):
                    p = self._lookup(x)
                    if p is None or not (p[0] or p[1]):
                        p = self._external(x, info, backward)
                if p is not None:
                    nan_in |= p[0]
                    inf_in |= p[1]
        site: Site | None = None
        birth: int | None = None
        transition: int | None = None
        for t in bad:
            d = t.detach()
            has_nan, has_inf = bool(d.isnan().any()), bool(d.isinf().any())
            if d.is_complex():
                has_inf = has_inf or not has_nan
            nan_set: frozenset[int] = frozenset()
            inf_set: frozenset[int] = frozenset()
            if birth is None and ((has_inf and not inf_in) or (has_nan and not nan_in and not inf_in)):
                site = site or self._site(info, backward)
                kind = "NaN and Inf" if has_nan and has_inf else "NaN" if has_nan else "Inf"
                cause, detail = classify(info.base, values, has_nan, has_inf)
                birth = self._new(_Birth(site, kind, cause, detail, tuple(input_info(v) for v in values)))
            if has_inf:
                inf_set = frozenset(inf_in) if inf_in else frozenset([birth])  # type: ignore[list-item]
            if has_nan:
                if nan_in:
                    nan_set = frozenset(nan_in)
                elif inf_in:
                    if transition is None:
                        site = site or self._site(info, backward)
                        transition = self._new(_Birth(site, "NaN", "other", "NaN made from infinities", (),
                                                      frozenset(inf_in)))
                    nan_set = frozenset([transition])
                else:
                    nan_set = frozenset([birth])  # type: ignore[list-item]
            p = (nan_set, inf_set)
            self._set(t, p)
            # sinks inside the op: a gradient accumulated into a leaf, a parameter written in place
            if backward:
                node = torch._C._current_autograd_node()
                if node is not None and node.name() == _ACCUMULATE:
                    var = getattr(node, "variable", None)
                    self._reach(p, f"gradient of {self._name(var) if isinstance(var, torch.Tensor) else 'a leaf'}")
            if id(t) in written_ids and (isinstance(t, nn.Parameter) or (t.is_leaf and t.requires_grad)):
                self._reach(p, f"parameter {self._name(t)} (written by {info.name})")

    # sinks outside ops --------------------------------------------------------------------------------------------
    def check(self, obj: Any, where: str) -> None:
        self.quiet = True
        try:
            for t in _returned_tensors(obj):
                if _checkable(t) and not _finite(t):
                    p = self._lookup(t)
                    if p is None or not (p[0] or p[1]):
                        p = self._external(t, _OpInfo(where, where, False, False, False, (), (), ()), False)
                    self._reach(p, where)
        finally:
            self.quiet = False

    # the answer ------------------------------------------------------------------------------------------------------
    def result(self) -> NonFinite | None:
        roots: dict[int, tuple[list[str], int | None]] = {}
        for b, wheres in self.reached.items():
            birth = self.births[b]
            for r in sorted(birth.parents) if birth.parents else [b]:
                got, became = roots.setdefault(r, ([], None))
                got.extend(w for w in wheres if w not in got)
                if birth.parents and (became is None or b < became):
                    roots[r] = (got, b)
        if not roots:
            return None
        first = min(roots)
        birth, (wheres, became) = self.births[first], roots[first]
        s = birth.site
        return NonFinite(s.phase, s.op, s.module, s.module_type, s.line, s.node, birth.kind, birth.cause,
                         birth.detail, birth.inputs, tuple(wheres[:5]),
                         self.births[became].site if became is not None else None, len(roots) - 1)


@dataclass
class _Patched:
    """``torch.autograd.backward`` / ``grad`` wrapped so their roots and returned gradients are checked."""

    watch: _Watch
    stack: ExitStack = field(default_factory=ExitStack)

    def __enter__(self) -> _Patched:
        watch = self.watch

        def wrapped_backward(backward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            watch.check(args[0] if args else kwargs.get("tensors"), "loss (a root of backward)")
            given = args[1] if len(args) > 1 else kwargs.get("grad_tensors")
            if given is not None:
                watch.check(given, "the gradient given to backward")
            return backward(*args, **kwargs)

        def wrapped_grad(grad: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            watch.check(args[0] if args else kwargs.get("outputs"), "loss (an output given to autograd.grad)")
            out = grad(*args, **kwargs)
            watch.check(out, "a gradient returned by torch.autograd.grad")
            return out

        # for this thread only: another thread's backward is not this probe's (probes/owned.py)
        self.stack = ExitStack()
        self.stack.enter_context(for_this_thread(torch.autograd, "backward", wrapped_backward))
        self.stack.enter_context(for_this_thread(torch.autograd, "grad", wrapped_grad))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


_RUNNING = threading.local()  # .watch: the _Watch running in this thread (find_nonfinite's), if any


def name_by(model: nn.Module) -> bool:
    """Tell the ``gv.find_nonfinite`` running in this thread (if any, and given no model) to name modules and
    tensors by ``model``'s names: for a model its ``fn`` builds (``gradviz nan`` runs a whole script, whose
    first optimizer reveals the model). True when a running search took the names."""
    watch = getattr(_RUNNING, "watch", None)
    if watch is None or watch.model is not None:
        return False
    watch.adopt(model)
    return True

"""``gv.find_nonfinite``: where the NaN (or Inf) that mattered was born, in forward or in backward.

``torch.autograd.detect_anomaly()`` checks only backward outputs, so it names the first *backward* node
that returned NaN: after the damage, often far from the forward op that made the first bad value. Here
every op is watched while ``fn`` runs, forward and backward alike, by a ``TorchDispatchMode``:

* **Cheap check per op.** Each floating output gets one reduction, ``t.sum()``, read as a Python float:
  a sum is non-finite when the tensor holds a NaN or an Inf, or when large finite values overflow. A
  non-finite sum is confirmed with ``(t * 0).sum()``, which is NaN exactly when some element is NaN or
  Inf and never overflows. Measured on CPU: ``sum`` ~0.08 ms per million float32 elements,
  ``isfinite(t).all()`` ~3 ms, ``(t * 0).sum()`` ~1 ms. Views skip the check unless their base is
  already known to be non-finite; uninitialised allocations (``empty``) are not checked. No activation
  is kept: tensors are tracked by identity in a weak dictionary, and only non-finite ones are entered.
* **Backward too.** On CPU the autograd engine runs backward ops on the calling thread, with the mode
  active; ``torch._C._current_graph_task_id()`` tells backward from forward and
  ``torch._C._current_autograd_node()`` names the node (``SqrtBackward0``). A backward node is traced to
  the forward op that made it by its sequence number (recorded with the module and the source line for
  every forward op that creates a node).
* **Provenance.** An op whose output is non-finite while none of its inputs is is a *birth*. An output
  holding NaN whose inputs hold NaN inherits their births; Inf alike. NaN made from infinities only
  (``inf - inf``, ``0 * inf``, a softmax over a row that is all ``-inf``) is a *transition*: it is
  linked to the births of those infinities, which remain the origin. A tensor that was non-finite
  before any op made it (data, a parameter broken by an earlier step) is an *already non-finite* birth
  at the first op that reads it. Views and in-place writes are followed through their storage too.
* **Only what mattered.** Infinities are often intended (an attention mask filled with ``-inf`` or
  ``finfo.min`` that a softmax turns finite). A birth is reported only when its values *reached* the
  loss or the training state: a root of ``torch.autograd.backward`` (``loss.backward()`` calls it; it is
  wrapped while ``fn`` runs), a gradient accumulated into a leaf's ``.grad`` (backward ops running under
  an ``AccumulateGrad`` node), a gradient returned by ``torch.autograd.grad``, an in-place write to a
  parameter (an optimizer step), a value read into Python (``loss.item()``), or what ``fn`` returns.
  Of the births that reached one of those, the earliest is returned.

Hooks, the mode and the wrappers are removed when ``fn`` returns or raises. ``fn`` runs for real, inside
the probes' sandbox (:mod:`gradviz_nb.probes.sandbox`): afterwards parameters, buffers, ``.grad`` (the same
objects), ``requires_grad``, modes, hooks, RNGs and the ``optimizer`` given are as they were. Limits:
tensor subclasses (DTensor, fake tensors), sparse and nested tensors are not checked; on GPU each check
waits for the device.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeGuard

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.sandbox import sandbox
from gradviz_nb.validate import not_meta

__all__ = ["CAUSES", "InputInfo", "NonFinite", "Site", "find_nonfinite"]

CAUSES = ("0/0", "log(0)", "log of a negative", "exp overflow", "division by zero", "sqrt of a negative",
          "overflow", "constant", "already non-finite", "other")

_GB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the gradviz_nb package
# Library code between an op and the user's line: torch and gradviz_nb's library layers. The bug zoo and
# demo models count as user code (they are where a model's forward is written).
_LIBRARY_DIRS = (os.path.dirname(torch.__file__) + os.sep, "<frozen ",
                 *(os.path.join(_GB, d) + os.sep
                   for d in ("analysis", "probes", "tracing", "doctor", "widgets", "export", "integrations")))
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


# -- results ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputInfo:
    """One input of the op: a tensor (``scalar`` False) or a Python number argument (``shape == ()``).

    ``max_abs`` is the largest absolute value that is not NaN (``inf`` when an Inf is there), ``min`` the
    smallest; ``nan`` / ``inf`` / ``zeros`` count elements."""

    shape: tuple[int, ...]
    dtype: str
    nan: int
    inf: int
    zeros: int
    max_abs: float
    min: float
    scalar: bool = False

    @property
    def nonfinite(self) -> bool:
        return bool(self.nan or self.inf)

    def describe(self) -> str:
        what = "scalar" if self.scalar else f"{list(self.shape)} {self.dtype}"
        state = (f"{self.nan} NaN, {self.inf} Inf" if self.nonfinite else "finite")
        return f"{what}, {state}, max |x| {_num(self.max_abs)}, min {_num(self.min)}, {self.zeros} zeros"


@dataclass(frozen=True)
class Site:
    """Where an op ran: ``phase`` "forward"/"backward", aten ``op``, module path, source line, and in
    backward the autograd ``node`` running it."""

    phase: str
    op: str
    module: str
    module_type: str
    line: str
    node: str = ""

    def describe(self) -> str:
        where = f"in {self.module or '(top level)'}" + (f" ({self.module_type})" if self.module_type else "")
        node = f" [{self.node}]" if self.node else ""
        return f"{self.phase} {self.op}{node} {where} at {self.line or '(unknown line)'}"


@dataclass(frozen=True)
class NonFinite:
    """The first op whose NaN/Inf reached the loss or the training state (see :func:`find_nonfinite`).

    ``kind`` is what the op's output held ("NaN", "Inf" or "NaN and Inf"); ``cause`` one of :data:`CAUSES`
    with ``detail`` in words; ``inputs`` the op's inputs (values as the op read them; for an in-place op the
    written input is shown after the write); ``became_nan`` where infinities from this op turned into the
    NaN that reached (``None`` if they reached as they were); ``reached`` where its values arrived;
    ``others`` how many later births also reached."""

    phase: str
    op: str
    module: str
    module_type: str
    line: str
    node: str
    kind: str
    cause: str
    detail: str
    inputs: tuple[InputInfo, ...]
    reached: tuple[str, ...]
    became_nan: Site | None = None
    others: int = 0

    @property
    def site(self) -> Site:
        return Site(self.phase, self.op, self.module, self.module_type, self.line, self.node)

    def summary(self) -> str:
        lines = [f"{self.kind} born in {self.site.describe()}", f"  cause: {self.cause}: {self.detail}"]
        lines += [f"  input {i}: {x.describe()}" for i, x in enumerate(self.inputs)]
        if self.became_nan is not None:
            lines.append(f"  became NaN in {self.became_nan.describe()}")
        lines.append(f"  reached: {'; '.join(self.reached)}")
        if self.others:
            lines.append(f"  ({self.others} later birth{'s' if self.others > 1 else ''} also reached)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        where = self.module or "(top level)"
        return f"<NonFinite {self.kind} {self.phase} {self.op} in {where} at {self.line or '?'}: {self.cause}>"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["inputs"] = [{**asdict(x), "nonfinite": x.nonfinite} for x in self.inputs]
        return out


# -- helpers ------------------------------------------------------------------------------------------------


def _num(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else str(x)


def _checkable(t: object) -> TypeGuard[torch.Tensor]:
    """A plain dense floating tensor with elements (subclasses, sparse, meta are not checked)."""
    return ((type(t) is torch.Tensor or type(t) is nn.Parameter) and t.dtype in _DTYPES
            and t.layout == torch.strided and t.numel() > 0 and t.device.type != "meta")


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


def _user_line(cache: dict[Any, bool]) -> str:
    """``file:line`` of the innermost frame outside torch and gradviz_nb's library layers."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        lib = cache.get(code)
        if lib is None:
            lib = cache[code] = code.co_filename.startswith(_LIBRARY_DIRS)
        if not lib:
            return f"{code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _input_info(x: Any) -> InputInfo:
    if not isinstance(x, torch.Tensor):
        v = float(x)
        return InputInfo((), type(x).__name__, int(math.isnan(v)), int(math.isinf(v)), int(v == 0),
                         abs(v) if not math.isnan(v) else math.nan, v, scalar=True)
    t = x.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.layout != torch.strided or t.device.type == "meta":
        return InputInfo(tuple(t.shape), str(t.dtype).replace("torch.", ""), 0, 0, 0, math.nan, math.nan)
    f = t if t.is_floating_point() else t.double()
    nan = f.isnan()
    n_nan = int(nan.sum())
    kept = f[~nan] if n_nan else f
    max_abs = float(kept.abs().max()) if kept.numel() else math.nan
    low = float(kept.min()) if kept.numel() else math.nan
    return InputInfo(tuple(t.shape), str(x.dtype).replace("torch.", ""), n_nan, int(f.isinf().sum()),
                     int((f == 0).sum()), max_abs, low)


def _any(x: Any, pred: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    t = x if isinstance(x, torch.Tensor) else torch.tensor(float(x))
    return bool(pred(t.detach()).any())


def _classify(base: str, values: list[Any], nan: bool, inf: bool) -> tuple[str, str]:
    """Cause of a birth, from the op and the values it read."""
    tensors = [v for v in values if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())]
    numbers = [v for v in values if not isinstance(v, torch.Tensor)]
    if any(not math.isfinite(float(v)) for v in numbers if isinstance(v, (int, float))) or not tensors:
        return "constant", "a NaN/Inf constant was written (a fill value, a mask, a literal)"
    first = values[0] if values else tensors[0]
    if base in ("log", "log2", "log10", "log1p", "xlogy", "special_xlog1py"):
        x = values[1] if base in ("xlogy", "special_xlog1py") and len(values) > 1 else first
        edge = -1.0 if base in ("log1p", "special_xlog1py") else 0.0
        neg, zero = _any(x, lambda t: t < edge), _any(x, lambda t: t == edge)
        if neg and (nan or not zero):
            return "log of a negative", f"{base} of values below {edge:g} is NaN"
        if zero:
            return "log(0)", f"{base} of {edge:g} is -inf (an input reaches {edge:g}, e.g. a probability underflowing)"
    if base in ("sqrt", "rsqrt") and _any(first, lambda t: t < 0):
        return "sqrt of a negative", f"{base} of a negative value is NaN"
    if base == "pow" and len(values) > 1:
        b, e = values[0], values[1]
        if nan and _any(b, lambda t: t < 0) and _any(e, lambda t: t != torch.round(t)):
            return "sqrt of a negative", "a negative number to a fractional power (x ** 0.5 is a square root) is NaN"
        if _any(b, lambda t: t == 0) and _any(e, lambda t: t < 0):
            return "division by zero", "0 to a negative power is a division by zero"
    if base in ("div", "true_divide", "floor_divide", "reciprocal", "rsqrt") and values:
        num, den = (None, first) if base in ("reciprocal", "rsqrt") else (first, values[1] if len(values) > 1 else None)
        if den is not None and _any(den, lambda t: t == 0):
            if num is not None and nan:
                tn = num if isinstance(num, torch.Tensor) else torch.tensor(float(num))
                td = den if isinstance(den, torch.Tensor) else torch.tensor(float(den))
                try:
                    both = bool(((tn.detach() == 0) & (td.detach() == 0)).any())
                except RuntimeError:  # shapes that do not broadcast (never for a div that ran)
                    both = False
                if both:
                    return "0/0", "zero divided by zero (e.g. x / x.norm() of an all-zero vector) is NaN"
            return "division by zero", "a divisor is exactly 0 (e.g. a norm or a count that is 0)"
    if base in ("exp", "exp2", "expm1", "sinh", "cosh", "_softmax") and inf:
        top = max((float(t.detach().abs().max()) for t in tensors), default=math.nan)
        return "exp overflow", f"{base} of values up to {_num(top)} exceeds the dtype's range"
    if inf and not nan:
        return "overflow", "finite inputs gave a result beyond the dtype's largest value"
    return "other", f"{base} turned finite inputs into {'NaN' if nan else 'Inf'}"


@dataclass
class _Birth:
    site: Site
    kind: str
    cause: str
    detail: str
    inputs: tuple[InputInfo, ...]
    parents: frozenset[int] = frozenset()  # a transition: NaN made from these births' infinities


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


class _Watch(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Checks every op's floating outputs and keeps the provenance of non-finite tensors."""

    def __init__(self, model: nn.Module | None, before_write: Callable[[torch.Tensor], None] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.model = model
        self.before_write = before_write  # the lazy sandbox copies a parameter or .grad before its first write
        self.prov: Any = WeakIdKeyDictionary()  # tensor -> _Prov, for non-finite tensors only
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
        self._handles = [register_module_forward_pre_hook(self._pre),
                         register_module_forward_hook(self._post, always_call=True)]

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._stack.clear()

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
            return Site("forward", info.name, path, typ, _user_line(self._frames))
        node = torch._C._current_autograd_node()
        if node is None:
            return Site("backward", info.name, "", "", _user_line(self._frames))
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
                             "ran, e.g. the data or a parameter broken by an earlier step)", (_input_info(t),)))
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
        if info.mutated and (self.prov or self.storages):
            pre = [self._pre_state(t) for pos, name in info.mutated for t in _tensors(_arg(args, kwargs, pos, name))]
        out = func(*args, **kwargs)
        backward = torch._C._current_graph_task_id() != -1
        if not backward:
            seq = _sequence_nr()
            if seq != self._last_seq:  # this op made autograd nodes: remember where, for backward births
                self._last_seq = seq
                self._seqs.append(seq)
                _, path, typ = self._stack[-1] if self._stack else (0, "", "")
                self._where.append((path, typ, _user_line(self._frames)))
        if info.skip:
            return out
        if info.read:  # loss.item(), float(loss): a value reaching the user
            x = args[0] if args else None
            if _checkable(x) and not _finite(x):
                self._reach(self._lookup(x) or self._external(x, info, backward), "read into Python (.item())")
            return out
        if info.view and not ((self.prov or self.storages) and self._known(args, kwargs)):
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
            elif self.prov and t in self.prov:  # made finite again in place
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
                cause, detail = _classify(info.base, values, has_nan, has_inf)
                birth = self._new(_Birth(site, kind, cause, detail, tuple(_input_info(v) for v in values)))
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
    saved: dict[str, Any] = field(default_factory=dict)

    def __enter__(self) -> _Patched:
        watch = self.watch
        backward, grad = torch.autograd.backward, torch.autograd.grad
        self.saved = {"backward": backward, "grad": grad}

        def wrapped_backward(*args: Any, **kwargs: Any) -> Any:
            watch.check(args[0] if args else kwargs.get("tensors"), "loss (a root of backward)")
            given = args[1] if len(args) > 1 else kwargs.get("grad_tensors")
            if given is not None:
                watch.check(given, "the gradient given to backward")
            return backward(*args, **kwargs)

        def wrapped_grad(*args: Any, **kwargs: Any) -> Any:
            watch.check(args[0] if args else kwargs.get("outputs"), "loss (an output given to autograd.grad)")
            out = grad(*args, **kwargs)
            watch.check(out, "a gradient returned by torch.autograd.grad")
            return out

        torch.autograd.backward = wrapped_backward
        torch.autograd.grad = wrapped_grad
        return self

    def __exit__(self, *exc: object) -> None:
        torch.autograd.backward = self.saved["backward"]
        torch.autograd.grad = self.saved["grad"]


def find_nonfinite(fn: Callable[[], Any], model: nn.Module | None = None, *,
                   optimizer: torch.optim.Optimizer | None = None) -> NonFinite | None:
    """Run ``fn`` once and return the first op whose NaN/Inf reached the loss or the training state.

    ``fn`` is a zero-argument callable doing what one training step does, e.g.
    ``lambda: criterion(model(x), y).backward()`` (it may also return the loss, step an optimizer, call
    ``torch.autograd.grad``). ``model`` names module paths and parameters; without it, the outermost module
    called names its submodules. Returns ``None`` when no NaN/Inf reached the loss, a gradient, a parameter,
    a value read with ``.item()`` or ``fn``'s return value: masks filled with ``-inf`` that a softmax turns
    finite are not findings. If ``fn`` raises, the exception propagates, with a note naming the origin
    found so far. Whatever ``fn`` changed is put back afterwards (parameters, buffers, ``.grad``, RNGs,
    modes, hooks; the state of ``optimizer`` when ``fn`` steps it), also when it raises. See the module
    docstring for how it works and what it costs.

    Example::

        nf = gv.find_nonfinite(lambda: criterion(model(x), y).backward(), model=model)
        print(nf.summary() if nf else "no NaN/Inf reached the loss or the gradients")
    """
    if not callable(fn) or isinstance(fn, (torch.Tensor, nn.Module)):
        raise GradvizError(
            f"gv.find_nonfinite expects a function with no arguments that runs the forward and backward pass, "
            f"e.g. gv.find_nonfinite(lambda: criterion(model(x), y).backward(), model=model); got "
            f"{type(fn).__name__}. Wrap the code in a lambda or def instead of passing its result.")
    if model is not None and not isinstance(model, nn.Module):
        raise GradvizError(f"model must be an nn.Module (it names modules and parameters), got {type(model).__name__}.")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise GradvizError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}.")
    not_meta("gv.find_nonfinite", model)
    missing = [n for n, ok in (("torch.autograd._get_sequence_nr", hasattr(torch.autograd, "_get_sequence_nr")),
                               ("torch._C._current_autograd_node", hasattr(torch._C, "_current_autograd_node")),
                               ("torch._C._current_graph_task_id", hasattr(torch._C, "_current_graph_task_id")))
               if not ok]
    if missing:
        raise GradvizError(f"torch {torch.__version__} lacks {', '.join(missing)}, which find_nonfinite needs to tell "
                           "backward from forward (torch 2.13 has them).")
    # fn runs for real; what it changes comes back. Lazy: the watch sees every in-place write and has
    # the sandbox copy a parameter or .grad just before its first one (no copy of the whole model).
    with sandbox(model, optimizer=optimizer, lazy=True) as box:
        watch, returned = _watched_run(fn, model, box.before_write)
        watch.check(returned, "the value fn returned")
        return watch.result()


def _watched_run(fn: Callable[[], Any], model: nn.Module | None,
                 before_write: Callable[[torch.Tensor], None] | None = None) -> tuple[_Watch, Any]:
    """Run ``fn`` under the watch; the watch (births, what reached) and what ``fn`` returned."""
    watch = _Watch(model, before_write)
    watch.start()
    try:
        with _Patched(watch), watch:
            returned = fn()
    except BaseException as exc:
        watch.stop()
        found = watch.result()
        if hasattr(exc, "add_note"):
            exc.add_note("gv.find_nonfinite: " + (found.summary() if found is not None else
                                                  "no NaN/Inf had reached the loss or the gradients when fn raised"))
        raise
    watch.stop()
    return watch, returned

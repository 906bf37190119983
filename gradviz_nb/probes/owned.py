"""Process-wide torch state, changed and undone per thread: what :mod:`gradviz_nb.probes.sandbox` builds on.

torch keeps some state for the whole process: the global module hook dicts
(``torch.nn.modules.module._global_forward_hooks`` and siblings), the global optimizer hook dicts
(``torch.optim.optimizer._global_optimizer_pre_hooks`` / ``_post_hooks``), and module functions and class
attributes (``torch.autograd.backward``, ``Optimizer.zero_grad``, ...). A snapshot of those taken in one thread
and written back later loses what another thread added meanwhile, and resurrects what it removed. Two tools here
replace snapshots:

- :class:`Journal`: the changes *this thread* made to the global hook dicts between :meth:`Journal.open` and
  :meth:`Journal.undo`, undone one by one (an added hook removed if it is still there, a removed one put back
  at its place). Hooks other threads add or remove meanwhile are theirs and stay as they are. The dicts are
  made journaling once (:func:`install`, on import of this module): torch's ``OrderedDict`` objects are
  replaced by a subclass holding the same entries, and the handles of hooks registered before point to the
  new dicts. Outside an open journal a change costs one thread-local read.
- :func:`for_this_thread`: replace a module function or a class attribute *for the calling thread only*::

      def watched(original, *args, **kwargs):      # the current thread's replacement
          print("backward!")
          return original(*args, **kwargs)

      with for_this_thread(torch.autograd, "backward", watched):
          step()                                  # this thread's calls go through ``watched``

  While any thread uses it, one dispatcher sits on the attribute; a thread without a replacement calls
  straight through to the original (a ``torch.no_grad()`` in another thread stays a ``no_grad``). When the
  last thread leaves, the original object is put back, so the attribute (a class ``__dict__`` too) ends as
  it began; an attribute the user replaced meanwhile is left as the user set it. Nested uses in one thread
  stack: the inner replacement's ``original`` calls the outer one.

Everything per thread in torch itself (grad mode, ``inference_mode``, the ``TorchFunctionMode`` and
``TorchDispatchMode`` stacks, saved-tensor hooks) needs neither: set it and put it back in the same thread.
"""

from __future__ import annotations

import gc
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import torch
import torch.nn.modules.module as module_globals
import torch.optim.optimizer as optimizer_globals
from torch.utils.hooks import RemovableHandle

__all__ = ["GLOBAL_MODULE_HOOKS", "GLOBAL_OPTIMIZER_HOOKS", "Journal", "for_this_thread", "in_this_thread",
           "install", "is_dispatcher", "no_backward_inside"]

GLOBAL_MODULE_HOOKS = (
    "_global_forward_hooks", "_global_forward_hooks_with_kwargs", "_global_forward_hooks_always_called",
    "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks",
    "_global_module_registration_hooks", "_global_parameter_registration_hooks", "_global_buffer_registration_hooks",
)
GLOBAL_OPTIMIZER_HOOKS = ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")

# .journals: weak references to the journals open in this thread (a snapshot dropped without being released
# stops recording with it)
_local = threading.local()


def _open_journals() -> list[weakref.ref[Journal]]:
    journals: list[weakref.ref[Journal]] | None = getattr(_local, "journals", None)
    if journals is None:
        journals = _local.journals = []
    return journals


def _record(live: OrderedDict[Any, Any], key: Any, old: Any, new: Any) -> None:
    for ref in _local.journals:
        j = ref()
        if j is not None:
            j.records.append((live, key, old, new))


class _JournalingHooks(OrderedDict):  # type: ignore[type-arg]
    """One of torch's process-wide hook dicts; changes made in a thread with an open journal are recorded."""

    def __setitem__(self, key: Any, value: Any) -> None:
        journals = getattr(_local, "journals", None)
        if journals:
            _record(self, key, self.get(key, _MISSING), value)
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        journals = getattr(_local, "journals", None)
        if journals and key in self:
            _record(self, key, self[key], _MISSING)
        super().__delitem__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            value = self[key]
            del self[key]
            return value
        return super().pop(key, *default)

    def popitem(self, last: bool = True) -> tuple[Any, Any]:
        key = next(reversed(self)) if last else next(iter(self))
        value = self[key]
        del self[key]
        return key, value

    def clear(self) -> None:
        for key in list(self):
            del self[key]

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in OrderedDict(*args, **kwargs).items():
            self[key] = value


_MISSING = object()


class Journal:
    """The changes the calling thread makes to torch's global hook dicts from :meth:`open` on; :meth:`undo`
    takes back exactly those (see the module docstring). Open and undo in the same thread."""

    def __init__(self) -> None:
        self.records: list[tuple[OrderedDict[Any, Any], Any, Any, Any]] = []  # (dict, key, old, new)
        self._thread: list[weakref.ref[Journal]] | None = None
        self._ref = weakref.ref(self)

    def open(self) -> Journal:
        install()
        self._thread = _open_journals()
        self._thread[:] = [r for r in self._thread if r() is not None]
        self._thread.append(self._ref)
        return self

    def undo(self) -> None:
        """Take back this thread's changes since :meth:`open`, newest first; the journal stays open."""
        records, self.records = self.records, []
        for live, key, old, new in reversed(records):
            now = OrderedDict.get(live, key, _MISSING)
            if now is not new:
                continue  # changed again since (by another thread, or already undone): not ours to touch
            if old is _MISSING:
                OrderedDict.__delitem__(live, key)
            else:
                OrderedDict.__setitem__(live, key, old)
                _put_in_place(live, key)

    def close(self) -> None:
        """Stop recording (nothing is undone)."""
        if self._thread is not None and self._ref in self._thread:
            self._thread.remove(self._ref)
        self._thread = None
        self.records = []


def _put_in_place(live: OrderedDict[Any, Any], key: Any) -> None:
    """A hook put back goes where it was: global hooks run in registration order, and their keys are handle
    ids, which count up."""
    if not isinstance(key, int):
        return
    for later in [k for k in live if isinstance(k, int) and k > key]:
        live.move_to_end(later)


_install_lock = threading.Lock()


def install() -> None:
    """Make torch's global hook dicts journaling (once; again if something replaced them). Entries and the
    handles that remove them are kept: a handle made before points to the new dict."""
    with _install_lock:
        swapped: dict[int, OrderedDict[Any, Any]] = {}
        for owner, names in ((module_globals, GLOBAL_MODULE_HOOKS), (optimizer_globals, GLOBAL_OPTIMIZER_HOOKS)):
            for name in names:
                old = getattr(owner, name, None)
                if old is None or type(old) is _JournalingHooks:
                    continue
                new = _JournalingHooks(old)
                setattr(owner, name, new)
                if old:
                    swapped[id(old)] = new
        if swapped:
            _repoint_handles(swapped)


def _repoint_handles(swapped: dict[int, OrderedDict[Any, Any]]) -> None:
    for obj in gc.get_objects():
        if type(obj) is RemovableHandle:
            ref = obj.hooks_dict_ref()
            if ref is not None and id(ref) in swapped:
                obj.hooks_dict_ref = weakref.ref(swapped[id(ref)])
            extra = getattr(obj, "extra_dict_ref", ())
            if extra and any(r() is not None and id(r()) in swapped for r in extra):
                obj.extra_dict_ref = tuple(weakref.ref(swapped[id(r())]) if r() is not None and id(r()) in swapped
                                           else r for r in extra)


def in_this_thread(hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook`` for a process-wide hook dict, run only for calls from the thread that made it (``None``
    elsewhere): a probe's global module or optimizer hook must not see another thread's model."""
    ident = threading.get_ident()

    def only_here(*args: Any, **kwargs: Any) -> Any:
        return hook(*args, **kwargs) if threading.get_ident() == ident else None

    return only_here


# -- for_this_thread ---------------------------------------------------------------------------------------------

class _Dispatcher:
    """What sits on a patched attribute while a thread uses :func:`for_this_thread` on it."""

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name = owner, name
        self.own = vars(owner).get(name, _MISSING)  # what the owner's own dict held: put back at the end
        self.raw = _raw(owner, name)
        # a staticmethod's or classmethod's function (a classmethod's takes the class its call was made on, so
        # a subclass's call still runs as the subclass); a method or module function as it is
        raw = self.raw
        self.original: Callable[..., Any]
        if isinstance(raw, types.ClassMethodDescriptorType):  # a C classmethod (Function.apply on torch 2.15)
            def unbound(cls: Any, *a: Any, **k: Any) -> Any:
                return raw.__get__(None, cls)(*a, **k)
            self.original = unbound
        else:
            self.original = raw.__func__ if isinstance(raw, staticmethod | classmethod) else getattr(owner, name)
        self.users = 0
        self.local = threading.local()  # .stack: this thread's replacements, innermost last
        dispatcher = self

        def dispatch(*args: Any, **kwargs: Any) -> Any:
            stack = getattr(dispatcher.local, "stack", None)
            if not stack:
                return dispatcher.original(*args, **kwargs)
            return dispatcher.call(len(stack) - 1, args, kwargs)

        self.function = dispatch
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            with suppress(AttributeError, TypeError):
                setattr(dispatch, attr, getattr(self.original, attr))
        dispatch.__gradviz_dispatcher__ = self  # type: ignore[attr-defined]

    def call(self, level: int, args: Any, kwargs: Any) -> Any:
        if level < 0:
            return self.original(*args, **kwargs)
        replacement = self.local.stack[level]
        return replacement(lambda *a, **k: self.call(level - 1, a, k), *args, **kwargs)

    def value(self) -> Any:
        """The object to set on the owner: a plain function for a module; for a class, wrapped like the
        original (a ``staticmethod`` or ``classmethod`` stays one; a method gets ``self`` first, a classmethod
        the class)."""
        if isinstance(self.raw, staticmethod):
            return staticmethod(self.function)
        is_class = isinstance(self.raw, classmethod | types.ClassMethodDescriptorType)
        return classmethod(self.function) if is_class else self.function


_dispatchers: dict[tuple[int, str], _Dispatcher] = {}
_dispatch_lock = threading.Lock()


def is_dispatcher(value: Any) -> bool:
    """Whether ``value`` is a dispatcher :func:`for_this_thread` put on an attribute (it passes calls through
    for threads without a replacement)."""
    inner = value.__func__ if isinstance(value, staticmethod | classmethod) else value
    return getattr(inner, "__gradviz_dispatcher__", None) is not None


def _raw(owner: Any, name: str) -> Any:
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
    return getattr(owner, name)


@contextmanager
def for_this_thread(owner: Any, name: str, replacement: Callable[..., Any]) -> Iterator[None]:
    """Calls of ``owner.name`` from this thread go through ``replacement(original, *args, **kwargs)`` until
    the block exits; other threads' calls go straight to the original (see the module docstring)."""
    key = (id(owner), name)
    with _dispatch_lock:
        d = _dispatchers.get(key)
        if d is None:
            d = _Dispatcher(owner, name)
            setattr(owner, name, d.value())
            _dispatchers[key] = d
        d.users += 1
    stack = getattr(d.local, "stack", None)
    if stack is None:
        stack = d.local.stack = []
    stack.append(replacement)
    try:
        yield
    finally:
        stack.pop()
        with _dispatch_lock:
            d.users -= 1
            if d.users == 0:
                del _dispatchers[key]
                now = vars(owner).get(name, _MISSING)
                if now is not _MISSING and is_dispatcher(now):  # replaced by the user meanwhile: theirs now
                    if d.own is _MISSING:
                        delattr(owner, name)
                    else:
                        setattr(owner, name, d.own)


@contextmanager
def no_backward_inside(who: str) -> Iterator[None]:
    """Refuse a backward (``loss.backward()``, ``torch.autograd.backward``) the user's function makes in this
    thread: for a probe that runs the backward itself, a function that already did would make it run a second
    time through freed buffers (a raw RuntimeError) or count gradients twice."""
    from gradviz_nb.errors import GradvizError

    def refuse(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        raise GradvizError(f"{who}: fn called backward() itself; return the loss without calling backward "
                           f"(e.g. fn=lambda: loss_fn(model(x), y)): {who} runs the backward.")

    with for_this_thread(torch.autograd, "backward", refuse):
        yield


install()

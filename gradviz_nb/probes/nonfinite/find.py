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
objects), ``requires_grad``, modes, hooks, RNGs and the ``optimizer`` given are as they were. Under
``torch.distributed`` with ``DTensor`` parameters the ranks share their answers (the birth rank, the ranks that
saw it). Limits: tensor subclasses (DTensor, fake tensors), sparse and nested tensors are not checked; on GPU
each check waits for the device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.nonfinite.found import CAUSES, InputInfo, NonFinite, Site
from gradviz_nb.probes.nonfinite.watch import _finite as _finite  # re-exported: tests check the cheap test itself
from gradviz_nb.probes.nonfinite.watch import _Patched, _Watch
from gradviz_nb.probes.sandbox import sandbox
from gradviz_nb.probes.sharded import is_dtensor
from gradviz_nb.validate import not_meta

__all__ = ["CAUSES", "InputInfo", "NonFinite", "Site", "find_nonfinite"]


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
        found = watch.result()
    return _across_ranks(found, model)


def _across_ranks(found: NonFinite | None, model: nn.Module | None) -> NonFinite | None:
    """Under ``torch.distributed`` with ``DTensor`` parameters (FSDP2, HSDP, tensor parallel), every rank's answer
    is shared (one ``all_gather_object``; every rank runs ``fn``, as its collectives require): a NaN born on one
    rank reaches the others through a collective, where it is no birth ("already non-finite") or, when it
    arrives inside FSDP's hooks, is not seen at all. Each rank answers with the birth: the first rank whose
    answer is a real birth, its ``rank``, and the ``ranks`` that saw one."""
    import torch.distributed as dist

    if model is None or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2 \
            or not any(is_dtensor(p) for p in model.parameters()):
        return found
    every: list[NonFinite | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, found)
    answers = {r: f for r, f in enumerate(every) if f is not None}
    if not answers:
        return None
    born = next((r for r, f in answers.items() if f.cause != "already non-finite"), min(answers))
    return replace(answers[born], rank=born, ranks=tuple(answers))


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

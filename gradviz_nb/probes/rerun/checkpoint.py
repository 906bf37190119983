"""Verified checkpointing what-if: re-run the user's forward and backward with the marked module calls
really checkpointed (``torch.utils.checkpoint.checkpoint`` around their forward, ``use_reentrant`` as
marked), inside the sandbox, and compare with :func:`checkpoint_what_if`'s prediction.

What is measured: the bytes saved for backward, through an outer ``saved_tensors_hooks`` pair (storages
counted once, parameters left out). A non-reentrant checkpoint's own hooks take precedence inside the block
(its packed handles are not memory held), while the inputs it keeps (``_NoopSaveInputs`` /
``CheckpointFunction``'s ``save_for_backward``) are saved outside them and are seen; each checkpoint also
keeps the RNG states it would restore (CPU: ``torch.get_rng_state()``, plus device states), added by their
real sizes. Which leaves get ``.grad`` (exact). The forward ops non-reentrant checkpoints recompute, from
:func:`gv.memory_held` on a trace of the checkpointed run (reentrant blocks run under no_grad: their ops
are not in any graph, so that count is not checked). The modules' ``forward`` is restored afterwards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, get_device_states

from gradviz_nb.analysis.checkpointing import CheckpointPlan, checkpoint_what_if, plan, table
from gradviz_nb.analysis.memory import format_bytes, memory_held
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.rerun.whatif import Rerunnable
from gradviz_nb.probes.sandbox import sandbox
from gradviz_nb.tracing import capture, trace

BYTES_TOLERANCE = 0.02  # the prediction reads storages from one trace; the check allows 2% on the total


class _Kept:
    """What the checkpoints of one run keep beyond saved tensors: RNG states, counted by their sizes."""

    def __init__(self) -> None:
        self.rng_bytes = 0
        self.frames = 0


@contextmanager
def checkpointed(model: nn.Module, calls: Mapping[str, tuple[str, int, str]], kept: _Kept) -> Iterator[None]:
    """Wrap the marked calls' modules: ``calls`` maps call id -> (module path, call index, mode). Only the
    index-th call of a module is checkpointed; its ``forward`` is put back on exit, also on error."""
    modules = dict(model.named_modules())
    by_path: dict[str, dict[int, str]] = {}
    for path, index, mode in calls.values():
        if path not in modules:
            raise GradvizError(f"checkpoint verify: the model has no module {path!r}.")
        by_path.setdefault(path, {})[index] = mode
    patched: list[tuple[nn.Module, bool, Any]] = []
    try:
        for path, modes in by_path.items():
            module = modules[path]
            had = "forward" in vars(module)
            patched.append((module, had, vars(module).get("forward")))
            module.forward = _wrapper(module.forward, modes, kept)
        yield
    finally:
        for module, had, old in reversed(patched):
            if had:
                module.forward = old
            else:
                del module.forward


def _wrapper(forward: Callable[..., Any], modes: Mapping[int, str], kept: _Kept) -> Callable[..., Any]:
    count = 0

    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        mode = modes.get(count)
        if mode is None or not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        rng = int(torch.get_rng_state().numel()) + sum(int(s.numel()) for s in get_device_states(*args)[1])
        if mode == "reentrant":  # reentrant checkpoint takes no keyword arguments: bind them
            out = checkpoint(functools.partial(forward, **kwargs), *args, use_reentrant=True)
            if not any(t.requires_grad for t in _tensors(out)):
                return out  # no node holds its ctx: the RNG state it saved is freed at once
        else:
            out = checkpoint(forward, *args, use_reentrant=False, **kwargs)
        kept.frames += 1
        kept.rng_bytes += rng
        return out

    return run


def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for x in out for t in _tensors(x)]
    if isinstance(out, Mapping):
        return [t for x in out.values() for t in _tensors(x)]
    return []


class _SavedBytes:
    """Unique storages saved for backward outside any inner hook (parameters apart)."""

    def __init__(self, params: set[tuple[Any, int]]) -> None:
        self.params = params
        self.storages: dict[tuple[Any, int], int] = {}

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = (t.device, storage.data_ptr())
        if key not in self.params and storage.nbytes():
            self.storages[key] = int(storage.nbytes())
        return t

    @staticmethod
    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    @property
    def total(self) -> int:
        return sum(self.storages.values())


def _calls(rerun: Rerunnable, marks: Mapping[str, str]) -> dict[str, tuple[str, int, str]]:
    info = {c["id"]: (c["path"], c["index"]) for c in rerun.graph.calls}
    return {c: (*info[c], mode) for c, mode in marks.items()}


def _run(rerun: Rerunnable, calls: Mapping[str, tuple[str, int, str]]) -> tuple[int, dict[str, bool], _Kept]:
    """One checkpointed run with saved bytes measured, then backward: (bytes, leaf name -> got .grad, kept)."""
    model = rerun.model
    assert model is not None
    params = {(p.device, p.untyped_storage().data_ptr()) for p in model.parameters()}
    params |= {(t.device, t.untyped_storage().data_ptr()) for t in rerun.tensors.values()}
    saved, kept = _SavedBytes(params), _Kept()
    with sandbox(model, tensors=rerun.tensors.values()):
        for t in rerun.tensors.values():
            t.grad = None
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(rerun._rng)
            with checkpointed(model, calls, kept), torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                loss = rerun._call()
            if loss.requires_grad:
                loss.backward()  # type: ignore[no-untyped-call]
        got = {name: t.grad is not None for name, t in rerun.tensors.items()}
    return saved.total + kept.rng_bytes, got, kept


def _recomputed(rerun: Rerunnable, calls: Mapping[str, tuple[str, int, str]]) -> tuple[int, int]:
    """(ops, FLOPs) the checkpointed run's backward re-runs, from memory_held on its trace."""
    model = rerun.model
    assert model is not None
    with sandbox(model, tensors=rerun.tensors.values()), torch.random.fork_rng(devices=[]):
        torch.set_rng_state(rerun._rng)
        with checkpointed(model, calls, _Kept()), capture(model) as cap:
            loss = rerun._call()
        mem = memory_held(trace(loss, model=model, capture=cap))
    return mem.recomputed_ops, mem.recomputed_flops


def verify_checkpoint(rerun: Rerunnable, marks: Mapping[str, str]) -> dict[str, Any]:
    """Re-run with the marked calls checkpointed and compare with the prediction (``CheckpointVerification``
    in ``gradviz_nb/widgets/page/contract.py``): bytes within 2%, lost leaves exact, recomputed ops exact
    for non-reentrant checkpoints."""
    if rerun.model is None:
        raise GradvizError("checkpoint verify needs the model: GraphWidget.from_fn(fn, model=model).")
    predicted: CheckpointPlan = checkpoint_what_if(rerun.graph, marks)
    outer = {c: predicted.marks[c] for c in predicted.marks if c not in predicted.ignored}
    calls = _calls(rerun, outer)
    measured_before, _, _ = _run(rerun, {})
    measured_after, got, kept = _run(rerun, calls)
    names = rerun.graph.nx.nodes
    leaves = {names[n]["names"][0] for n in rerun.graph.nodes_of("leaf") if names[n]["names"]}
    actual_lost = sorted(name for name in leaves if name in got and not got[name])
    predicted_lost = sorted(names[n]["names"][0] for n in predicted.lost if names[n]["names"])
    non_reentrant = {c: v for c, v in calls.items() if v[2] == "non_reentrant"}
    ops, flops = _recomputed(rerun, non_reentrant) if non_reentrant else (0, 0)
    part = plan(table(rerun.graph), rerun.graph.calls, {c: v[2] for c, v in non_reentrant.items()})
    bytes_ok = abs(measured_after - predicted.after) <= BYTES_TOLERANCE * max(measured_after, 1)
    checked = [f"saved bytes {format_bytes(predicted.after)} predicted, {format_bytes(measured_after)} measured"
               f" with saved-tensor hooks (before: {format_bytes(predicted.before)} / "
               f"{format_bytes(measured_before)})",
               f"which of {len(leaves)} leaves get .grad ({len(actual_lost)} lose it)"]
    if non_reentrant:
        checked.append(f"{part['recomputed_ops']} recomputed forward ops predicted for the non-reentrant"
                       f" checkpoints, {ops} in the checkpointed run's trace")
    unchecked = ([f"reentrant checkpoints re-run their calls under no_grad: the {len(calls) - len(non_reentrant)}"
                  " reentrant blocks' recompute is not in any graph, so it was not counted"]
                 if len(calls) > len(non_reentrant) else [])
    return {
        "marks": dict(predicted.marks),
        "predicted_bytes": predicted.after, "measured_bytes": measured_after,
        "predicted_before": predicted.before, "measured_before": measured_before,
        "rng_bytes": kept.rng_bytes, "frames": kept.frames,
        "predicted_recomputed": int(part["recomputed_ops"]), "measured_recomputed": ops,
        "predicted_recomputed_flops": int(part["recomputed_flops"]), "measured_recomputed_flops": flops,
        "predicted_lost": predicted_lost, "actual_lost": actual_lost,
        "agree": bytes_ok and predicted_lost == actual_lost and part["recomputed_ops"] == ops,
        "checked": checked, "unchecked": unchecked, "error": "",
    }

"""Verified checkpointing what-if: re-run the user's forward and backward with every marked module call
really checkpointed (``torch.utils.checkpoint.checkpoint`` around its forward, ``use_reentrant`` as marked,
nested marks included: a checkpoint inside a checkpoint, as the user would write it), inside the sandbox,
and compare with :func:`checkpoint_what_if`'s prediction.

What is measured:

* The bytes saved for backward, through an outer ``saved_tensors_hooks`` pair (storages counted once,
  parameters left out). A non-reentrant checkpoint's own hooks take precedence inside the block (its packed
  handles are not memory held), while the inputs it keeps (``_NoopSaveInputs`` / ``CheckpointFunction``'s
  ``save_for_backward``) are saved outside them and are seen. Plus the RNG states of the checkpoints still
  alive when forward ends (a non-reentrant frame that packed something, a reentrant node in the graph),
  found by the garbage collector and counted by their real sizes (CPU ``torch.get_rng_state()``, plus
  device states).
* Which leaves get ``.grad`` (exact).
* The recompute: FLOPs of the matmul-like kernels (PyTorch's own ``torch.utils.flop_counter`` formulas) that
  run inside a checkpointed forward while backward runs, every re-run counted (a nested checkpoint's block
  runs again in its parent's recompute and in its own). Without nesting and with non-reentrant marks only,
  the recomputed op count is checked too, from :func:`gv.memory_held` on a trace of the checkpointed run.

The modules' ``forward`` is restored afterwards.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.utils import checkpoint as torch_checkpoint
from torch.utils.checkpoint import checkpoint, get_device_states
from torch.utils.flop_counter import flop_registry

from gradviz_nb.analysis.checkpointing import CheckpointPlan, checkpoint_what_if
from gradviz_nb.analysis.memory import format_bytes, memory_held
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.nonfinite import BareDispatchMode
from gradviz_nb.probes.rerun.whatif import Rerunnable
from gradviz_nb.probes.sandbox import sandbox
from gradviz_nb.tracing import capture, trace, typed_torch
from gradviz_nb.validate import not_meta

BYTES_TOLERANCE = 0.02  # the prediction reads storages from one trace; the check allows 2% on the total
Calls = Mapping[str, tuple[str, int, str]]  # call id -> (module path, call index, mode)

_aten = torch.ops.aten
_FLOPS: dict[Any, Any] = {**flop_registry}
if hasattr(_aten, "_scaled_dot_product_flash_attention_for_cpu"):  # CPU SDPA: same operands as the others
    _FLOPS[_aten._scaled_dot_product_flash_attention_for_cpu] = flop_registry[_aten._scaled_dot_product_flash_attention]


class _Recompute(BareDispatchMode):
    """Counts the FLOPs of kernels run inside a checkpointed forward (``depth`` > 0) while it is active."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.depth = 0
        self.flops = 0
        self.backward = False  # set once forward is over: module calls from now on are recomputes
        self.rng_bytes = 0  # size of one checkpoint's RNG states (CPU, plus devices), read when one is made

    def counted(self, forward: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            try:
                return forward(*args, **kwargs)
            finally:
                self.depth -= 1
        return run

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        count = _FLOPS.get(func._overloadpacket) if self.depth else None
        if count is not None:
            self.flops += int(count(*args, **kwargs, out_val=out))
        return out


@contextmanager
def checkpointed(model: nn.Module, calls: Calls, recompute: _Recompute) -> Iterator[None]:
    """Wrap the marked calls' modules. Only the index-th call of a module is checkpointed, in any grad
    mode (under no_grad, inside an outer reentrant block, PyTorch's checkpoint just runs the block); its
    ``forward`` is put back on exit, also on error."""
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
            module.forward = _wrapper(module.forward, modes, recompute)
        yield
    finally:
        for module, had, old in reversed(patched):
            if had:
                module.forward = old
            else:
                del module.forward


def _wrapper(forward: Callable[..., Any], modes: Mapping[int, str], recompute: _Recompute) -> Callable[..., Any]:
    count = 0
    inner = recompute.counted(forward)
    again = next(iter(modes.values())) if len(set(modes.values())) == 1 else None

    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        if recompute.backward:  # a recompute calls it again: a module marked in one mode keeps it
            mode = again
        else:
            count += 1
            mode = modes.get(count)
        if mode is None:
            return forward(*args, **kwargs)
        rng = int(torch.get_rng_state().numel()) + sum(int(s.numel()) for s in get_device_states(*args)[1])
        recompute.rng_bytes = max(recompute.rng_bytes, rng)
        if mode == "reentrant":  # reentrant checkpoint takes no keyword arguments: bind them
            return checkpoint(functools.partial(inner, **kwargs), *args, use_reentrant=True)
        return checkpoint(inner, *args, use_reentrant=False, **kwargs)

    return run


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


def _is_checkpoint(o: object) -> bool:
    """A non-reentrant checkpoint's frame or a reentrant one's node: each holds its forward's RNG states."""
    return isinstance(o, torch_checkpoint.CheckpointFunction._backward_cls) or type(o).__name__ == "_CheckpointFrame"


def _checkpoints() -> set[int]:
    gc.collect()  # a frame nothing reaches may sit in a reference cycle: it is not alive
    return {id(o) for o in gc.get_objects() if _is_checkpoint(o)}


class _Measured:
    """One re-run: saved bytes, checkpoints alive after forward and their RNG bytes, .grad per leaf,
    recomputed FLOPs."""

    def __init__(self, saved: int, frames: int, rng_bytes: int, got: dict[str, bool], flops: int) -> None:
        self.saved, self.frames, self.rng_bytes, self.got, self.flops = saved, frames, rng_bytes, got, flops

    @property
    def bytes(self) -> int:
        return self.saved + self.rng_bytes


def _calls(rerun: Rerunnable, marks: Mapping[str, str]) -> dict[str, tuple[str, int, str]]:
    info = {c["id"]: (c["path"], c["index"]) for c in rerun.graph.calls}
    return {c: (*info[c], mode) for c, mode in marks.items()}


def _run(rerun: Rerunnable, calls: Calls) -> _Measured:
    """One checkpointed run with saved bytes measured, then backward with the recompute counted."""
    model = rerun.model
    assert model is not None
    params = {(p.device, p.untyped_storage().data_ptr()) for p in model.parameters()}
    params |= {(t.device, t.untyped_storage().data_ptr()) for t in rerun.tensors.values()}
    saved, recompute = _SavedBytes(params), _Recompute()
    earlier = _checkpoints() if calls else set()
    with sandbox(model, tensors=rerun.tensors.values()):
        for t in rerun.tensors.values():
            t.grad = None
        with torch.random.fork_rng(devices=[]), checkpointed(model, calls, recompute):
            torch.set_rng_state(rerun._rng)
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
                loss = rerun._call()
            frames = len(_checkpoints() - earlier) if calls else 0
            recompute.backward = True
            if loss.requires_grad:
                with recompute:
                    typed_torch.backward(loss)
            del loss
        got = {name: t.grad is not None for name, t in rerun.tensors.items()}
    return _Measured(saved.total, frames, frames * recompute.rng_bytes, got, recompute.flops)


def _recomputed_ops(rerun: Rerunnable, calls: Calls) -> int:
    """The forward ops the checkpointed run's backward re-runs, from memory_held on its trace."""
    model = rerun.model
    assert model is not None
    with sandbox(model, tensors=rerun.tensors.values()), torch.random.fork_rng(devices=[]):
        torch.set_rng_state(rerun._rng)
        with checkpointed(model, calls, _Recompute()), capture(model) as cap:
            loss = rerun._call()
        return memory_held(trace(loss, model=model, capture=cap)).recomputed_ops


def verify_checkpoint(rerun: Rerunnable, marks: Mapping[str, str]) -> dict[str, Any]:
    """Re-run with every marked call checkpointed (nested ones too) and compare with the prediction
    (``CheckpointVerification`` in ``gradviz_nb/widgets/page/contract.py``): bytes within 2%, lost leaves
    exact, recomputed FLOPs exact, and recomputed ops exact for unnested non-reentrant checkpoints. What
    the prediction says it cannot give exactly is measured and listed as not checked."""
    if rerun.model is None:
        raise GradvizError("checkpoint verify needs the model: GraphWidget.from_fn(fn, model=model).")
    not_meta("verify_checkpoint", rerun.model, *rerun.tensors.values())
    predicted: CheckpointPlan = checkpoint_what_if(rerun.graph, marks)
    calls = _calls(rerun, predicted.marks)
    before, after = _run(rerun, {}), _run(rerun, calls)
    names = rerun.graph.nx.nodes
    leaves = {names[n]["names"][0] for n in rerun.graph.nodes_of("leaf") if names[n]["names"]}
    actual_lost = sorted(name for name in leaves if name in after.got and not after.got[name])
    predicted_lost = sorted(names[n]["names"][0] for n in predicted.lost_ids if names[n]["names"])
    simple = bool(calls) and not predicted.nested and not predicted.ignored and all(
        v[2] == "non_reentrant" for v in calls.values())
    ops = _recomputed_ops(rerun, calls) if simple else -1  # -1: not measured (no graph holds those re-runs)
    bytes_ok = abs(after.bytes - predicted.after) <= BYTES_TOLERANCE * max(after.bytes, 1)
    flops_ok = after.flops == predicted.recomputed_flops
    checked = [f"saved bytes {format_bytes(predicted.after)} predicted, {format_bytes(after.bytes)} measured"
               f" with saved-tensor hooks and the {after.frames} checkpoints alive after forward (before:"
               f" {format_bytes(predicted.before)} / {format_bytes(before.bytes)})",
               f"which of {len(leaves)} leaves get .grad ({len(actual_lost)} lose it)",
               f"recomputed FLOPs {predicted.recomputed_flops:,} predicted, {after.flops:,} counted in backward's"
               " re-runs of checkpointed forwards"]
    if simple:
        checked.append(f"{predicted.recomputed_ops} recomputed forward ops predicted, {ops} in the checkpointed"
                       " run's trace")
    unchecked = [] if simple or not calls else [
        "the recomputed op count (reentrant or nested checkpoints re-run outside any traced graph): FLOPs checked"]
    unchecked += [f"{why}: measured above" for why in predicted.inexact]
    exact_parts = (bytes_ok and flops_ok) or bool(predicted.inexact)
    return {
        "marks": dict(predicted.marks),
        "predicted_bytes": predicted.after, "measured_bytes": after.bytes,
        "predicted_before": predicted.before, "measured_before": before.bytes,
        "rng_bytes": after.rng_bytes, "frames": after.frames,
        "predicted_recomputed": predicted.recomputed_ops, "measured_recomputed": ops,
        "predicted_recomputed_flops": predicted.recomputed_flops, "measured_recomputed_flops": after.flops,
        "predicted_lost": predicted_lost, "actual_lost": actual_lost,
        "agree": exact_parts and predicted_lost == actual_lost and ops in (-1, predicted.recomputed_ops),
        "checked": checked, "unchecked": unchecked, "error": "",
    }

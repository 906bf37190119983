"""Bug-zoo cases: memory held for backward (with and without activation checkpointing), against PyTorch.

The truth is measured with PyTorch alone, on its own forward (:func:`held_after_forward`): every storage
that could outlive the forward is listed while it runs (what autograd saves, seen through
``saved_tensors_hooks``; every op output, seen by a dispatch mode; every tensor object the garbage
collector can reach afterwards: a checkpoint's RNG state lives in a closure or on a ctx), and the ones
still alive once the forward has returned are counted, by bytes, once per storage, through weak storage
references. Parameters and whatever existed before the forward are not counted (held anyway).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gradviz_nb.bugzoo.case import Case, Outcome

if TYPE_CHECKING:
    import torch

    from gradviz_nb.demo_models import CheckpointMode

TOLERANCE = 0.02  # the library's figure must be within 2% of the bytes PyTorch really keeps


def held_after_forward(forward: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Run ``forward`` and return ``(its output, bytes it left alive for backward)``: unique storages
    created by the forward and still alive after it returned, other than the output's own."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode

    candidates: list[tuple[StorageWeakRef, int]] = []

    def note(t: Any) -> None:
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.device.type != "meta":
            s = t.untyped_storage()
            candidates.append((StorageWeakRef(s), int(s.nbytes())))

    class Outputs(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                note(t)
            return out

    def pack(t: torch.Tensor) -> torch.Tensor:
        note(t)
        return t

    gc.collect()
    before = _tensor_objects()  # kept alive until the end, so no new storage can reuse their memory
    existing = {StorageWeakRef(t.untyped_storage()).cdata for t in before if t.layout == torch.strided}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Outputs():
        out = forward()
    gc.collect()
    for t in _tensor_objects():
        note(t)
    skip = existing | {StorageWeakRef(out.untyped_storage()).cdata}
    alive = {ref.cdata: nbytes for ref, nbytes in candidates if not ref.expired() and ref.cdata not in skip}
    del before
    return out, sum(alive.values())


def _tensor_objects() -> list[torch.Tensor]:
    import torch

    # type(o), not isinstance: isinstance asks lazy module proxies for __class__ (deprecation warnings)
    return [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)]


def _gpt2(mode: CheckpointMode | None) -> tuple[Any, Callable[[], torch.Tensor]]:
    """A 12-block GPT-2 small enough for seconds on CPU, every block checkpointed in ``mode``."""
    import torch

    from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss

    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=12, n_head=4, d_model=32, vocab=101, block_size=16,
                            checkpoint=mode))
    return model, lambda: gpt2_loss(model, batch=2, seq=16)


def _figures(mode: CheckpointMode | None) -> tuple[int, int, str]:
    """(bytes PyTorch keeps, bytes the library reports, the library's recompute line) on a fresh model."""
    import gradviz_nb as gv

    model, forward = _gpt2(mode)
    _, truth = held_after_forward(forward)
    model, forward = _gpt2(mode)  # the library traces an untouched forward of an identical model
    with gv.capture(model) as cap:
        loss = forward()
    mem = gv.memory_held(gv.trace(loss, model=model, capture=cap))
    return truth, mem.activations, mem.compute_summary()


def _within(reported: int, truth: int) -> bool:
    return abs(reported - truth) <= TOLERANCE * truth


def _checkpointed(mode: CheckpointMode) -> Callable[[], Outcome]:
    def run() -> Outcome:
        from gradviz_nb.analysis.memory import format_bytes

        plain_truth, plain_reported, _ = _figures(None)
        truth, reported, recompute = _figures(mode)
        return Outcome(
            expected=(f"held {truth} B ({format_bytes(truth)}): checkpointing saves "
                      f"{plain_truth / truth:.1f}x of {format_bytes(plain_truth)}"),
            got=(f"reported {reported} B ({format_bytes(reported)}): saves {plain_reported / reported:.1f}x; "
                 f"{recompute}"),
            ok=_within(reported, truth) and _within(plain_reported, plain_truth),
        )

    return run


def plain_gpt2() -> Outcome:
    """No checkpointing: every activation a backward formula needs is held."""
    from gradviz_nb.analysis.memory import format_bytes

    truth, reported, _ = _figures(None)
    return Outcome(expected=f"held {truth} B ({format_bytes(truth)})",
                   got=f"reported {reported} B ({format_bytes(reported)})", ok=_within(reported, truth))


def consumed_graph() -> Outcome:
    """``memory_held`` on a graph whose backward already ran: PyTorch freed what it held, so the figure
    cannot be read; the library must say so and how to get it, not report 0 B."""
    import gradviz_nb as gv

    model, forward = _gpt2("non_reentrant")
    loss = forward()
    loss.backward()
    try:
        loss.backward()
        freed = "PyTorch can backward again: nothing was freed"
    except RuntimeError as err:
        freed = "PyTorch freed the saved tensors" if "second time" in str(err) else f"PyTorch: {err}"
    graph = gv.trace(loss, model=model)
    try:
        mem = gv.memory_held(graph)
    except gv.GradvizError as err:
        text = str(err)
        helpful = "retain_graph=True" in text and "before" in text and "backward" in text
        return Outcome(expected=f"{freed}: GradvizError saying to trace before backward or retain_graph=True",
                       got=f"GradvizError: {text}", ok=helpful and "freed" in freed)
    return Outcome(expected=f"{freed}: GradvizError", got=f"reported {mem.activations} B, no error", ok=False)


CASES: list[Case] = [
    Case("gpt2-checkpoint-non-reentrant-memory", "checkpoint-memory", _checkpointed("non_reentrant"),
         description="12-block GPT-2, torch.utils.checkpoint(use_reentrant=False) per block"),
    Case("gpt2-checkpoint-reentrant-memory", "checkpoint-memory", _checkpointed("reentrant"),
         description="12-block GPT-2, torch.utils.checkpoint(use_reentrant=True) per block"),
    Case("gpt2-memory", "memory", plain_gpt2, description="12-block GPT-2, no checkpointing"),
    Case("memory-after-backward", "consumed-graph", consumed_graph,
         description="gv.memory_held on a graph traced after loss.backward()"),
]

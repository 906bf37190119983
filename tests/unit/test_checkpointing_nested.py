"""Nested checkpoint marks against PyTorch, on HF GPT-2: every nesting of the two modes (reentrant in
reentrant, non-reentrant in non-reentrant, and both mixes), the inner mark on the attention (work after it
in the block) and on the MLP (the block's last saving part).

Truth is this file's own checkpointed re-run, written without the package's verify: ``saved_tensors_hooks``
around the forward (bytes saved outside the checkpoints' own hooks) plus the CPU RNG state of every
checkpoint PyTorch still holds when forward ends (found by the garbage collector); the recompute as
PyTorch's ``FlopCounterMode`` counts backward with the checkpoints minus backward without; and each module's
forward calls during backward (a nested block runs again)."""

from __future__ import annotations

import functools
import gc
import itertools
import os
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch.utils import checkpoint as ck
from torch.utils.flop_counter import FlopCounterMode

import gradviz_nb as gv
from gradviz_nb.analysis.checkpointing import checkpoint_what_if
from gradviz_nb.analysis.memory import format_bytes
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.rerun import Rerunnable, verify_checkpoint

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

BLOCK = "transformer.h.0"
MODES = ("reentrant", "non_reentrant")
RNG = int(torch.get_rng_state().numel())


def _gpt2() -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    return model, lambda: model(input_ids=ids, labels=ids).loss


@pytest.fixture(scope="module")
def gpt2() -> tuple[torch.nn.Module, Callable[[], torch.Tensor], gv.AutogradGraph, dict[str, Any]]:
    """The model, its loss, its trace without checkpoints, and PyTorch's run without checkpoints."""
    model, loss_fn = _gpt2()
    with gv.capture(model) as cap:
        loss = loss_fn()
    return model, loss_fn, gv.trace(loss, model=model, capture=cap), _pytorch(model, loss_fn, {})


@contextmanager
def _checkpointed(model: torch.nn.Module, marks: dict[str, str]) -> Iterator[None]:
    """The user's way: ``checkpoint`` inside each marked module's forward, nested ones included."""
    modules = dict(model.named_modules())
    for path, mode in marks.items():
        forward = modules[path].forward

        def run(*args: Any, _f: Any = forward, _m: str = mode, **kwargs: Any) -> Any:
            if _m == "reentrant":
                return ck.checkpoint(functools.partial(_f, **kwargs), *args, use_reentrant=True)
            return ck.checkpoint(_f, *args, use_reentrant=False, **kwargs)

        modules[path].forward = run
    try:
        yield
    finally:
        for path in marks:
            del modules[path].forward


def _alive_checkpoints() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects()
               if type(o).__name__ in ("_CheckpointFrame", "CheckpointFunctionBackward") and not isinstance(o, type))


def _pytorch(model: torch.nn.Module, loss_fn: Callable[[], torch.Tensor], marks: dict[str, str]) -> dict[str, Any]:
    """Bytes held after forward, backward FLOPs, forward calls per module during backward."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in params and s.nbytes():
            storages[s.data_ptr()] = s.nbytes()
        return t

    calls: dict[str, int] = {}
    in_backward = [False]

    def count(name: str) -> Callable[..., None]:
        def pre(*_: Any) -> None:
            if in_backward[0]:
                calls[name] = calls.get(name, 0) + 1
        return pre

    hooks = [m.register_forward_pre_hook(count(n)) for n, m in model.named_modules()]
    earlier = _alive_checkpoints()
    try:
        with _checkpointed(model, marks), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(1)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = loss_fn()
            alive = _alive_checkpoints() - earlier
            in_backward[0] = True
            with FlopCounterMode(display=False) as flops:
                loss.backward()
    finally:
        for h in hooks:
            h.remove()
        model.zero_grad(set_to_none=True)
    return {"bytes": sum(storages.values()) + alive * RNG, "alive": alive,
            "backward_flops": flops.get_total_flops(), "calls": calls}


@pytest.mark.parametrize(("outer", "inner", "child"), list(itertools.product(MODES, MODES, ["attn", "mlp"])))
def test_every_nesting_of_the_two_modes_as_pytorch_runs_it(gpt2: Any, outer: str, inner: str, child: str) -> None:
    model, loss_fn, g, plain = gpt2
    marks = {BLOCK: outer, f"{BLOCK}.{child}": inner}
    real = _pytorch(model, loss_fn, marks)
    plan, alone = checkpoint_what_if(g, marks), checkpoint_what_if(g, {BLOCK: outer})
    # memory: an inner checkpoint that runs with grad in forward (inside a non-reentrant one) keeps its own
    # RNG state; inside a reentrant one it runs under no_grad and keeps nothing
    assert real["alive"] == (2 if outer == "non_reentrant" else 1)
    assert plan.after - alone.after == (RNG if outer == "non_reentrant" else 0)
    assert abs(plan.after - real["bytes"]) <= 64, (plan.after, real["bytes"])  # the unnested mark's offset
    # recompute: FLOPs backward re-ran, as PyTorch counts them, exactly
    assert plan.recomputed_flops == real["backward_flops"] - plain["backward_flops"]
    leaf = f"{BLOCK}.{child}.c_proj"  # a module of the inner block
    reruns = real["calls"].get(leaf, 0)
    # the inner block runs again unless the outer's recompute stops before it: a non-reentrant outer whose
    # last pack is the non-reentrant MLP's inputs (nothing after the MLP in the block saves anything)
    assert reruns == (1 if (outer, inner, child) == ("non_reentrant", "non_reentrant", "mlp") else 2)
    assert (plan.recomputed_flops > alone.recomputed_flops) == (reruns == 2)
    assert plan.nested == [f"{BLOCK}.{child}"] and plan.ignored == [] and plan.inexact == []


def test_verify_applies_the_inner_marks_and_agrees(gpt2: Any) -> None:
    model, loss_fn, g, _ = gpt2
    rerun = Rerunnable(loss_fn, model)
    for outer, inner in itertools.product(MODES, MODES):
        marks = {BLOCK: outer, f"{BLOCK}.attn": inner}
        result = verify_checkpoint(rerun, marks)
        assert result["agree"], result
        assert result["frames"] == (2 if outer == "non_reentrant" else 1)
        assert result["measured_recomputed_flops"] == result["predicted_recomputed_flops"]
        alone = checkpoint_what_if(g, {BLOCK: outer})
        assert result["measured_recomputed_flops"] > alone.recomputed_flops  # the inner block again


def test_the_bar_says_more_when_checkpoints_add_memory() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    x = torch.randn(2, 4, requires_grad=True)
    with gv.capture(model) as cap:
        loss = model(x).sum()
    g = gv.trace(loss, model=model, capture=cap)
    plan = checkpoint_what_if(g, {"1": "non_reentrant"})  # a tiny block: its RNG state outweighs its saves
    assert plan.after > plan.before
    assert f"({format_bytes(plan.after - plan.before)} more;" in plan.summary()
    assert not re.search(r"-\d", plan.summary())  # today's main said "(-4.9 KiB less; ..."


def test_verify_refuses_a_meta_model() -> None:
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    x = torch.randn(2, 4, device="meta")
    rerun = Rerunnable(lambda: model(x).sum(), model)
    with pytest.raises(GradvizError, match=r"verify_checkpoint needs real values.*meta device"):
        verify_checkpoint(rerun, {"0": "non_reentrant"})
    w = gv.GraphWidget.from_fn(lambda: model(x).sum(), model=model)
    w.checkpoints = {"0": "non_reentrant"}
    with pytest.raises(GradvizError, match="meta device"):
        w.verify_checkpoint()

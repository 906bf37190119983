"""Checkpointing what-if (gradviz_nb/analysis/checkpointing.py) against PyTorch: a graph traced without
checkpointing predicts saved bytes, recomputed ops and lost gradients; a re-run with the marked calls really
checkpointed (probes/rerun/checkpoint.py) measures them (saved-tensor hooks, .grad, a trace of that run)."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.analysis.checkpointing import checkpoint_what_if
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.rerun import Rerunnable, verify_checkpoint


def _gpt2(n_layer: int = 4) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=n_layer, n_head=4, d_model=32, vocab=101, block_size=16)
    model = GPT2(cfg)
    return model, lambda: gpt2_loss(model, batch=2)


def _lora_frozen_embedding() -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    """Adapters inside blocks whose input comes from a frozen embedding: nothing entering block 0 requires grad."""
    model, loss = _gpt2()
    add_lora(model, targets=("c_attn",))
    return model, loss


def _blocks(rerun: Rerunnable, kind: str = "Block") -> list[str]:
    return [c["id"] for c in rerun.graph.calls if c["type"] == kind]


def _check(rerun: Rerunnable, marks: dict[str, str], unseen: int = 0) -> dict[str, object]:
    """``unseen``: bytes of checkpoint inputs the graph cannot show (they need no grad and no op saved them)."""
    result = verify_checkpoint(rerun, marks)
    measured, predicted = result["measured_bytes"], result["predicted_bytes"] + unseen
    if unseen:  # the verdict compares the prediction as made: the gap is this unseen input
        result = {**result, "agree": result["predicted_lost"] == result["actual_lost"]}
    assert abs(predicted - measured) <= 0.02 * measured, result
    assert result["predicted_lost"] == result["actual_lost"], result
    assert result["measured_recomputed"] in (-1, result["predicted_recomputed"]), result  # -1: not measurable
    if not checkpoint_what_if(rerun.graph, marks).inexact:  # else frozen layers on an unseen input re-run too
        assert result["predicted_recomputed_flops"] == result["measured_recomputed_flops"], result
    assert result["agree"], result
    return result


def test_no_marks_is_memory_held() -> None:
    model, loss_fn = _gpt2()
    with gv.capture(model) as cap:
        loss = loss_fn()
    g = gv.trace(loss, model=model, capture=cap)
    mem, plan = gv.memory_held(g), checkpoint_what_if(g, {})
    assert plan.before == plan.after == mem.activations
    assert {c: plan.per_call_before[c] for c in mem.per_call} == mem.per_call
    assert plan.recomputed_ops == 0 and plan.lost == []


@pytest.mark.parametrize("mode", ["non_reentrant", "reentrant"])
def test_gpt2_every_other_block_against_pytorch(mode: str) -> None:
    model, loss_fn = _gpt2()
    rerun = Rerunnable(loss_fn, model)
    blocks = _blocks(rerun)
    result = _check(rerun, {b: mode for b in blocks[::2]})
    assert result["measured_bytes"] < result["measured_before"]  # checkpointing saved memory for real
    assert result["frames"] == len(blocks[::2]) and result["rng_bytes"] == 5056 * len(blocks[::2])


def test_gpt2_random_marks_mixed_modes_and_nested_calls() -> None:
    model, loss_fn = _gpt2(n_layer=3)
    rerun = Rerunnable(loss_fn, model)
    calls = [c["id"] for c in rerun.graph.calls if c["size"] > 0]
    rng = random.Random(0)
    for _ in range(4):
        marks = {c: rng.choice(["non_reentrant", "reentrant"]) for c in rng.sample(calls, 3)}
        _check(rerun, marks)


def test_reentrant_over_frozen_embedding_loses_the_adapters_and_non_reentrant_does_not() -> None:
    model, loss_fn = _lora_frozen_embedding()
    rerun = Rerunnable(loss_fn, model)
    first, second = _blocks(rerun)[:2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns that no input requires grad: that is the point
        cut = _check(rerun, {first: "reentrant"})
        both = _check(rerun, {first: "reentrant", second: "reentrant"})
    assert cut["actual_lost"] == ["blocks.0.attn.c_attn.lora_A", "blocks.0.attn.c_attn.lora_B"]
    # block 1's only input comes out of the cut block 0: its adapters lose their gradient too
    assert {n.split(".")[1] for n in both["actual_lost"]} == {"0", "1"}  # type: ignore[attr-defined]
    # Block 0's input comes from the frozen embedding: it needs no grad and no op saves it (ln_1 is frozen
    # too), so the graph has no trace of it; the non-reentrant checkpoint keeps it (2 x 16 x 32 float32).
    kept = _check(rerun, {first: "non_reentrant", second: "non_reentrant"}, unseen=2 * 16 * 32 * 4)
    assert kept["actual_lost"] == []
    assert abs(kept["measured_bytes"] - kept["predicted_bytes"] - 4096) <= 64  # type: ignore[operator]
    plan = checkpoint_what_if(rerun.graph, {first: "reentrant"})
    assert plan.cut == [first] and "reentrant checkpoint of blocks.0" in plan.summary()


def test_hf_gpt2_peft_lora_both_modes() -> None:
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0, fan_in_fan_out=True)
    model = peft.get_peft_model(transformers.GPT2LMHeadModel(cfg), lora)
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    rerun = Rerunnable(lambda: model(input_ids=ids, labels=ids).loss, model)
    blocks = _blocks(rerun, "GPT2Block")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _check(rerun, {b: "non_reentrant" for b in blocks[::2]})["actual_lost"] == []
        lost = _check(rerun, {b: "reentrant" for b in blocks[::2]})["actual_lost"]
    assert lost and all(".h.0." in name for name in lost)  # type: ignore[attr-defined]


def test_verify_leaves_the_model_as_it_was() -> None:
    model, loss_fn = _gpt2(n_layer=2)
    rerun = Rerunnable(loss_fn, model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    verify_checkpoint(rerun, {"blocks.0": "non_reentrant", "blocks.1": "reentrant"})
    assert all("forward" not in vars(m) for m in model.modules())
    assert all(p.grad is None and torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_marks_are_checked_by_name() -> None:
    model, loss_fn = _gpt2(n_layer=2)
    with gv.capture(model) as cap:
        loss = loss_fn()
    g = gv.trace(loss, model=model, capture=cap)
    with pytest.raises(GradvizError, match="not a module call"):
        checkpoint_what_if(g, {"blocks.9": "reentrant"})
    with pytest.raises(GradvizError, match="'non_reentrant' or 'reentrant'"):
        checkpoint_what_if(g, {"blocks.0": "sometimes"})


def test_widget_marks_trait_and_verify_request() -> None:
    model, loss_fn = _gpt2(n_layer=2)
    w = gv.GraphWidget.from_fn(loss_fn, model=model)
    assert w.checkpoint_table["ops"]
    w.checkpoints = {"blocks.0": "non_reentrant"}
    assert w.checkpoint_what_if().after < w.checkpoint_what_if().before
    reply = w.answer({"id": 3, "kind": "verify", "body": {"question": "checkpoint"}})
    assert reply is not None and reply["ok"] and w.checkpoint_verified["agree"]
    with pytest.raises(GradvizError):
        w.checkpoints = {"nope": "reentrant"}


def test_lost_names_the_leaves_as_what_if_does_and_the_old_name_warns() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4)).sum()  # block 0's input needs no grad: a reentrant mark cuts its weights
    graph = gv.trace(loss, model=model, capture=cap)
    plan = checkpoint_what_if(graph, {"0": "reentrant"})
    same = graph.what_if(detach=plan.cut)
    assert (plan.lost, plan.lost_ids) == (same.lost, same.lost_ids) and plan.lost == ["0.bias", "0.weight"]
    with pytest.warns(DeprecationWarning, match=r"use \.lost"):
        assert plan.lost_names == plan.lost

"""Memory held for backward, estimated from trace-time metadata, against a real measurement.

The measurement runs the same forward under ``saved_tensors_hooks`` and counts the unique storages
autograd packs (what the graph really keeps alive); the estimate never unpacks a saved tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.analysis.memory import format_bytes, memory_held
from gradviz_nb.bugzoo.cases_memory import held_after_forward
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, MHAModel, ResNet18Like, TwiceCalled, add_lora, gpt2_loss
from gradviz_nb.widgets import page

Forward = Callable[[], torch.Tensor]


def _measure(forward: Forward) -> tuple[torch.Tensor, int, int]:
    """Run ``forward`` under packing hooks: (loss, unique activation bytes, unique parameter bytes)."""
    seen: dict[int, tuple[int, bool]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        base = t._base if t._base is not None else t
        held_anyway = isinstance(base, nn.Parameter) or (base.is_leaf and base.requires_grad)
        seen.setdefault(s.data_ptr(), (s.nbytes(), held_anyway))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    acts = sum(b for b, is_param in seen.values() if not is_param)
    return loss, acts, sum(b for b, is_param in seen.values() if is_param)


def _gpt2(lora: bool = False) -> tuple[nn.Module, Forward]:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    if lora:
        add_lora(model, freeze_base=False)
    return model, lambda: gpt2_loss(model, batch=2)  # type: ignore[arg-type]


def _simple(model: nn.Module, x: torch.Tensor) -> tuple[nn.Module, Forward]:
    return model, lambda: model(x).square().mean()


MODELS: dict[str, Callable[[], tuple[nn.Module, Forward]]] = {
    "mlp": lambda: _simple(MLP(), torch.randn(8, 4)),
    "twice_called": lambda: _simple(TwiceCalled(), torch.randn(8, 4)),
    "mha": lambda: _simple(MHAModel(), torch.randn(2, 5, 8)),
    "resnet": lambda: _simple(ResNet18Like(width=8), torch.randn(2, 3, 16, 16)),
    "gpt2": _gpt2,
    "gpt2_lora": lambda: _gpt2(lora=True),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_estimate_within_5_percent_of_measured(name: str) -> None:
    model, forward = MODELS[name]()
    _, measured_acts, measured_params = _measure(forward)
    with gv.capture(model) as cap:
        loss = forward()
    mem = memory_held(gv.trace(loss, model=model, capture=cap))
    print(f"\n{name}: estimate {mem.activations} B activations / {mem.parameters} B parameters; "
          f"measured {measured_acts} / {measured_params}")
    assert measured_acts > 0
    assert abs(mem.activations - measured_acts) <= 0.05 * measured_acts
    assert abs(mem.total - (measured_acts + measured_params)) <= 0.05 * (measured_acts + measured_params)
    assert sum(mem.per_node.values()) == mem.activations == mem.per_call[""]
    assert mem.packed == []


def test_sharing_is_counted_once() -> None:
    x = torch.randn(1000, requires_grad=True)
    h = x.exp()  # saves its result
    loss = (h * h).sum()  # saves h twice: one storage
    mem = memory_held(gv.trace(loss))
    assert mem.activations == 4000
    assert mem.parameters == 0  # exp saves its result, not x


def test_no_unpacking_after_backward_or_under_checkpoint() -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test(checkpoint="non_reentrant"))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    calls: list[Any] = []
    orig = model.blocks[0].forward
    model.blocks[0].forward = lambda *a: (calls.append(1), orig(*a))[1]  # type: ignore[method-assign]
    mem = memory_held(gv.trace(loss, model=model, capture=cap))
    assert calls == []  # tracing did not recompute any checkpointed block
    # each block's own activations are packed; what it still holds is its checkpoint's input and RNG state
    block_input = 1 * 16 * 32 * 4
    rng_state = torch.get_rng_state().numel()
    assert mem.packed and all(mem.per_call[f"blocks.{i}"] == block_input + rng_state for i in range(2))
    loss.backward()
    with pytest.raises(gv.GradvizError, match="retain_graph=True"):
        memory_held(gv.trace(loss, model=model))  # freed: says so instead of reporting 0 B
    assert calls == [1]  # the real backward did recompute


def test_checkpoint_moves_memory_out() -> None:
    totals = {}
    for mode in (None, "non_reentrant", "reentrant"):
        torch.manual_seed(0)
        model = GPT2(GPT2Config.small_test(checkpoint=mode))  # type: ignore[arg-type]
        with gv.capture(model) as cap:
            loss = gpt2_loss(model, batch=2)
        totals[mode] = memory_held(gv.trace(loss, model=model, capture=cap)).activations
    assert totals["non_reentrant"] < totals[None] / 2
    assert totals["reentrant"] < totals[None] / 2


def test_table_overlay_and_per_module_totals() -> None:
    model, forward = _gpt2()
    with gv.capture(model) as cap:
        loss = forward()
    g = gv.trace(loss, model=model, capture=cap)
    mem = memory_held(g)
    top = mem.top(5)
    assert len(top) == 5 and [h.bytes for h in top] == sorted((h.bytes for h in top), reverse=True)
    assert top[0].bytes == max(mem.per_node.values())
    assert mem.per_call["blocks.0"] == mem.per_call["blocks.0.attn"] + mem.per_call["blocks.0.mlp"] + sum(
        b for n, b in mem.per_node.items() if g.nx.nodes[n]["call"] in ("blocks.0", "blocks.0.ln_1", "blocks.0.ln_2")
    )
    text = mem.table(5)
    assert top[0].op in text and "saved for backward" in text
    overlay = page.overlay(mem, encoding="color")
    assert overlay["unit"] == "B" and overlay["encoding"] == "color" and overlay["scale"] == "log"
    assert overlay["values"]["call:blocks.0"] == mem.per_call["blocks.0"]
    widget = gv.GraphWidget(g)
    widget.overlay = overlay  # the trait accepts it as is
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(12) == "12 B"


# -- checkpointing: what PyTorch really keeps ----------------------------------------------------------


def _gpt2_12(mode: str | None) -> tuple[GPT2, Forward]:
    """12 blocks, all checkpointed in ``mode``; small enough for about a second on CPU."""
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=12, n_head=4, d_model=32, vocab=101, block_size=16, checkpoint=mode)  # type: ignore[arg-type]
    model = GPT2(cfg)
    return model, lambda: gpt2_loss(model, batch=2, seq=16)


def _reported(mode: str | None) -> Any:
    model, forward = _gpt2_12(mode)
    with gv.capture(model) as cap:
        loss = forward()
    return memory_held(gv.trace(loss, model=model, capture=cap))


def test_truth_measure_sees_closures_and_not_temporaries() -> None:
    """The measuring stick itself: a tensor kept in a closure counts, a freed temporary does not."""
    x = torch.randn(1000, requires_grad=True)  # exists before the forward: not counted
    kept: list[torch.Tensor] = []

    def forward() -> torch.Tensor:
        h = x.exp()  # saves its result: 4000 B
        (x * 2).sum()  # a temporary, freed
        kept.append(torch.zeros(500))  # 2000 B alive through a closure, like a checkpoint's RNG state
        return h.sum()

    _, held = held_after_forward(forward)
    assert held == 4000 + 2000


def test_checkpointed_gpt2_within_2_percent_of_what_pytorch_keeps() -> None:
    truth = {mode: held_after_forward(_gpt2_12(mode)[1])[1] for mode in (None, "non_reentrant", "reentrant")}
    reported = {mode: _reported(mode) for mode in truth}
    for mode, mem in reported.items():
        print(f"\n{mode}: reported {mem.activations} B, PyTorch keeps {truth[mode]} B")
        assert abs(mem.activations - truth[mode]) <= 0.02 * truth[mode]
    for mode in ("non_reentrant", "reentrant"):
        mem = reported[mode]
        # what the checkpoints keep is not a rounding error: without it the figure is far off
        assert mem.checkpoints == 12 and mem.checkpoint_bytes > 0.5 * truth[mode]
        ratio_truth, ratio = truth[None] / truth[mode], reported[None].activations / mem.activations
        assert abs(ratio - ratio_truth) <= 0.02 * ratio_truth
        assert mem.per_call[""] == mem.activations == sum(mem.per_node.values())
    assert reported[None].checkpoints == 0 and reported[None].checkpoint_bytes == 0


def test_custom_function_ctx_and_saved_lists_are_counted() -> None:
    class Stash(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.scale = torch.full((250,), 2.0)  # on the ctx, not save_for_backward: alive all the same
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * ctx.scale[0]

    x = torch.randn(10, 20, requires_grad=True)

    def forward() -> torch.Tensor:
        i, j = torch.arange(5), torch.arange(5) * 2  # x[i, j] saves both index tensors
        return Stash.apply(x[i, j]).sum()  # type: ignore[no-any-return]

    _, truth = held_after_forward(forward)
    mem = memory_held(gv.trace(forward()))
    assert truth == 1000 + 2 * 40 and mem.activations == truth


def _flash_cpu_flops() -> dict[Any, Any]:
    """FlopCounterMode does not count the CPU flash-attention kernel; count it as PyTorch counts SDPA."""
    from torch.utils.flop_counter import sdpa_flop_count

    def flops(q: Any, k: Any, v: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return int(sdpa_flop_count(q, k, v))

    return {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: flops}


def test_recompute_cost_matches_what_backward_reruns() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    measured = {}
    for mode in (None, "non_reentrant"):
        model, forward = _gpt2_12(mode)
        with FlopCounterMode(display=False, custom_mapping=_flash_cpu_flops()) as fwd:
            loss = forward()
        mem = memory_held(gv.trace(loss, model=model))
        before = torch.autograd._get_sequence_nr()  # every node created in backward is a recomputed op
        with FlopCounterMode(display=False, custom_mapping=_flash_cpu_flops()) as bwd:
            loss.backward()
        measured[mode] = (mem, torch.autograd._get_sequence_nr() - before, fwd.get_total_flops(),
                          bwd.get_total_flops())
    plain, ckpt = measured[None], measured["non_reentrant"]
    assert plain[0].recomputed_ops == plain[1] == 0 and plain[0].recompute_share == 0
    mem, recreated, forward_flops, backward_flops = ckpt
    assert mem.recomputed_ops == recreated > 0
    recompute_flops = backward_flops - plain[3]  # the same backward, plus the recomputation
    assert abs(mem.forward_flops - forward_flops) <= 0.02 * forward_flops
    assert abs(mem.recomputed_flops - recompute_flops) <= 0.02 * recompute_flops
    assert mem.share_basis == "FLOPs"
    assert abs(mem.recompute_share - recompute_flops / forward_flops) <= 0.02
    text = mem.table(3)
    assert f"re-runs {mem.recomputed_ops} of {mem.forward_ops} forward ops" in text
    assert f"{mem.recompute_share:.0%} of forward FLOPs, estimated from" in text


def test_reentrant_recompute_is_said_to_be_hidden() -> None:
    mem = _reported("reentrant")
    assert len(mem.opaque) == 12 and mem.recomputed_ops == 0
    assert all(mem._graph.nx.nodes[n]["op"] == "CheckpointFunctionBackward" for n in mem.opaque)
    text = mem.summary()
    assert "12 reentrant checkpointed calls" in text and "blocks.0, blocks.1, blocks.2" in text
    assert "use_reentrant=False" in text


def test_share_of_ops_without_matmuls() -> None:
    from torch.utils.checkpoint import checkpoint

    x = torch.randn(100, requires_grad=True)
    loss = checkpoint(lambda a: a.sin().exp(), x, use_reentrant=False).sum()  # sin, exp saved and packed
    mem = memory_held(gv.trace(loss))
    before = torch.autograd._get_sequence_nr()
    loss.backward()
    assert mem.recomputed_ops == torch.autograd._get_sequence_nr() - before == 2
    assert mem.forward_ops == 3 and mem.forward_flops == 0 and mem.share_basis == "ops"
    assert mem.recompute_share == pytest.approx(2 / 3)
    assert "(67% of forward ops: no matmul-like op" in mem.summary()


@pytest.mark.parametrize("mode", [None, "non_reentrant", "reentrant"])
def test_consumed_graph_raises_and_retain_graph_keeps_it(mode: str | None) -> None:
    model, forward = _gpt2_12(mode)
    loss = forward()
    before = memory_held(gv.trace(loss, model=model)).activations
    loss.backward(retain_graph=True)
    assert memory_held(gv.trace(loss, model=model)).activations == before  # nothing freed yet
    loss.backward()
    with pytest.raises(gv.GradvizError) as err:
        memory_held(gv.trace(loss, model=model))
    assert "before calling backward" in str(err.value) and "retain_graph=True" in str(err.value)


def test_tensor_is_traced_and_other_input_is_refused() -> None:
    model, forward = _gpt2_12("non_reentrant")
    loss = forward()
    assert memory_held(loss).activations == memory_held(gv.trace(loss)).activations > 0
    with pytest.raises(gv.GradvizError, match=r"gv.memory_held\(gv.trace\(loss\)\)"):
        memory_held(model)

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
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, MHAModel, ResNet18Like, TwiceCalled, add_lora, gpt2_loss

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
    assert mem.packed and all(mem.per_call.get(f"blocks.{i}", 0) == 0 for i in range(2))
    loss.backward()
    after = memory_held(gv.trace(loss, model=model))
    assert after.activations == 0 and after.unknown  # freed: nothing to read, and nothing raised


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
    overlay = mem.to_overlay("color")
    assert overlay["unit"] == "B" and overlay["encoding"] == "color" and overlay["scale"] == "log"
    assert overlay["values"]["call:blocks.0"] == mem.per_call["blocks.0"]
    widget = gv.GraphWidget(g)
    widget.overlay = overlay  # the trait accepts it as is
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(12) == "12 B"

"""Traced graphs the tests and fixture scripts share (one builder, so they compare the same graphs)."""

from __future__ import annotations

import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss


def traced_gpt2(checkpoint: str | None = None, lora: bool = False, freeze_base: bool = False) -> gv.AutogradGraph:
    """GPT-2 ``small_test`` (seed 0), optionally checkpointed or with LoRA adapters, traced with capture."""
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test(checkpoint=checkpoint))  # type: ignore[arg-type]
    if lora:
        add_lora(model, freeze_base=freeze_base)
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    return gv.trace(loss, model=model, capture=cap)

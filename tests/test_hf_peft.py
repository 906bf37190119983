"""Hugging Face transformers + peft LoRA: a tiny randomly initialised GPT-2 (no downloads).

Capture and trace must cope with keyword arguments and ModelOutput results; gradient_flow must see
every adapter learning with the base frozen, and name the one adapter whose path is cut.
"""

from __future__ import annotations

import os

import pytest
import torch

import gradviz_nb as gv

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def _lora_gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0, fan_in_fan_out=True)
    return peft.get_peft_model(model, lora)


def _batch() -> torch.Tensor:
    return torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))


def test_capture_and_trace_with_kwargs_and_model_output() -> None:
    model = _lora_gpt2()
    ids = _batch()
    with gv.capture(model) as cap:
        out = model(input_ids=ids, labels=ids)  # keyword arguments in, a ModelOutput out
    assert isinstance(out, transformers.modeling_outputs.ModelOutput)
    g = gv.trace(out.loss, model=model, capture=cap)
    paths = {c["path"] for c in g.calls}
    assert "base_model.model.transformer.h.0" in paths and "base_model.model.transformer.h.1.attn" in paths
    adapters = sorted(n for n in g.leaves() if "lora_" in n)
    assert len(adapters) == 4  # lora_A and lora_B of both blocks' c_attn
    assert all(g.nx.nodes[n]["call"] for n in g.nx if g.nx.nodes[n]["kind"] == "op")  # every op in a box


def test_all_adapters_learn_and_base_is_frozen() -> None:
    model = _lora_gpt2()
    ids = _batch()
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    flow = gv.gradient_flow(model)
    assert flow.flags == [], flow.summary()
    adapters = [p for p in flow.params if "lora_" in p.name]
    assert len(adapters) == 4 and all(p.requires_grad and p.has_grad for p in adapters)
    assert all(p.norm > 0 for p in adapters if "lora_B" in p.name)  # lora_A is 0 at init (B = 0): expected
    assert all(not p.requires_grad for p in flow.params if "lora_" not in p.name)


def test_detached_adapter_is_flagged_dead_and_named() -> None:
    model = _lora_gpt2()
    target = model.base_model.model.transformer.h[1].attn.c_attn
    lora_b = target.lora_B["default"]
    original = lora_b.forward
    lora_b.forward = lambda x: original(x).detach()  # the injected bug: this adapter's output is cut off
    ids = _batch()
    with gv.capture(model) as cap:
        out = model(input_ids=ids, labels=ids)
    graph = gv.trace(out.loss, model=model, capture=cap)
    out.loss.backward()
    flow = gv.gradient_flow(model, graph=graph, capture=cap)
    dead = [f for f in flow.flags if f.kind == "dead-adapter"]
    assert [f.target for f in dead] == ["base_model.model.transformer.h.1.attn.c_attn"], flow.summary()
    assert "detach()" in dead[0].reason
    assert {f.kind for f in flow.flags} == {"dead-adapter", "no-grad"}
    assert not flow.flags_for("base_model.model.transformer.h.0")
    overlay = gv.analysis.flow.overlay(flow, graph)
    assert not any(gv_name in graph.leaves() for gv_name in dead[0].params)  # cut off: not in the graph
    assert overlay["values"]

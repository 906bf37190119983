"""Hugging Face transformers + peft LoRA: a tiny randomly initialised GPT-2 (no downloads).

Capture and trace must cope with keyword arguments and ModelOutput results; gradient_flow must see
every adapter learning with the base frozen, and name the one adapter whose path is cut.
"""

from __future__ import annotations

import os

import networkx as nx
import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.widgets import page

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
    overlay = page.overlay(flow, graph=graph)
    assert not any(gv_name in graph.leaves() for gv_name in dead[0].params)  # cut off: not in the graph
    assert overlay["values"]


def _gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def _traced(model: torch.nn.Module) -> tuple[gv.AutogradGraph, torch.Tensor]:
    ids = _batch()
    with gv.capture(model) as cap:
        out = model(input_ids=ids, labels=ids)
    return gv.trace(out.loss, model=model, capture=cap), out.loss


@pytest.mark.parametrize("freeze_base", [False, True])
def test_lora_diff_matches_through_peft_wrapper(freeze_base: bool) -> None:
    model = _gpt2()
    before, _ = _traced(model)
    names_of = {}  # the plain model's parameter objects -> their names (peft wraps these very tensors)
    for name, p in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(p), []).append(name)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0, fan_in_fan_out=True)
    wrapped = peft.get_peft_model(model, lora)
    if not freeze_base:
        for p in wrapped.parameters():
            p.requires_grad_(True)
    after, loss = _traced(wrapped)
    loss.backward()
    # PyTorch's truth, by tensor identity: the new parameters, and which old ones .grad reaches now
    new = sorted(n for n, p in wrapped.named_parameters() if id(p) not in names_of)
    lost = sorted(n for p in wrapped.parameters() if id(p) in names_of and p.grad is None for n in names_of[id(p)])
    assert len(new) == 4 and all("lora_" in n for n in new)
    assert all(p.grad is not None for n, p in wrapped.named_parameters() if n in new)

    d = gv.diff(before, after)
    assert d.prefixes == ("", "base_model.model")
    assert d.added_leaves == new and d.gained == new
    assert d.lost == lost and d.removed_leaves == lost and d.hidden == d.unsure == []
    assert d.renamed_modules["transformer.h.0.attn.c_attn"] == "transformer.h.0.attn.c_attn.base_layer"
    # Nothing of the base is added: new nodes are the adapters' and the LoRA layer's own sum and scaling.
    added_modules = {after.nx.nodes[n]["module"] for n in d.added if after.nx.nodes[n]["kind"] == "op"}
    assert added_modules and all(".attn.c_attn" in m for m in added_modules)
    assert all(after.nx.nodes[n]["kind"] == "leaf" or "c_attn" in after.nx.nodes[n]["module"] for n in d.added)
    if not freeze_base:
        assert lost == [] and d.removed == [] and len(d.same) > 0.8 * len(before)
        assert d.changed and all("c_attn · AddBackward0" in c.why for c in d.changed)  # fed by the adapter sum
    else:
        # PyTorch records an op only when an input requires grad: with the base frozen, only ops after the
        # first adapter (added to blocks.0's c_attn output) exist. So exactly the frozen leaves and the ops
        # that are not downstream of that output must be removed; every other op of the base is matched.
        g, first = before.nx, "transformer.h.0.attn.c_attn"
        (out,) = [n for n, m in g.nodes(data="module") if m == first and g.nodes[n]["kind"] == "op"
                  and all(g.nodes[v]["module"] != first for v in g.successors(n))]
        downstream = nx.descendants(g, out)
        for n, kind in g.nodes(data="kind"):
            assert (n in d.removed) == (kind == "leaf" or (kind == "op" and n not in downstream)), n
        assert "LOST their gradient path (29" in d.summary()
        merged = d.merged()  # removed nodes are drawn in the wrapped model's boxes, not in copies of them
        after_calls = {c["id"] for c in after.calls}
        merged_calls = {c["id"]: c for c in merged.calls}
        assert {merged.nx.nodes[n]["call"] for n in merged.nx if n.startswith("was:")} <= set(merged_calls) | {""}
        extra = set(merged_calls) - after_calls  # boxes only the plain model's graph had (frozen embeddings)
        assert extra and all("base_model.model." + c not in after_calls for c in extra)
        assert all(merged_calls[c]["parent"] in merged_calls or not merged_calls[c]["parent"] for c in extra)
        assert merged_calls["transformer.wte"]["parent"] == "base_model.model.transformer"
    assert "matched through a wrapper: after's paths start with 'base_model.model.'" in d.summary()

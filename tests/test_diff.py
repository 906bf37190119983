"""gv.diff: LoRA adapters are exactly the added leaves; checkpointing is reported as what it does."""

from __future__ import annotations

import json

import torch
from graphs import traced_gpt2

import gradviz_nb as gv
from gradviz_nb.demo_models import MLP

_gpt2 = traced_gpt2


def test_identical_graphs_are_all_same() -> None:
    d = gv.diff(_gpt2(), _gpt2())
    assert not (d.added or d.removed or d.changed or d.added_leaves or d.gained or d.lost)
    assert len(d.same) == len(d.before)
    assert set(d.to_payload()["status"].values()) == {"same"}


def test_lora_adapters_are_exactly_the_added_leaves() -> None:
    before, after = _gpt2(), _gpt2(lora=True)
    d = gv.diff(before, after)
    lora = sorted(n for n in after.leaves() if "lora_" in n)
    assert len(lora) == 12
    assert d.added_leaves == lora and d.gained == lora
    assert d.removed_leaves == [] and d.lost == [] and d.hidden == []
    assert d.renamed_modules["blocks.0.attn.c_attn"] == "blocks.0.attn.c_attn.base"
    added_ops = {after.nx.nodes[n]["op"] for n in d.added if after.nx.nodes[n]["kind"] == "op"}
    assert "MmBackward0" in added_ops and d.removed == []
    # Every changed node now takes its input from an adapter's sum.
    assert d.changed and all("AddBackward0" in c.why for c in d.changed)
    assert "leaves added (12)" in d.summary()


def test_removing_adapters_is_the_mirror_image() -> None:
    before, after = _gpt2(lora=True), _gpt2()
    d = gv.diff(before, after)
    lora = sorted(n for n in before.leaves() if "lora_" in n)
    assert d.removed_leaves == lora and d.lost == lora  # the base weights are matched, not added/removed
    assert d.added_leaves == [] and d.gained == [] and d.added == []
    assert "modules unwrapped: blocks." in d.summary()


def test_frozen_base_loses_gradient_path() -> None:
    d = gv.diff(_gpt2(), _gpt2(lora=True, freeze_base=True))
    assert d.added_leaves == d.gained and all("lora_" in n for n in d.added_leaves)
    assert "blocks.0.attn.c_attn.weight" in d.lost and "wte.weight" in d.lost
    assert "LOST their gradient path" in d.summary()


def test_non_reentrant_checkpoint_same_structure_memory_moved_out() -> None:
    d = gv.diff(_gpt2(), _gpt2("non_reentrant"))
    assert not (d.added or d.removed or d.changed)
    before, after = d.memory_before.activations, d.memory_after.activations
    assert after < before / 2
    moved = d.memory_moved()
    assert moved[""] == (before, after) and moved["blocks.0"][1] == 0 < moved["blocks.0"][0]
    payload = d.to_payload()
    assert payload["memory_total"] == [before, after] and payload["memory"]
    assert "recomputed during backward" in d.summary()


def test_reentrant_checkpoint_collapses_blocks_and_hides_their_leaves() -> None:
    before, after = _gpt2(), _gpt2("reentrant")
    d = gv.diff(before, after)
    assert [after.nx.nodes[n]["op"] for n in d.added] == ["CheckpointFunctionBackward"] * 2
    block_ops = [n for n, m in before.nx.nodes(data="module") if m.startswith("blocks.")
                 and before.nx.nodes[n]["kind"] == "op"]
    assert set(block_ops) <= set(d.removed)
    assert d.lost == [] and d.hidden == d.removed_leaves and "blocks.0.attn.c_attn.weight" in d.hidden
    assert "CheckpointFunctionBackward" in d.summary()
    assert d.memory_after.activations < d.memory_before.activations


def test_shape_change_is_changed_and_merged_view_draws_removed_nodes() -> None:
    def g(width: int) -> gv.AutogradGraph:
        torch.manual_seed(0)
        model = MLP(d_hidden=width)
        with gv.capture(model) as cap:
            loss = model(torch.randn(2, 4)).relu().sum()
        return gv.trace(loss, model=model, capture=cap)

    d = gv.diff(g(8), g(16))
    assert any("shape [2, 8] -> [2, 16]" in c.why for c in d.changed)
    merged = d.merged()
    payload = d.to_payload()
    json.dumps(payload)
    assert set(payload["status"]) == set(merged.nx.nodes)
    widget = gv.GraphWidget(merged, diff=payload)
    assert widget.diff["status"] == payload["status"]


def test_removed_nodes_keep_their_edges_and_boxes() -> None:
    before, after = _gpt2(), _gpt2("reentrant")
    d = gv.diff(before, after)
    merged = d.merged()
    removed = [n for n in merged.nx if n.startswith("was:")]
    assert len(removed) == len(d.removed)
    assert {c["id"] for c in merged.calls} >= {c["id"] for c in before.calls}
    assert all(merged.nx.degree(n) > 0 for n in removed)
    assert d.to_payload()["status"][removed[0]] == "removed"

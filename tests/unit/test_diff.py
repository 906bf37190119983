"""gv.diff: LoRA adapters are exactly the added leaves; checkpointing is reported as what it does."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import pytest
import torch
from graphs import traced_gpt2

import gradviz_nb as gv
from gradviz_nb.demo_models import MLP
from gradviz_nb.widgets import page

_gpt2 = traced_gpt2


def test_identical_graphs_are_all_same() -> None:
    d = gv.diff(_gpt2(), _gpt2())
    assert not (d.added or d.removed or d.changed or d.added_leaves or d.gained or d.lost)
    assert len(d.same) == len(d.before)
    assert set(page.diff(d)["status"].values()) == {"same"}


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
    # A non-reentrant checkpoint still keeps its block's input (1 x 16 x 32 float32) and the CPU RNG state
    # it will restore for the recomputation alive: that, and nothing else, is what blocks.0 holds now.
    kept = 16 * 32 * 4 + torch.get_rng_state().numel()
    assert moved[""] == (before, after) and moved["blocks.0"][1] == kept < moved["blocks.0"][0]
    payload = page.diff(d)
    assert payload["memory_total"] == (before, after) and payload["memory"]
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
    payload = page.diff(d)
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
    assert page.diff(d)["status"][removed[0]] == "removed"


# -- reentrant checkpoints: the diff's gradient claims against PyTorch's .grad ---------------------------

class _Branches(torch.nn.Module):
    """Two branches into one head; ``ckpt`` runs ``a`` (on the raw input, which needs no grad) and ``b`` (on
    an embedding's output) under a reentrant checkpoint."""

    def __init__(self, ckpt: bool, wrap: str = "module") -> None:
        super().__init__()
        self.a, self.emb, self.b, self.head = (torch.nn.Linear(4, 4) for _ in range(4))
        self.ckpt, self.wrap = ckpt, wrap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        if not self.ckpt:
            return self.head(self.a(x) + self.b(self.emb(x))).sum()
        fb = self.b if self.wrap == "module" else _plain_b
        ha = checkpoint(self.a, x, use_reentrant=True)
        hb = checkpoint(fb, self.emb(x), use_reentrant=True)
        return self.head(ha + hb).sum()


_B_HOLDER: list[torch.nn.Module] = []


def _plain_b(x: torch.Tensor) -> torch.Tensor:
    return _B_HOLDER[-1](x)  # reaches its module through a global: nothing on the checkpoint node names it


def _traced_and_truth(ckpt: bool, wrap: str = "module") -> tuple[gv.AutogradGraph, set[str]]:
    """The traced graph and PyTorch's truth: the parameters whose .grad is set by a real backward."""
    torch.manual_seed(0)
    model = _Branches(ckpt, wrap)
    _B_HOLDER.append(model.b)
    with gv.capture(model) as cap, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = model(torch.randn(3, 4))
    assert any("None of the inputs have requires_grad=True" in str(w.message) for w in caught) == ckpt
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    return graph, {n for n, p in model.named_parameters() if p.grad is not None}


def test_checkpoint_without_grad_input_is_lost_not_hidden() -> None:
    before, had = _traced_and_truth(False)
    after, has = _traced_and_truth(True)
    assert had - has == {"a.weight", "a.bias"}  # PyTorch: .grad is None for the first block only
    d = gv.diff(before, after)
    assert set(d.lost) == had - has
    hidden_truth = {n for n in has if n not in after.leaves()}
    assert set(d.hidden) == hidden_truth == {"b.weight", "b.bias"}
    assert d.gained == [] and d.unsure == []
    summary = d.summary()
    assert "LOST their gradient path (2, .grad stays None): a.bias, a.weight" in summary
    assert "2 leaves are now inside CheckpointFunctionBackward" in summary
    back = gv.diff(after, before)  # taking the checkpoints out: `a` gets its gradient back, `b` had it all along
    assert set(back.gained) == had - has and back.lost == [] and back.hidden == []


def test_checkpoint_of_an_uninspectable_function_claims_nothing() -> None:
    before, had = _traced_and_truth(False)
    after, has = _traced_and_truth(True, wrap="global")
    d = gv.diff(before, after)
    # The opaque node might hold any vanished leaf: `b` (PyTorch gives it .grad) or `a` (it does not).
    # Neither is claimed; both are named as unknown.
    assert had - has == {"a.weight", "a.bias"} and {"b.weight", "b.bias"} <= has
    assert set(d.unsure) == {"a.weight", "a.bias", "b.weight", "b.bias"}
    assert d.lost == d.hidden == d.gained == []
    assert "4 leaves vanished behind a CheckpointFunctionBackward" in d.summary()


# -- matching through whole-model wrappers --------------------------------------------------------------

def _mlp_graph(model: torch.nn.Module) -> gv.AutogradGraph:
    torch.manual_seed(1)
    x = torch.randn(5, 4)
    with gv.capture(model) as cap:
        loss = model(x).pow(2).sum()
    return gv.trace(loss, model=model, capture=cap)


def _assert_all_same(d: gv.GraphDiff) -> None:
    assert not (d.added or d.removed or d.changed or d.added_leaves or d.removed_leaves or d.gained or d.lost)
    assert len(d.same) == len(d.before) == len(d.after)


@pytest.fixture
def one_process_group() -> Iterator[None]:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed unavailable or already initialised")
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_prefix_is_matched(one_process_group: None) -> None:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    plain = MLP()
    before = _mlp_graph(plain)
    ddp = DistributedDataParallel(plain)
    after = _mlp_graph(ddp)
    assert set(after.leaves()) == {f"module.{n}" for n in before.leaves()}
    d = gv.diff(before, after)
    _assert_all_same(d)
    assert d.prefixes == ("", "module") and "after's paths start with 'module.'" in d.summary()
    _assert_all_same(gv.diff(after, before))


@pytest.mark.parametrize("use_orig_params", [True, False])
def test_fsdp_wrapped_names_and_flat_parameters_are_matched(one_process_group: None, use_orig_params: bool) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.manual_seed(0)
    plain = MLP()
    before = _mlp_graph(plain)
    fsdp = FullyShardedDataParallel(plain, device_id=torch.device("cpu"), use_orig_params=use_orig_params,
                                    auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}))
    after = _mlp_graph(fsdp)
    torch.manual_seed(1)
    fsdp(torch.randn(5, 4)).pow(2).sum().backward()
    assert all(p.grad is not None for p in fsdp.parameters())  # PyTorch's truth: nothing lost
    d = gv.diff(before, after)
    # Every parameter still gets its gradient (through the flat parameter FSDP accumulates into)
    assert d.lost == [] and d.removed_leaves == [] and d.unsure == []
    assert d.wrapper_segments == ["_fsdp_wrapped_module"]
    flat_ops = {after.nx.nodes[n]["op"] for n in d.added if after.nx.nodes[n]["kind"] == "op"}
    assert flat_ops <= {"ViewBackward0", "SplitWithSizesBackward0"}  # FSDP's unflattening, nothing else
    matched = dict(d.same) | {c.before: c.after for c in d.changed}
    for module in ("fc1", "fc2"):  # each layer's matmul is matched to the same layer's inside the wrappers
        (mm,) = [n for n, m in before.nx.nodes(data="module") if m == module and "Addmm" in before.nx.nodes[n]["op"]]
        assert after.nx.nodes[matched[mm]]["op"] == "AddmmBackward0"
        assert after.nx.nodes[matched[mm]]["module"] == f"_fsdp_wrapped_module.{module}._fsdp_wrapped_module"


def test_checkpoint_wrapper_segment_is_matched() -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    torch.manual_seed(0)
    plain = MLP()
    before = _mlp_graph(plain)
    plain.fc1 = checkpoint_wrapper(plain.fc1)  # type: ignore[assignment]
    after = _mlp_graph(plain)
    assert "fc1._checkpoint_wrapped_module.weight" in after.leaves()
    d = gv.diff(before, after)
    _assert_all_same(d)
    assert d.wrapper_segments == ["_checkpoint_wrapped_module"]


def test_torch_compile_orig_mod_is_matched() -> None:
    torch.manual_seed(0)
    plain = MLP()
    before = _mlp_graph(plain)
    compiled = torch.compile(plain, backend="eager")  # dynamo only (fast): an eager graph under _orig_mod
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            after = _mlp_graph(compiled)  # type: ignore[arg-type]
    finally:
        torch._dynamo.reset()
    assert set(after.leaves()) == set(before.leaves())  # trace names leaves without torch.compile's _orig_mod.
    d = gv.diff(before, after)
    assert not (d.added_leaves or d.removed_leaves or d.gained or d.lost)
    # Dynamo traces capture's module hooks away (they must not split a compiled graph): the same ops, at top level.
    assert sorted(after.nx.nodes[n]["op"] for n in d.added) == sorted(before.nx.nodes[n]["op"] for n in d.removed)
    assert {after.nx.nodes[n]["module"] for n in d.added} == {""}


def test_a_prefix_is_not_invented_for_nested_same_names() -> None:
    class Nest(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.Linear(4, 4)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x)

    torch.manual_seed(0)
    g = _mlp_graph(Nest())
    d = gv.diff(g, g)
    assert d.prefixes == ("", "") and len(d.same) == len(g)


def test_diff_of_things_that_are_not_graphs_says_what_to_pass() -> None:
    torch.manual_seed(0)
    model = MLP()
    loss = model(torch.randn(2, 4)).sum()
    with pytest.raises(gv.GradvizError, match=r"before is a Tensor: trace each loss first.*gv\.trace\(loss_a"):
        gv.diff(loss, loss)  # type: ignore[arg-type]
    loss.backward()
    flow = gv.gradient_flow(model)
    with pytest.raises(gv.GradvizError, match="GradientFlow holds gradient statistics, not a graph"):
        gv.diff(flow, flow)  # type: ignore[arg-type]
    rec = gv.record_backward(model(torch.randn(2, 4)).sum(), model=model)
    with pytest.raises(gv.GradvizError, match=r"after is a BackwardRecording: pass its \.graph"):
        gv.diff(rec.graph, rec)  # type: ignore[arg-type]


def test_diff_of_graphs_traced_after_backward_still_works() -> None:
    """Memory cannot be read once backward freed it; the diff says so instead of failing or claiming 0 B."""
    from torch import nn

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    first = m(torch.randn(2, 4)).sum()
    first.backward()
    second = m(torch.randn(2, 4)).relu().sum()
    second.backward()
    d = gv.diff(gv.trace(first, model=m), gv.trace(second, model=m))
    assert d.memory_before is None and d.memory_moved() == {}
    assert "not compared" in d.summary() and len(d.added) == 1
    assert page.diff(d)["memory"] == {}

"""Verified what-if: GraphWidget.from_fn re-runs PyTorch with the toggles and compares with the prediction."""

from __future__ import annotations

import random

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss


def two_layer() -> tuple[gv.GraphWidget, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    x = torch.randn(5, 4)
    params = {"W1": torch.randn(4, 8, requires_grad=True), "W2": torch.randn(8, 3, requires_grad=True)}
    w = gv.GraphWidget.from_fn(lambda: (torch.relu(x @ params["W1"]) @ params["W2"]).sum(), names=params)
    return w, params


def test_two_layer_exercise_verified() -> None:
    w, _ = two_layer()
    relu = next(n for n, d in w.graph.nx.nodes(data=True) if d["op"] == "ReluBackward0")
    w.toggles = {"detach": [f"{relu}:0"], "freeze": []}
    assert w.what_if().lost == ["W1"]
    result = w.verify()
    assert result["agree"] and result["actual_lost"] == ["W1"] and result["unverifiable"] == []
    assert result["complete"] and result["checked_lost"] == result["predicted_lost"] == ["W1"]
    assert w.verified["toggles"] == {"detach": [f"{relu}:0"], "freeze": []}


def test_page_message_triggers_verification() -> None:
    w, _ = two_layer()
    w.toggles = {"detach": [], "freeze": [w.graph.find("W2")]}
    sent: list[object] = []
    w.send = sent.append  # type: ignore[method-assign]
    w._on_page_message(w, {"id": 3, "kind": "verify", "body": {}}, [])
    assert w.verified["agree"] and w.verified["actual_lost"] == ["W2"]
    assert sent == [{"id": 3, "kind": "reply", "ok": True, "body": {}}]  # sent once the re-run finished


def snapshot(model: nn.Module) -> list[object]:
    return [(n, p.requires_grad, p.grad) for n, p in model.named_parameters()] + [
        (m.training, len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks)) for m in model.modules()
    ]


def test_gpt2_module_toggles_verified_and_model_untouched() -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    gpt2_loss(model).backward()  # the user has gradients already: they must survive verification
    model.blocks[1].mlp.requires_grad_(False)
    model.eval()
    before = snapshot(model)
    grads = {n: p.grad for n, p in model.named_parameters()}
    w = gv.GraphWidget.from_fn(lambda: gpt2_loss(model), model=model)
    assert w.can_verify
    for toggles in (
        {"detach": ["call:blocks.1"], "freeze": []},
        {"detach": [], "freeze": ["call:blocks.0"]},
        {"detach": ["call:blocks.0.attn"], "freeze": ["call:ln_f"]},
    ):
        w.toggles = toggles
        result = w.verify()
        assert result["agree"], (toggles, result)
        assert result["predicted_lost"] == sorted(w.what_if().lost), toggles
    assert snapshot(model) == before
    assert all(p.grad is grads[n] for n, p in model.named_parameters())  # the very same tensors


def test_random_node_detaches_agree_with_pytorch() -> None:
    torch.manual_seed(1)
    model = GPT2(GPT2Config.small_test())
    w = gv.GraphWidget.from_fn(lambda: gpt2_loss(model), model=model)
    ops = [n for n, d in w.graph.nx.nodes(data=True) if d["kind"] == "op"]
    leaves = [n for n, d in w.graph.nx.nodes(data=True) if d["kind"] == "leaf"]
    rng = random.Random(0)
    checked = 0
    for _ in range(12):
        w.toggles = {"detach": rng.sample(ops, 3), "freeze": rng.sample(leaves, 2)}
        result = w.verify()
        assert result["agree"], (w.toggles, result)
        checked += result["unverifiable"] == []
    assert checked >= 1


def test_detaches_inside_checkpointed_blocks_are_not_rerun() -> None:
    # backward recomputes a checkpointed block without the detach: the re-run would not be the same program
    model = GPT2(GPT2Config.small_test("non_reentrant"))
    w = gv.GraphWidget.from_fn(lambda: gpt2_loss(model), model=model)
    inside = next(n for n, d in w.graph.nx.nodes(data=True) if d["call"] == "blocks.0.ln_2")
    w.toggles = {"detach": [f"{inside}:0"], "freeze": ["call:blocks.1"]}
    result = w.verify()
    assert result["agree"] and not result["complete"], result
    [why] = result["unverifiable"]
    op = w.graph.nx.nodes[inside]["op"]
    assert why.startswith(f"the detach of the {op} output in blocks.0.ln_2 (LayerNorm) was not replayed"), why
    assert "checkpointed" in why and inside not in why  # the user's names, never the node id
    assert result["actual_lost"] == sorted(n for n in w.graph.leaves() if n.startswith("blocks.1."))


def test_tensor_inside_a_fused_op_is_reported_unverifiable() -> None:
    model = nn.Sequential(nn.Linear(3, 3))
    w = gv.GraphWidget.from_fn(lambda: model(torch.ones(2, 3)).sum(), model=model)
    transpose = next(n for n, d in w.graph.nx.nodes(data=True) if d["op"] == "TBackward0")
    w.toggles = {"detach": [f"{transpose}:0"], "freeze": []}
    result = w.verify()
    assert result["unverifiable"] == [
        "the detach of the TBackward0 output in 0 (Linear) was not replayed: it is made inside a fused op "
        "(no Python-level torch call returns it, e.g. the transpose inside F.linear), so a re-run cannot detach it"]
    assert result["agree"] and result["actual_lost"] == []  # verified without the unappliable detach
    assert result["predicted_lost"] == ["0.weight"] and result["checked_lost"] == []
    assert not result["complete"]  # the page shows amber: 0.weight's predicted loss was not checked


def test_a_function_that_changes_between_runs_is_flagged_loudly() -> None:
    a = torch.randn(3, requires_grad=True)
    runs = []

    def fn() -> torch.Tensor:
        runs.append(1)
        return (a * 2).sum() if len(runs) == 1 else (a * 2).sum() + a.sum()

    w = gv.GraphWidget.from_fn(fn, names={"a": a})
    mul = next(n for n, d in w.graph.nx.nodes(data=True) if d["op"] == "MulBackward0")
    w.toggles = {"detach": [mul], "freeze": []}
    result = w.verify()
    assert not result["agree"] and result["predicted_lost"] == ["a"] and result["actual_lost"] == []


def test_errors_in_fn_are_reported_not_raised() -> None:
    a = torch.randn(3, requires_grad=True)
    calls = []

    def fn() -> torch.Tensor:
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("boom")
        return (a * 2).sum()

    w = gv.GraphWidget.from_fn(fn, names={"a": a})
    result = w.verify()
    assert not result["agree"] and "boom" in result["error"]
    assert a.requires_grad and a.grad is None


def test_partial_verification_on_a_real_model_names_what_was_not_replayed() -> None:
    # Seen in review: the headline predicted 2 lost leaves, one detach could not be replayed, and the banner
    # said "1 leaf loses gradient, as predicted" in green, naming the cut "n2:0".
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x = torch.randn(5, 3)
    w = gv.GraphWidget.from_fn(lambda: model(x).pow(2).mean(), model=model)
    g = w.graph.nx
    transpose = next(n for n, d in g.nodes(data=True) if d["op"] == "TBackward0" and d["call"] == "2")
    tanh = next(n for n, d in g.nodes(data=True) if d["op"] == "TanhBackward0")
    w.toggles = {"detach": [f"{tanh}:0", f"{transpose}:0"], "freeze": []}
    assert sorted(w.what_if().lost) == ["0.bias", "0.weight", "2.weight"]
    result = w.verify()
    # The replayable cut (tanh's output) was checked against PyTorch; the transpose inside F.linear was not.
    assert result["predicted_lost"] == ["0.bias", "0.weight", "2.weight"]
    assert result["checked_lost"] == result["actual_lost"] == ["0.bias", "0.weight"]
    assert result["agree"] and not result["complete"]
    assert result["unverifiable"] == [
        "the detach of the TBackward0 output in 2 (Linear) was not replayed: it is made inside a fused op "
        "(no Python-level torch call returns it, e.g. the transpose inside F.linear), so a re-run cannot detach it"]
    assert all(p.grad is None and p.requires_grad for p in model.parameters())  # the model as it was
    w.toggles = {"detach": [f"{tanh}:0"], "freeze": []}
    full = w.verify()
    assert full["complete"] and full["agree"] and full["unverifiable"] == []


def test_unreachable_leaves_are_reported_not_silently_skipped() -> None:
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)  # used by fn but neither a parameter nor in names=
    w = gv.GraphWidget.from_fn(lambda: (a * b).sum(), names={"a": a})
    unnamed = next(n for n, d in w.graph.nx.nodes(data=True) if d["kind"] == "leaf" and not d["names"])
    w.toggles = {"detach": [], "freeze": [unnamed]}
    result = w.verify()
    assert not result["complete"] and result["agree"] and result["actual_lost"] == []
    assert len(result["unverifiable"]) == 2
    assert result["unverifiable"][0].startswith("freezing the unnamed leaf")
    assert "names=" in result["unverifiable"][0] and unnamed not in " ".join(result["unverifiable"])

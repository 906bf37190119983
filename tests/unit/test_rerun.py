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


def test_a_cut_on_a_leafs_own_edge_is_replayed_as_requires_grad_false() -> None:
    # Seen in review: for relu(x @ W1) @ W2, a click on W2's edge was blamed on "the detach of the
    # AccumulateGrad output made inside a fused op (the transpose inside F.linear)": there is no F.linear.
    w, params = two_layer()
    w2 = w.graph.find("W2")
    w.toggles = {"detach": [f"{w2}:0"], "freeze": []}
    result = w.verify()
    assert result["complete"] and result["agree"] and result["unverifiable"] == [], result
    assert result["actual_lost"] == result["predicted_lost"] == ["W2"]
    assert params["W2"].requires_grad and params["W2"].grad is None  # replayed in the sandbox only


def test_a_tensor_made_inside_a_call_is_replayed_through_its_one_path() -> None:
    # The weight's transpose inside F.linear has no Python-level call, but it is the weight's only use:
    # detaching it cuts the same paths as freezing the weight, so the re-run checks it that way.
    model = nn.Sequential(nn.Linear(3, 3))
    w = gv.GraphWidget.from_fn(lambda: model(torch.ones(2, 3)).sum(), model=model)
    transpose = next(n for n, d in w.graph.nx.nodes(data=True) if d["op"] == "TBackward0")
    w.toggles = {"detach": [f"{transpose}:0"], "freeze": []}
    result = w.verify()
    assert result["complete"] and result["agree"], result
    assert result["actual_lost"] == result["predicted_lost"] == ["0.weight"]
    # einsum's inner bmm: one consumer chain down to the tensor einsum returns
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    w = gv.GraphWidget.from_fn(lambda: torch.einsum("ij,jk->ik", a.tanh(), b.sin()).pow(2).sum(),
                               names={"a": a, "b": b})
    bmm = next(n for n, d in w.graph.nx.nodes(data=True) if d["op"] == "BmmBackward0")
    w.toggles = {"detach": [f"{bmm}:0"], "freeze": []}
    result = w.verify()
    assert result["complete"] and result["agree"] and result["actual_lost"] == ["a", "b"], result


class Attn(nn.Module):
    """Attention with a learned additive mask: inside scaled_dot_product_attention, scores + mask is a tensor
    with two inputs and no Python-level call."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.bias = nn.Parameter(torch.zeros(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x),
                                                                attn_mask=self.bias)


def attention_model() -> tuple[gv.GraphWidget, nn.Module, str, str]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), Attn())
    x = torch.randn(2, 4, 3)
    w = gv.GraphWidget.from_fn(lambda: model(x).pow(2).mean(), model=model)
    g = w.graph.nx
    add = next(n for n, d in g.nodes(data=True) if d["op"] == "AddBackward0" and d["call"] == "2")
    tanh = next(n for n, d in g.nodes(data=True) if d["op"] == "TanhBackward0")
    return w, model, add, tanh


def test_tensor_inside_a_fused_op_is_reported_unverifiable_in_the_users_terms() -> None:
    w, _, add, _ = attention_model()
    w.toggles = {"detach": [f"{add}:0"], "freeze": []}
    result = w.verify()
    assert result["unverifiable"] == [
        "the detach of the AddBackward0 output in 2 (Attn) was not replayed: PyTorch makes it inside one torch "
        "call (no line of your code returns it), between several inputs and uses, so a re-run cannot detach it "
        "alone; to check a cut here, detach the output of 2 (Attn), which a re-run can replay"]
    assert result["agree"] and result["actual_lost"] == []  # verified without the unappliable detach
    assert result["predicted_lost"] == ["2.bias", "2.k.bias", "2.k.weight", "2.q.bias", "2.q.weight"]
    assert result["checked_lost"] == [] and not result["complete"]  # the page shows amber


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
    w, model, add, tanh = attention_model()
    w.toggles = {"detach": [f"{tanh}:0", f"{add}:0"], "freeze": []}
    lost = ["0.bias", "0.weight", "2.bias", "2.k.bias", "2.k.weight", "2.q.bias", "2.q.weight"]
    assert sorted(w.what_if().lost) == lost
    result = w.verify()
    # The replayable cut (tanh's output) was checked against PyTorch; the sum inside the attention was not.
    assert result["predicted_lost"] == lost
    assert result["checked_lost"] == result["actual_lost"] == ["0.bias", "0.weight"]
    assert result["agree"] and not result["complete"]
    [why] = result["unverifiable"]
    assert why.startswith("the detach of the AddBackward0 output in 2 (Attn) was not replayed"), why
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

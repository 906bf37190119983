"""gv.record_backward against what PyTorch's engine really does."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, TwiceCalled, gpt2_loss
from gradviz_nb.widgets import page


def engine_order(loss: torch.Tensor) -> list[tuple[str, int]]:
    """Independently: our own prehooks on every node, one plain backward, (op, sequence nr) in run order."""
    seen: list[tuple[str, int]] = []
    nodes, stack = {loss.grad_fn}, [loss.grad_fn]
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is not None and nxt not in nodes:
                nodes.add(nxt)
                stack.append(nxt)
    def hook(fn: Any) -> Any:
        def record(_: Any) -> None:
            leaf = fn.variable if "AccumulateGrad" in fn.name() else None
            key = id(leaf) if leaf is not None else fn._sequence_nr()
            seen.append((fn.name().removeprefix("torch::autograd::"), key))
        return record
    handles = [fn.register_prehook(hook(fn)) for fn in nodes]
    grads = {}
    for fn in nodes:
        if "AccumulateGrad" in fn.name():
            grads[id(fn.variable)] = fn.variable
    saved = {k: t.grad for k, t in grads.items()}
    loss.backward(retain_graph=True)
    for k, t in grads.items():
        t.grad = saved[k]
    for h in handles:
        h.remove()
    return seen


CASES = {
    "mlp": (MLP, lambda m: m(torch.randn(5, 4)).pow(2).sum()),
    "gpt2-tied": (lambda: GPT2(GPT2Config.small_test()), gpt2_loss),
    "twice": (TwiceCalled, lambda m: m(torch.randn(3, 4)).sum()),
    "gpt2-ckpt": (lambda: GPT2(GPT2Config.small_test("non_reentrant")), gpt2_loss),
}


@pytest.mark.parametrize("case", CASES)
def test_recorded_order_is_the_engines_and_each_node_runs_once(case: str) -> None:
    make, run = CASES[case]
    torch.manual_seed(0)
    model = make()
    loss = run(model)
    expected = engine_order(loss)
    rec = gv.record_backward(loss, model=model)
    leaf_id = {n: id(t) for n, t in _leaf_tensors(rec, model).items()}
    seq = {n: d["seq"] for n, d in rec.graph.nx.nodes(data=True)}
    got = [(s.op, leaf_id[s.node] if s.op == "AccumulateGrad" else seq[s.node]) for s in rec.steps]
    assert got == expected
    assert len({s.node for s in rec.steps}) == len(rec.steps) == len(rec.graph) - 1  # every node but the root


def _leaf_tensors(rec: gv.BackwardRecording, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    params = dict(model.named_parameters(remove_duplicate=False))
    return {n: params[rec.graph.nx.nodes[n]["names"][0]] for n in rec.graph.nodes_of("leaf")}


@pytest.mark.parametrize("case", ["mlp", "gpt2-tied", "twice"])
def test_recorded_gradients_equal_autograd_grad_and_contributions_sum(case: str) -> None:
    make, run = CASES[case]
    torch.manual_seed(0)
    model = make()
    loss = run(model)
    rec = gv.record_backward(loss, model=model, keep_values=True)
    names = [name for name in rec.graph.leaves() if name in dict(model.named_parameters())]
    params = dict(model.named_parameters())
    expected = torch.autograd.grad(loss, [params[n] for n in names], retain_graph=True)
    for name, grad in zip(names, expected, strict=True):
        torch.testing.assert_close(rec.leaf_grad(name), grad)
        leaf = rec.graph.find(name)
        contributions = [
            s.grad_inputs[d.input_nr].value for s in rec.steps for d in s.deliveries if d.target == leaf
        ]
        assert len(contributions) == rec.graph.nx.out_degree(leaf) or sum(
            len(d["slots"]) for _, _, d in rec.graph.nx.out_edges(leaf, data=True)
        ) == len(contributions)
        torch.testing.assert_close(sum(contributions), grad)  # type: ignore[arg-type]
    wte = rec.graph.find("wte.weight") if "wte.weight" in rec.graph.leaves() else None
    if wte is not None:  # the tied weight: one contribution from the embedding, one from the head
        assert len([d for s in rec.steps for d in s.deliveries if d.target == wte]) == 2


def test_statistics_are_those_of_the_gradient() -> None:
    torch.manual_seed(0)
    model = MLP()
    loss = model(torch.randn(5, 4)).pow(2).sum()
    rec = gv.record_backward(loss, model=model)
    grad = rec.leaf_grad("fc1.weight")
    leaf_step = next(s for s in rec.steps if s.node == rec.graph.find("fc1.weight"))
    stats = leaf_step.grad_outputs[0]
    assert stats is not None and stats.shape == [8, 4] and not stats.nonfinite
    assert stats.norm == pytest.approx(grad.norm().item(), rel=1e-5)
    assert stats.mean == pytest.approx(grad.mean().item(), rel=1e-4, abs=1e-7)
    assert stats.max_abs == pytest.approx(grad.abs().max().item(), rel=1e-6)


def test_nan_gradients_are_flagged() -> None:
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    rec = gv.record_backward(torch.sqrt(w).sum(), names={"w": w})  # sqrt(-1) = nan
    assert any(g is not None and g.nonfinite for s in rec.steps for g in s.grad_inputs + s.grad_outputs)


def test_by_default_nothing_of_the_users_changes() -> None:
    torch.manual_seed(0)
    model = MLP()
    model(torch.randn(2, 4)).sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    values = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    loss = model(torch.randn(5, 4)).sum()
    gv.record_backward(loss, model=model)
    for n, p in model.named_parameters():
        assert p.grad is grads[n] and torch.equal(p.grad, values[n]) and p.requires_grad
    again = gv.record_backward(loss, model=model)  # the graph is still usable, and no hook of ours ran twice
    assert len(again.steps) == len(again.graph) - 1
    loss.backward()
    assert torch.equal(model.fc1.weight.grad, values["fc1.weight"] + again.leaf_grad("fc1.weight"))


def test_repeated_backward_without_zero_grad_shows_the_stale_sum() -> None:
    w = torch.zeros(2, requires_grad=True)
    rec = gv.record_backward((w * torch.tensor([0.5, -0.3])).sum(), names={"w": w}, accumulate=True)
    gv.record_backward((w * torch.tensor([0.1, 0.2])).sum(), names={"w": w}, accumulate=True, into=rec)
    torch.testing.assert_close(w.grad, torch.tensor([0.6, -0.1]))
    assert rec.passes == 2
    torch.testing.assert_close(rec.leaf_grad("w", 0), torch.tensor([0.5, -0.3]))
    torch.testing.assert_close(rec.leaf_grad("w", 1), torch.tensor([0.1, 0.2]))
    second = next(s for s in rec.pass_steps(1) if s.node == rec.graph.find("w"))
    assert second.leaf_before is not None and second.leaf_after is not None
    assert second.leaf_before.value.tolist() == pytest.approx([0.5, -0.3])  # type: ignore[union-attr]
    assert second.leaf_after.value.tolist() == pytest.approx([0.6, -0.1])  # type: ignore[union-attr]
    with pytest.raises(gv.GradvizError, match="differs"):
        gv.record_backward((w.exp()).sum(), names={"w": w}, into=rec)


def test_teaching_lines_carry_pytorchs_numbers() -> None:
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(3.0, requires_grad=True)
    with gv.capture() as cap:
        loss = (a * b + a) * 0.5
    rec = gv.record_backward(loss, capture=cap, names={"a": a, "b": b})
    mul = next(s for s in rec.steps if s.op == "MulBackward0" and rec.graph.nx.nodes[s.node]["value"] == [6.0])
    lines = rec.explain(mul)
    assert lines[0] == "forward: a * b"
    assert lines[1] == "grad_a = grad_out * b = 0.5 * 3.0 = 1.5"
    assert lines[2] == "grad_b = grad_out * a = 0.5 * 2.0 = 1.0"
    grads = torch.autograd.grad(loss, [a, b])
    assert rec.leaf_grad("a").item() == grads[0].item() == 2.0
    payload = page.recording(rec)
    assert payload["passes"] == 1 and payload["values"][rec.graph.find("b")] == [3.0]
    assert payload["steps"][0]["received"][0]["value"] == [1.0]


def test_widget_carries_the_recording() -> None:
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    rec = gv.record_backward((w * w).sum(), names={"w": w})
    widget = gv.GraphWidget(rec)
    assert widget.recording["steps"][0]["op"] == "SumBackward0" and widget.step == -1
    assert widget.graph is rec.graph


def _checkpointed_gpt2(grad_input: bool) -> tuple[torch.nn.Module, torch.Tensor]:
    """GPT-2 small_test with reentrant checkpoints; without ``grad_input`` the embeddings are frozen, so the
    checkpointed blocks' inputs need no grad (PyTorch warns; their weights get no gradient)."""
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test("reentrant"))
    if not grad_input:
        model.wte.weight.requires_grad_(False)
        model.wpe.weight.requires_grad_(False)
    if grad_input:
        return model, gpt2_loss(model)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        return model, gpt2_loss(model)


def test_leaf_grad_inside_a_reentrant_checkpoint_is_what_backward_puts_in_grad() -> None:
    model, loss = _checkpointed_gpt2(grad_input=True)
    name = "blocks.0.attn.c_attn.weight"
    assert name not in gv.trace(loss, model=model).leaves()  # hidden inside CheckpointFunctionBackward
    rec = gv.record_backward(loss, model=model)
    assert all(p.grad is None for p in model.parameters())  # the user's .grad left as it was
    loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None
        torch.testing.assert_close(rec.leaf_grad(n), p.grad, rtol=1e-5, atol=1e-7)
    assert not torch.equal(rec.leaf_grad(name), torch.zeros_like(rec.leaf_grad(name)))


def test_leaf_grad_of_a_checkpoint_without_grad_input_says_none_arrived() -> None:
    model, loss = _checkpointed_gpt2(grad_input=False)
    rec = gv.record_backward(loss, model=model)
    loss.backward()
    assert model.get_parameter("blocks.0.attn.c_attn.weight").grad is None  # PyTorch's truth
    with pytest.raises(gv.GradvizError, match=r"received no gradient.*grad stays None"):
        rec.leaf_grad("blocks.0.attn.c_attn.weight")
    torch.testing.assert_close(rec.leaf_grad("ln_f.weight"), model.ln_f.weight.grad)


def test_leaf_grad_without_the_model_says_to_pass_it() -> None:
    model, loss = _checkpointed_gpt2(grad_input=True)
    rec = gv.record_backward(loss, names={"wte.weight": model.wte.weight})
    with pytest.raises(gv.GradvizError, match=r"reentrant checkpoint.*pass model="):
        rec.leaf_grad("blocks.0.attn.c_attn.weight")


def test_record_after_backward_freed_the_graph_is_a_clear_error() -> None:
    model = MLP()
    loss = model(torch.randn(5, 4)).pow(2).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}  # type: ignore[union-attr]
    with pytest.raises(gv.GradvizError, match=r"already freed by an earlier backward\(\).*Run the forward again"):
        gv.record_backward(loss, model=model)
    assert all(torch.equal(p.grad, grads[n]) for n, p in model.named_parameters())  # type: ignore[arg-type]


def test_non_scalar_loss_says_sum_or_grad_and_grad_works() -> None:
    torch.manual_seed(0)
    model = MLP()
    out = model(torch.randn(5, 4))
    with pytest.raises(gv.GradvizError, match=r"scalar loss.*shape \[5, 3\].*loss.sum\(\).*grad="):
        gv.record_backward(out, model=model)
    weights = torch.randn(5, 3)
    rec = gv.record_backward(out, model=model, grad=weights)
    (expected,) = torch.autograd.grad(out, [model.fc1.weight], weights, retain_graph=True)
    torch.testing.assert_close(rec.leaf_grad("fc1.weight"), expected)
    with pytest.raises(gv.GradvizError, match="shape"):
        gv.record_backward(out, model=model, grad=torch.ones(3))


def test_inplace_error_names_the_op_and_the_fix() -> None:
    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        h = torch.sigmoid(model.fc1(torch.randn(3, 4)))
        h.mul_(2)  # sigmoid saved its output for backward: this breaks it
        loss = model.fc2(h).sum()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward(retain_graph=True)  # PyTorch's own verdict on this graph
    with pytest.raises(gv.GradvizError) as err:
        gv.record_backward(loss, model=model, capture=cap)
    text = str(err.value)
    assert "in SigmoidBackward0" in text and "mul_() at " in text and "test_backward.py" in text
    assert "out-of-place form" in text and "output 0 of Sigmoid" in text


def test_leaf_values_are_what_arrived_even_when_a_hook_changes_grad_after_accumulation() -> None:
    """Leaf values are read from .grad after the pass (no copy), except where a post-accumulate hook may
    have changed .grad: there the gradient that arrived is kept, as PyTorch computed it."""
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(5, 4)
    loss = model(x).pow(2).sum()
    expected = dict(zip([n for n, _ in model.named_parameters()],
                        torch.autograd.grad(loss, list(model.parameters()), retain_graph=True), strict=True))
    def zero(p: torch.Tensor) -> None:
        assert p.grad is not None
        p.grad.mul_(0.0)

    handle = model.fc1.weight.register_post_accumulate_grad_hook(zero)
    try:
        rec = gv.record_backward(loss, model=model)
    finally:
        handle.remove()
    for name, g in expected.items():
        assert torch.equal(rec.leaf_grad(name), g), name
    assert model.fc1.weight.grad is None  # put back as it was

"""what_if's prediction against PyTorch re-running the same program with the same detaches/freezes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.checkpoint import checkpoint

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss

N_PARAMS = 4
Op = tuple[str, int, int]

# Each op reads one or two tensors from the pool and returns (new pool tensors, detachable tensors).
# `cut(t)` is applied to every detachable tensor: identity when tracing, .detach() for chosen ones.


def apply(op: Op, pool: list[torch.Tensor], cut: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
    name, i, j = op
    a, b = pool[i % len(pool)], pool[j % len(pool)]
    if name == "mm":
        out = [cut(a @ b)]
    elif name == "add":
        out = [cut(a + b)]
    elif name == "mul":
        out = [cut(a * b)]
    elif name == "relu":
        out = [cut(a.relu())]
    elif name == "tanh":
        out = [cut(torch.tanh(a))]
    elif name == "chunk":  # two outputs of one node; detaching one must cut only that one
        c0, c1 = a.chunk(2, dim=1)
        out = [torch.cat([cut(c0), cut(c1)], dim=1)]
    elif name == "unbind":  # four outputs of one node into one consumer: one edge, four slots
        rows = [cut(r) for r in a.unbind(0)]
        out = [torch.stack(rows)]
    elif name == "inplace":
        c = a * 1.5
        c.relu_()
        out = [cut(c)]
    elif name == "inplace_view":
        c = a + 0.0
        c[:, :2].mul_(b[:, :2])
        out = [cut(c)]
    elif name == "ckpt":
        out = [cut(checkpoint(lambda u, v: torch.tanh(u @ v) * v, a, b, use_reentrant=False))]
    else:
        raise AssertionError(name)
    return out


ops = st.lists(
    st.tuples(
        st.sampled_from(["mm", "add", "mul", "relu", "tanh", "chunk", "unbind", "inplace", "inplace_view", "ckpt"]),
        st.integers(0, 50),
        st.integers(0, 50),
    ),
    min_size=1,
    max_size=12,
)


def run(program: list[Op], params: list[torch.Tensor], x: torch.Tensor,
        cut: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    pool = [x, *params]
    for op in program:
        pool += apply(op, pool, cut)
    return sum(t.sum() for t in pool[-3:])  # type: ignore[return-value]


@settings(max_examples=150, deadline=None)
@given(program=ops, detach_bits=st.integers(0, 2**40), freeze_bits=st.integers(0, 2**N_PARAMS - 1),
       seed=st.integers(0, 1000))
def test_prediction_matches_pytorch(program: list[Op], detach_bits: int, freeze_bits: int, seed: int) -> None:
    torch.manual_seed(seed)
    base = [torch.randn(4, 4) for _ in range(N_PARAMS)]
    x = torch.randn(4, 4)
    names = [f"p{k}" for k in range(N_PARAMS)]

    # 1. trace the full program, remembering which graph tensor each detachable tensor is
    params = [p.clone().requires_grad_() for p in base]
    seen: list[tuple[int, int] | None] = []

    def remember(t: torch.Tensor) -> torch.Tensor:
        seen.append((t.grad_fn._sequence_nr(), t.output_nr) if t.grad_fn is not None else None)
        return t

    loss = run(program, params, x, remember)
    if loss.grad_fn is None:
        return  # nothing requires grad on the way to the loss: no graph to question
    g = gv.trace(loss, names=dict(zip(names, params, strict=True)))
    node_of_seq = {d["seq"]: n for n, d in g.nx.nodes(data=True) if d["kind"] == "op"}
    chosen = [k for k in range(len(seen)) if detach_bits >> k & 1]
    in_graph = [seen[k] for k in chosen if seen[k] is not None and seen[k][0] in node_of_seq]  # type: ignore[index]
    detach = [(node_of_seq[seq], out) for seq, out in in_graph]  # type: ignore[misc]
    frozen = [names[k] for k in range(N_PARAMS) if freeze_bits >> k & 1]
    predicted = g.what_if(detach=detach, freeze=[f for f in frozen if f in g.leaves()])

    # 2. re-run for real with those tensors detached and those parameters frozen
    params = [p.clone().requires_grad_(names[k] not in frozen) for k, p in enumerate(base)]
    counter = iter(range(len(seen)))

    def maybe_detach(t: torch.Tensor) -> torch.Tensor:
        return t.detach() if next(counter) in chosen else t

    loss = run(program, params, x, maybe_detach)
    runs = len(gv.trace(loss)) - 1 if loss.requires_grad else 0  # the re-run's own graph, root excluded
    if loss.requires_grad:
        loss.backward()
    actual = sorted(n for n, p in zip(names, params, strict=True) if n in g.leaves() and p.grad is None)
    assert predicted.lost == actual, (program, detach, frozen)
    assert predicted.runs == runs, (program, detach, frozen)


def test_two_layer_exercise() -> None:
    """The classic: loss = (relu(x @ W1) @ W2).sum(); detach h after the relu."""
    x = torch.randn(5, 4)
    w1, w2 = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    g = gv.trace((torch.relu(x @ w1) @ w2).sum(), names={"W1": w1, "W2": w2})
    assert g.what_if().lost == [] and g.what_if().kept == ["W1", "W2"]
    relu = next(n for n, d in g.nx.nodes(data=True) if d["op"] == "ReluBackward0")
    result = g.what_if(detach=[relu])
    assert result.lost == ["W1"] and result.kept == ["W2"]
    assert len(result.pruned) == 3  # relu, mm, W1's accumulation
    assert "1 of 2 leaves lose gradient: W1" in repr(result)


def test_module_paths_detach_a_call_and_freeze_its_parameters() -> None:
    model = GPT2(GPT2Config.small_test())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    g = gv.trace(loss, model=model, capture=cap)
    cut_block1 = g.what_if(detach=["blocks.1"])
    assert "blocks.1.mlp.c_fc.weight" in cut_block1.lost and "ln_f.weight" in cut_block1.kept
    assert "wte.weight" in cut_block1.kept  # tied: still reached through lm_head
    frozen = g.what_if(freeze=["blocks.0"])
    assert frozen.lost == sorted(n for n in g.leaves() if n.startswith("blocks.0."))
    assert g.what_if(freeze=["wte.weight"]).lost == ["wte.weight"]  # one leaf, first name reported


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"detach": ["nope"]}, "neither a node id nor a captured module call"),
    ({"freeze": ["nope"]}, "names no leaf"),
    ({"detach": [("n999", 0)]}, "no node"),
    ({"detach": [3.5]}, "expected a node id"),
])
def test_bad_names_are_clear_errors(kwargs: Any, message: str) -> None:
    w = torch.randn(3, requires_grad=True)
    g = gv.trace((w * 2).sum(), names={"w": w})
    with pytest.raises(gv.GradvizError, match=message):
        g.what_if(**kwargs)

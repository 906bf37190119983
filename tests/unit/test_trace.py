"""gv.trace against what PyTorch itself says about the graph."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import networkx as nx
import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, MHAModel, ResNet18Like, TwiceCalled, gpt2_loss


def reference_walk(root: torch.Tensor) -> tuple[set[Any], set[tuple[Any, Any, int, int]]]:
    """Nodes and (producer, consumer, output_nr, input_nr) edges, straight from next_functions."""
    nodes, edges, stack = {root.grad_fn}, set(), [root.grad_fn]
    while stack:
        fn = stack.pop()
        for input_nr, (nxt, output_nr) in enumerate(fn.next_functions):
            if nxt is None:
                continue
            edges.add((nxt, fn, output_nr, input_nr))
            if nxt not in nodes:
                nodes.add(nxt)
                stack.append(nxt)
    return nodes, edges


@pytest.mark.parametrize("make", [
    lambda: (MLP(), lambda m: m(torch.randn(5, 4)).sum()),
    lambda: (GPT2(GPT2Config.small_test()), gpt2_loss),
    lambda: (ResNet18Like(width=8), lambda m: m(torch.randn(2, 3, 32, 32)).sum()),
    lambda: (MHAModel(), lambda m: m(torch.randn(2, 5, 8)).sum()),
    lambda: (TwiceCalled(), lambda m: m(torch.randn(3, 4)).sum()),
])
def test_nodes_and_edges_match_next_functions(make: Any) -> None:
    model, run = make()
    loss = run(model)
    nodes, edges = reference_walk(loss)
    g = gv.trace(loss, model=model)
    ops = [n for n, k in g.nx.nodes(data="kind") if k != "root"]
    assert len(ops) == len(nodes)
    slots = sum(len(d["slots"]) for u, v, d in g.nx.edges(data=True) if not v.startswith("root"))
    assert slots == len(edges)
    assert sorted(d["op"] for n, d in g.nx.nodes(data=True) if d["kind"] != "root") == sorted(
        fn.name().removeprefix("torch::autograd::") for fn in nodes
    )
    assert nx.is_directed_acyclic_graph(g.nx)
    assert list(g.nx.predecessors("root0")) and not list(g.nx.successors("root0"))
    # every trainable parameter is a leaf, named
    assert set(g.leaves()) == {n for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}


def test_shapes_and_dtypes_come_from_metadata() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    y = (x.double() @ torch.randn(4, 2, dtype=torch.float64)).relu()
    g = gv.trace(y.sum(), names={"x": x})
    by_op = {d["op"]: d for _, d in g.nx.nodes(data=True)}
    assert by_op["MmBackward0"]["shape"] == [3, 2] and by_op["MmBackward0"]["dtype"] == "float64"
    assert by_op["ToCopyBackward0"]["shape"] == [3, 4]
    assert by_op["AccumulateGrad"]["shape"] == [3, 4] and by_op["AccumulateGrad"]["dtype"] == "float32"
    assert g.nx.nodes[g.find("x")]["label"] == "x"


def test_tied_weight_is_one_leaf_with_all_names() -> None:
    model = GPT2(GPT2Config.small_test())
    g = gv.trace(gpt2_loss(model), model=model)
    leaves = g.leaves()
    assert leaves["wte.weight"] == leaves["lm_head.weight"]
    assert g.nx.nodes[leaves["wte.weight"]]["names"] == ["wte.weight", "lm_head.weight"]
    assert g.nx.out_degree(leaves["wte.weight"]) == 2  # embedding and the head


def test_unnamed_leaves_get_shape_labels() -> None:
    a = torch.randn(2, 3, requires_grad=True)
    g = gv.trace((a * 2).sum())
    leaf = next(g.nodes_of("leaf"))
    assert g.nx.nodes[leaf]["label"] == "tensor 2×3"


def test_multi_output_edges_keep_each_output() -> None:
    x = torch.randn(4, 6, requires_grad=True)
    a, b = x.chunk(2, dim=1)
    g = gv.trace((a * b + x[:, :3] * x[:, :3]).sum())
    split = next(n for n, d in g.nx.nodes(data=True) if d["op"] == "SplitBackward0")
    (mul,) = [v for v in g.nx.successors(split)]
    assert sorted(map(tuple, g.nx.edges[split, mul]["slots"])) == [(0, 0), (1, 1)]


def test_several_roots_and_a_leaf_root() -> None:
    w = torch.randn(3, requires_grad=True)
    g = gv.trace([(w * 2).sum(), w], names={"w": w})
    assert g.roots == ["root0", "root1"]
    assert list(g.nx.predecessors("root1")) == [g.find("w")]


def test_graph_consumed_by_backward_still_traces() -> None:
    model = MLP()
    loss = model(torch.randn(2, 4)).sum()
    loss.backward()
    g = gv.trace(loss, model=model)
    assert len(g.leaves()) == 4


def test_trace_keeps_no_autograd_node_alive() -> None:
    class Tracked:
        pass

    class Save(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.payload = Tracked()  # lives exactly as long as the backward node
            return x * 1

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad

    x = torch.randn(3, requires_grad=True)
    loss = Save.apply(x).sum()
    ref = weakref.ref(_payload_of(loss))
    g = gv.trace(loss)
    del loss
    gc.collect()
    assert ref() is None, "the traced graph still pins the autograd graph"
    assert len(g) == 4


def _payload_of(loss: torch.Tensor) -> Any:
    return loss.grad_fn.next_functions[0][0].payload


@pytest.mark.parametrize(
    ("make_root", "reason"),
    [
        (lambda: _under(torch.no_grad), "no_grad"),
        (lambda: _under(torch.inference_mode), "inference_mode"),
        (lambda: (torch.randn(3) * 2).sum(), "require grad"),
        (lambda: (torch.randn(3, requires_grad=True) * 2).sum().detach(), "detach"),
    ],
)
def test_tensor_without_graph_gets_a_clear_error(make_root: Any, reason: str) -> None:
    with pytest.raises(gv.GradvizError, match=reason):
        gv.trace(make_root())


def _under(ctx: Any) -> torch.Tensor:
    w = torch.randn(3, requires_grad=True)
    with ctx():
        return (w * 2).sum()


def test_frozen_model_error_says_so() -> None:
    model = MLP().requires_grad_(False)
    with pytest.raises(gv.GradvizError, match="None of the model's parameters require grad"):
        gv.trace(model(torch.randn(2, 4)).sum(), model=model)


@pytest.mark.parametrize("bad", [3.0, "loss", None, [torch.randn(2, requires_grad=True) * 2, 1]])
def test_non_tensor_is_a_clear_error(bad: Any) -> None:
    with pytest.raises(gv.GradvizError, match="tensor"):
        gv.trace(bad)


def test_empty_list_is_a_clear_error() -> None:
    with pytest.raises(gv.GradvizError, match="empty"):
        gv.trace([])


def test_compiled_graph_traces_and_says_it_is_one_node() -> None:
    model = MLP()
    compiled = torch.compile(model, backend="aot_eager")
    loss = compiled(torch.randn(2, 4)).sum()
    g = gv.trace(loss, model=model)
    ops = {d["op"] for _, d in g.nx.nodes(data=True)}
    assert "CompiledFunctionBackward" in ops
    assert any("torch.compile" in note for note in g.notes)


def test_tracing_leaves_user_state_alone() -> None:
    model = MLP()
    model.eval()
    loss = model(torch.randn(2, 4)).sum()
    before = {n: (p.requires_grad, p.grad) for n, p in model.named_parameters()}
    gv.trace(loss, model=model)
    assert {n: (p.requires_grad, p.grad) for n, p in model.named_parameters()} == before
    assert not model.training
    loss.backward()  # the graph is still usable
    assert all(p.grad is not None for p in model.parameters())


def test_fill_digraph_equals_networkx_public_methods() -> None:
    """trace builds its DiGraph straight into NetworkX's dicts (5x faster): same graph as the public path,
    including repeated edges (the later attributes win) and edges to nodes not listed (added bare)."""
    import random

    import networkx as nx

    from gradviz_nb.tracing.trace import fill_digraph

    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(0, 30)
        nodes = [(f"n{i}", {"kind": "op", "seq": i}) for i in range(n)]
        edges = [
            (f"n{rng.randint(0, n + 2)}", f"n{rng.randint(0, n + 2)}", {"slots": [[rng.randint(0, 2), 0]]})
            for _ in range(rng.randint(0, 60))
        ]
        expected = nx.DiGraph()
        expected.add_nodes_from((k, dict(d)) for k, d in nodes)
        expected.add_edges_from((u, v, dict(d)) for u, v, d in edges)
        got = nx.DiGraph()
        fill_digraph(got, [(k, dict(d)) for k, d in nodes], [(u, v, dict(d)) for u, v, d in edges])
        assert nx.utils.graphs_equal(got, expected)
        assert list(got.nodes) == list(expected.nodes) and list(got.edges) == list(expected.edges)
    with pytest.raises(ValueError):
        fill_digraph(expected, [], [])


def test_optimizer_passed_as_model_is_a_clear_error() -> None:
    model = MLP()
    loss = model(torch.randn(2, 4)).sum()
    with pytest.raises(gv.GradvizError, match=r"optimizer \(Adam\).*pass the nn.Module"):
        gv.trace(loss, model=torch.optim.Adam(model.parameters()))  # type: ignore[arg-type]
    with pytest.raises(gv.GradvizError, match=r"must be the nn\.Module"):
        gv.trace(loss, model={"fc1.weight": model.fc1.weight})  # type: ignore[arg-type]


def test_find_suggests_close_names() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    g = gv.trace(model(torch.randn(2, 4)).sum(), model=model)
    with pytest.raises(gv.GradvizError, match=r"did you mean '0.weight'") as err:
        g.find("0.wieght")
    assert isinstance(err.value, KeyError)  # still what find raised before
    assert str(err.value).startswith("no node or leaf named '0.wieght'")
    with pytest.raises(gv.GradvizError, match=r"g\.leaves"):
        g.find("nothing_like_it")
    assert g.find("2.weight") == g.leaves()["2.weight"]


class _TwoCheckpoints(torch.nn.Module):
    """``a`` checkpointed on the raw input (needs no grad), ``b`` on an embedding's output (needs grad)."""

    def __init__(self, wrap: str = "module") -> None:
        super().__init__()
        self.a, self.emb, self.b, self.head = (torch.nn.Linear(4, 4) for _ in range(4))
        self.wrap = wrap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from functools import partial

        from torch.utils.checkpoint import checkpoint

        fa: Any
        fb: Any
        if self.wrap == "module":
            fa, fb = self.a, self.b
        elif self.wrap == "bound":
            fa, fb = self.a.forward, self.b.__call__
        elif self.wrap == "partial":
            fa, fb = partial(self.a.__call__), partial(torch.nn.Module.__call__, self.b)
        else:  # closures
            a, b = self.a, self.b
            fa, fb = (lambda t: a(t).relu()), (lambda t: b(t).relu())
        ha = checkpoint(fa, x, use_reentrant=True)
        hb = checkpoint(fb, self.emb(x), use_reentrant=True)
        return self.head(ha + hb).sum()


@pytest.mark.parametrize("wrap", ["module", "bound", "partial", "closure"])
def test_reentrant_checkpoints_list_exactly_the_parameters_pytorch_gives_gradients(wrap: str) -> None:
    torch.manual_seed(0)
    model = _TwoCheckpoints(wrap)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        loss = model(torch.randn(3, 4))
    g = gv.trace(loss, model=model)
    loss.backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    assert with_grad == {"emb.weight", "emb.bias", "b.weight", "b.bias", "head.weight", "head.bias"}
    (ckpt,) = [n for n, op in g.nx.nodes(data="op") if op == "CheckpointFunctionBackward"]  # none for `a`
    assert g.nx.graph["checkpoints"] == {ckpt: ["b.bias", "b.weight"]}
    assert set(g.leaves()) | {"b.bias", "b.weight"} == with_grad


def test_checkpoint_of_a_plain_function_is_listed_as_unknown() -> None:
    from torch.utils.checkpoint import checkpoint

    loss = checkpoint(_global_block, _EMB(torch.randn(3, 4)), use_reentrant=True).sum()
    g = gv.trace(loss, names={"emb": _EMB.weight})
    assert list(g.nx.graph["checkpoints"].values()) == [None]


_EMB = torch.nn.Linear(4, 4)
_HIDDEN = torch.nn.Linear(4, 4)


def _global_block(x: torch.Tensor) -> torch.Tensor:
    return _HIDDEN(x)  # a module reached through a global: nothing on the checkpoint node names it

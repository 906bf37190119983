"""CallTree: the one home of the module-call tree (chain, inside, depth), on records and on a real trace."""

from __future__ import annotations

import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.tracing.calltree import CallTree


def test_chain_inside_depth_and_bad_records() -> None:
    calls = [{"id": "a", "parent": ""}, {"id": "a.b", "parent": "a"}, {"id": "a.b.c", "parent": "a.b"},
             {"id": "x", "parent": "missing"}]
    tree = CallTree(calls)
    assert list(tree.chain("a.b.c")) == ["a.b.c", "a.b", "a"]
    assert list(tree.chain("")) == []
    assert tree.inside("a.b.c", {"a"}) and not tree.inside("a", {"a.b"})
    assert tree.depth == {"a": 0, "a.b": 1, "a.b.c": 2, "x": 0}  # an unknown parent hangs from the top
    assert tree.children[""] == ["a", "x"] and tree.children["a"] == ["a.b"]
    looped = CallTree([{"id": "p", "parent": ""}])
    looped.parent["p"] = "p"  # a cycle must end the walk, not hang it
    assert list(looped.chain("p")) == ["p"]


def test_real_trace_sizes_match_the_tree() -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    with gv.capture(model) as cap:
        graph = gv.trace(gpt2_loss(model), model=model, capture=cap)
    tree = CallTree(graph.calls)
    counted = dict.fromkeys(tree.parent, 0)
    for _, call in graph.nx.nodes(data="call"):
        for holder in tree.chain(call):
            counted[holder] += 1
    assert counted == {c["id"]: c["size"] for c in graph.calls}  # the trace's own recursive node counts

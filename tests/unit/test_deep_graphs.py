"""Graphs 100,000 nodes deep: traced, drawn, exported, asked what-if and freed, without a RecursionError or a
crash. The deep cases run in a subprocess, so a segfault (a C stack overflow while torch frees the graph)
fails the test instead of killing pytest."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.tracing import walk as walk_module

ROOT = Path(__file__).resolve().parents[2]
STEPS = 33_334  # three autograd nodes per step: a 100,002-op chain, plus the leaf and the sum

_PRELUDE = """
import gc, sys, time, weakref
import torch
import gradviz_nb as gv
from gradviz_nb.tracing import walk as walk_module
steps = int(sys.argv[1])
w = torch.randn(4, requires_grad=True)

def chain(x):
    global mid
    for i in range(steps):
        x = (x * 1.0001 + 0.1).tanh()
        if i == steps // 2:
            mid = weakref.ref(x)  # an activation in the middle: freed with the graph
    return x.sum()
"""


def _run(body: str, steps: int = STEPS, timeout: float = 300) -> str:
    script = _PRELUDE + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", script, str(steps)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)
    assert done.returncode == 0, f"exit code {done.returncode} (-11: segfault)\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


def test_capture_trace_and_every_tool_on_a_100k_chain() -> None:
    out = _run("""
        from gradviz_nb.widgets import page
        from gradviz_nb.widgets.page.lazy import lazy_payload
        from gradviz_nb.widgets.static_fallback import _layers, visible_items
        with gv.capture(None) as cap:  # the forward observer sees every op's output
            loss = chain(w)
        g = gv.trace(loss, capture=cap, names={"w": w})
        assert len(g) == 3 * steps + 3, len(g)
        assert walk_module.anchored() > 0
        del loss, cap  # the crash was here: freeing a graph whose nodes Python had read
        gc.collect()
        assert mid() is None, "the traced graph is still alive"
        assert walk_module.anchored() == 0, walk_module.anchored()
        print("trace freed", flush=True)

        assert len(page.graph(g)["nodes"]) == len(g)
        assert lazy_payload(g)["meta"]["num_nodes"] == len(g)
        assert g.what_if(freeze=["w"]).lost == ["w"]
        assert g.what_if(detach=[next(g.nx.predecessors(g.roots[0]))]).lost == ["w"]
        assert len(_layers(visible_items(g.nx, g.calls, []))) == len(g)
        assert len(gv.to_json(g)) > len(g)
        print("ok", len(g))
    """)
    assert "ok 100005" in out


@pytest.mark.slow  # from_json checks every record against the data model: minutes for 100k nodes
def test_json_round_trip_of_a_100k_chain() -> None:
    out = _run("""
        g = gv.trace(chain(w), names={"w": w})
        back = gv.from_json(gv.to_json(g))
        assert list(back.nx.nodes) == list(g.nx.nodes)
        assert back.what_if(freeze=["w"]).lost == ["w"]
        print("ok", len(back))
    """, timeout=900)
    assert "ok 100005" in out


def _node_wrappers() -> int:
    """Autograd nodes that have a Python wrapper (they are tracked by the garbage collector)."""
    return sum(1 for o in gc.get_objects() if type(o).__module__ == "torch.autograd.generated"
               or type(o).__name__.endswith("Backward0"))


def test_the_forward_observer_reads_no_grad_fn() -> None:
    """A node Python has read frees recursively (see tracing/walk.py): capture must not read any."""
    w = torch.randn(4, requires_grad=True)
    before = _node_wrappers()
    with gv.capture(None) as cap:
        x = w
        for _ in range(200):
            x = (x * 2).tanh()
    assert len(cap.values) == 400  # every op's value was recorded, by sequence number
    assert _node_wrappers() == before
    fn = x.grad_fn  # reading does make wrappers: the count above would see them
    assert fn is not None and _node_wrappers() > before
    assert cap.values[fn._sequence_nr()] == x.tolist()  # values keyed by the node that made them


def test_a_small_graph_gets_no_anchor_and_frees_at_once() -> None:
    w = torch.randn(3, requires_grad=True)
    x = w
    for _ in range(50):
        x = x * 2
    ref = weakref.ref(x)
    before = walk_module.anchored()
    gv.trace(x.sum(), names={"w": w})
    assert walk_module.anchored() == before
    del x
    assert ref() is None  # no gc needed: nothing of ours holds a node


def test_anchors_bound_every_path_and_go_with_the_graph() -> None:
    gc.collect()
    before = walk_module.anchored()  # anchors of graphs an earlier test in this process still holds alive
    w = torch.randn(3, requires_grad=True)
    x = w
    outs = []
    for _ in range(1500):  # a chain plus a sum over every step: long paths and short ones
        x = torch.sin(x)
        outs.append(x)
    loss = torch.stack(outs).sum()
    g = gv.trace(loss, names={"w": w})
    assert walk_module.anchored() >= before + 1500 // walk_module.ANCHOR_EVERY
    ref = weakref.ref(x)
    del loss, x, outs
    gc.collect()
    assert ref() is None
    assert walk_module.anchored() <= before  # this graph's anchors went with it
    assert len(g) == 1500 + 4

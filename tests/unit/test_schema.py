"""The data model's schema is code (gradviz_nb/tracing/schema.py): real traces match it, the AutogradGraph
docstring lists exactly its fields, and a key the tracer adds without adding it to the schema fails here."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from graphs import traced_gpt2

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, gpt2_loss
from gradviz_nb.tracing import schema
from gradviz_nb.tracing.graph import AutogradGraph

RECORDS = [schema.NodeData, schema.SavedData, schema.EdgeData, schema.GraphData, schema.ModuleCallData,
           schema.ModuleData, schema.GhostData]


def _mlp() -> gv.AutogradGraph:
    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(2, 4)).sum()
    return gv.trace(loss, model=model, capture=cap)


def _gpt2_detached() -> gv.AutogradGraph:
    """GPT-2 small_test whose first block's output is detached (a forward hook): a detach ghost, cut leaves."""
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    handle = model.blocks[0].register_forward_hook(lambda module, args, out: out.detach())
    try:
        with gv.capture(model) as cap:
            loss = gpt2_loss(model)
    finally:
        handle.remove()
    return gv.trace(loss, model=model, capture=cap)


GRAPHS: dict[str, Callable[[], gv.AutogradGraph]] = {
    "mlp": _mlp,
    "gpt2_detached": _gpt2_detached,
    "gpt2_lora_frozen": lambda: traced_gpt2(lora=True, freeze_base=True),
    "gpt2_reentrant": lambda: traced_gpt2("reentrant"),
    "gpt2_non_reentrant": lambda: traced_gpt2("non_reentrant"),
}


@pytest.mark.parametrize("name", list(GRAPHS))
def test_real_traces_match_the_schema(name: str) -> None:
    g = GRAPHS[name]()
    assert schema.schema_problems(g.nx) == []
    if name == "gpt2_detached":  # the cases the schema must cover are really there
        assert [gh["kind"] for gh in g.nx.graph["ghosts"]] == ["detached"] and g.nx.graph["ghosts"][0]["cut"]
    if name == "gpt2_lora_frozen":
        assert {gh["kind"] for gh in g.nx.graph["ghosts"]} == {"frozen"}
    if name == "gpt2_reentrant":
        assert g.nx.graph["checkpoints"] and any(s.get("bytes") for _, s in _saved(g))
    if name == "gpt2_non_reentrant":
        assert any("checkpoint" in s for _, s in _saved(g))


def _saved(g: gv.AutogradGraph) -> list[tuple[str, schema.SavedData]]:
    return [(n, s) for n, d in g.nx.nodes(data=True) for s in d["saved"]]


def test_unknown_missing_and_mistyped_keys_are_named() -> None:
    g = _mlp().nx
    op = next(n for n, k in g.nodes(data="kind") if k == "op")
    g.nodes[op]["fsdp_hook"] = True  # a key a tracer added without adding it to the schema
    del g.nodes[op]["seq"]
    g.nodes[op]["shape"] = "2x8"
    u, v = next(iter(g.edges))
    g.edges[u, v]["slots"] = [[0, "x"]]
    g.graph["calls"][0]["size"] = None
    problems = schema.schema_problems(g)
    assert f"node {op!r}: unknown key 'fsdp_hook' (add it to NodeData in gradviz_nb/tracing/schema.py)" in problems
    assert f"node {op!r}: missing key 'seq' of NodeData" in problems
    assert any(p.startswith(f"node {op!r}: 'shape' = '2x8' is not") for p in problems)
    assert any(p.startswith(f"edge {u!r} -> {v!r}: 'slots' = [[0, 'x']]") for p in problems)
    assert any(p.startswith("graph calls[0]: 'size' = None is not int") for p in problems)
    assert len(problems) == 5, problems


def _docstring_fields(record: type) -> set[str]:
    """The ``field`` names in the AutogradGraph docstring paragraph that starts with the record's name."""
    doc = AutogradGraph.__doc__ or ""
    for paragraph in re.split(r"\n\s*\n", doc):
        head, colon, fields = paragraph.partition("):")
        if colon and f"({record.__name__}" in head:
            return set(re.findall(r"``([a-z_]+)``", fields))
    return set()


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_docstring_lists_exactly_the_schema_fields(record: type) -> None:
    listed = _docstring_fields(record)
    assert listed, f"the AutogradGraph docstring has no paragraph for {record.__name__}"
    assert listed == set(schema.fields(record)), (
        f"docstring lists {sorted(listed - set(schema.fields(record)))} not in {record.__name__}, and "
        f"misses {sorted(set(schema.fields(record)) - listed)}"
    )

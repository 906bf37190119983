"""Lazy payloads and fold groups, without a browser.

The skeleton plus every chunk, put together as the page does (placeholder records replaced by chunk
records, edges from the wiring and the chunks' edge shapes), must give the eager payload exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from graphs import traced_gpt2

import gradviz_nb as gv
import gradviz_nb.widgets.page.lazy as lazy_mode
from gradviz_nb.demo_models import GPT2, GPT2Config, MHAModel, ResNet18Like, TwiceCalled, add_lora, gpt2_loss
from gradviz_nb.errors import GradvizError
from gradviz_nb.export.html import page_html
from gradviz_nb.widgets import page
from gradviz_nb.widgets.page import contract
from gradviz_nb.widgets.page.lazy import LazyGraph, chunks, lazy_payload
from gradviz_nb.widgets.page.messages import load_body
from gradviz_nb.widgets.page.payload import FOLD_MIN, fold_groups, initial_expanded


def plain(value: Any) -> Any:
    """What the page receives: JSON, nothing else."""
    return json.loads(json.dumps(value, allow_nan=False))


def reassemble(skeleton: dict[str, Any], chunk_list: list[dict[str, Any]]) -> dict[str, Any]:
    """The page's view of the whole graph once every chunk has arrived (eager payload's shape)."""
    w = skeleton["wiring"]
    ids = w["ids"]
    records = {n["id"]: n for n in skeleton["nodes"]}
    shapes: dict[int, Any] = dict(skeleton["edge_shapes"])
    for chunk in chunk_list:
        for n in chunk["nodes"]:
            assert records.setdefault(n["id"], n) == n  # a loaded record never disagrees with its chunk
        for k, shape in chunk["edge_shapes"]:
            assert shapes.setdefault(k, shape) == shape
    slots = w["edges"]
    edges = [
        {"source": ids[slots[4 * k]], "target": ids[slots[4 * k + 1]], "output_nr": slots[4 * k + 2],
         "input_nr": slots[4 * k + 3], "shape": shapes[k]}
        for k in range(len(slots) // 4)
    ]
    rest = {k: v for k, v in skeleton.items() if k not in ("wiring", "loaded", "edge_shapes")}
    return {**rest, "nodes": [records[i] for i in ids], "edges": edges}


def check_wiring(skeleton: dict[str, Any], eager: dict[str, Any]) -> None:
    """The compact arrays say what the eager records say."""
    w = skeleton["wiring"]
    calls = [c["id"] for c in skeleton["calls"]]
    nodes = eager["nodes"]
    assert w["ids"] == [n["id"] for n in nodes]
    assert w["kinds"] == "".join({"op": "o", "leaf": "l", "root": "r"}[n["kind"]] for n in nodes)
    assert [calls[i] if i >= 0 else "" for i in w["calls"]] == [n["call"] for n in nodes]
    assert [w["ops"][i] for i in w["op"]] == [n["op"] for n in nodes]
    assert w["labels"] == [n["label"] for n in nodes]
    assert w["names"] == {str(i): n["names"] for i, n in enumerate(nodes) if n["kind"] == "leaf"}
    assert len(w["edges"]) == 4 * len(eager["edges"])


def uncaptured() -> gv.AutogradGraph:
    model = TwiceCalled()
    return gv.trace(model(torch.randn(2, 4)).sum(), model=model)


def captured(model: torch.nn.Module, *inputs: torch.Tensor) -> gv.AutogradGraph:
    with gv.capture(model) as cap:
        loss = model(*inputs).sum()
    return gv.trace(loss, model=model, capture=cap)


def gpt2(n_layer: int, lora_blocks: tuple[int, ...] = ()) -> gv.AutogradGraph:
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=n_layer, n_head=2, d_model=16, vocab=50, block_size=16))
    for i in lora_blocks:
        add_lora(model.blocks[i], freeze_base=False)
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, seq=8)
    return gv.trace(loss, model=model, capture=cap)


GRAPHS = {
    "gpt2": lambda: traced_gpt2(),
    "gpt2_reentrant": lambda: traced_gpt2("reentrant"),
    "gpt2_non_reentrant": lambda: traced_gpt2("non_reentrant"),
    "gpt2_lora": lambda: traced_gpt2(lora=True, freeze_base=True),
    "twice_called": lambda: captured(TwiceCalled(), torch.randn(2, 4)),
    "mha": lambda: captured(MHAModel(), torch.randn(2, 5, 8)),
    "uncaptured": uncaptured,
}


@pytest.mark.parametrize("name", GRAPHS)
def test_skeleton_and_every_chunk_give_the_eager_payload(name: str) -> None:
    g = GRAPHS[name]()
    eager = plain(page.graph(g))
    for loaded in ([""], ["", *initial_expanded(g)]):
        skeleton = plain(lazy_payload(g, loaded))
        assert skeleton["edges"] == [] and skeleton["loaded"][0] == ""
        check_wiring(skeleton, eager)
        everything = plain(chunks(g, ["", *(c["id"] for c in g.calls)]))
        assert reassemble(skeleton, everything) == eager


def test_skeleton_holds_the_loaded_calls_members_and_closes_over_ancestors() -> None:
    g = traced_gpt2()
    skeleton = lazy_payload(g, ["blocks.1.attn", "blocks.1.attn"])
    assert skeleton["loaded"] == ["", "blocks.1", "blocks.1.attn"]
    member_of = dict(g.nx.nodes(data="call"))
    assert [n["id"] for n in skeleton["nodes"]] == [n for n in g.nx if member_of[n] in skeleton["loaded"]]
    assert {k: skeleton[k] for k in ("version", "calls", "ghosts", "meta", "folds")} == {
        k: page.graph(g)[k] for k in ("version", "calls", "ghosts", "meta", "folds")}
    with pytest.raises(GradvizError, match="'nope'"):
        lazy_payload(g, ["nope"])


def test_a_chunk_holds_exactly_the_direct_members_of_its_call() -> None:
    g = traced_gpt2()
    eager = page.graph(g)
    lazy = LazyGraph(g)
    for call in ["", *(c["id"] for c in g.calls)]:
        (chunk,) = lazy.chunks([call])
        assert chunk["call"] == call
        assert chunk["nodes"] == [n for n in eager["nodes"] if n["call"] == call]
        members = {n["id"] for n in chunk["nodes"]}
        touching = [k for k, e in enumerate(eager["edges"]) if e["source"] in members or e["target"] in members]
        assert chunk["edge_shapes"] == [(k, eager["edges"][k]["shape"]) for k in touching]
    assert [c["call"] for c in lazy.chunks(["blocks.1", "", "blocks.1"])] == ["blocks.1", ""]
    with pytest.raises(GradvizError, match=r"'blocks\.9'"):
        chunks(g, ["blocks.0", "blocks.9"])


def test_widget_answers_load_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    g = traced_gpt2()
    w = gv.GraphWidget(g, lazy=True)
    assert w.lazy and "wiring" in w.graph_data and w.unfolded == []
    assert w.graph_data["loaded"] == ["", *initial_expanded(g)]
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(w, "send", sent.append)
    w._on_page_message(w, {"id": 4, "kind": "load", "body": {"calls": ["blocks.0.mlp", "blocks.1"]}}, [])
    assert sent == [{"id": 4, "kind": "reply", "ok": True, "body": {"chunks": chunks(g, ["blocks.0.mlp", "blocks.1"])}}]
    for i, bad in enumerate((["blocks.0", "no such call"], "blocks.0", None, [3])):
        sent.clear()
        w._on_page_message(w, {"id": i, "kind": "load", "body": {"calls": bad}}, [])
        assert sent == [{"id": i, "kind": "reply", "ok": False, "error": sent[0]["error"]}]
        assert sent[0]["error"].startswith("load:")
    sent.clear()
    w._on_page_message(w, {"id": 9, "kind": "load", "body": {"calls": ["no such call"]}}, [])
    assert "no such call" in sent[0]["error"]
    json.dumps(w.graph_data)


def test_lazy_by_itself_above_the_threshold_unless_recording(monkeypatch: pytest.MonkeyPatch) -> None:
    g = traced_gpt2()
    monkeypatch.setattr(lazy_mode, "LAZY_NODES", len(g) - 1)
    assert gv.GraphWidget(g).lazy
    assert not gv.GraphWidget(g, lazy=False).lazy
    assert not gv.GraphWidget(g, recording={"passes": 0, "steps": [], "values": {}}).lazy
    assert not gv.GraphWidget(uncaptured()).lazy  # no module calls: nothing to open later
    monkeypatch.setattr(lazy_mode, "LAZY_NODES", len(g))
    w = gv.GraphWidget(g)
    assert not w.lazy and "wiring" not in w.graph_data and w.graph_data["folds"] == fold_groups(g)


def test_lazy_on_an_uncaptured_graph_loads_everything_at_once() -> None:
    g = uncaptured()
    w = gv.GraphWidget(g, lazy=True)
    assert w.graph_data["loaded"] == [""] and len(w.graph_data["nodes"]) == len(g)


def test_six_gpt2_blocks_fold_into_one_group() -> None:
    assert fold_groups(gpt2(6)) == [
        {"id": "fold:blocks.0", "calls": [f"blocks.{i}" for i in range(6)], "parent": "", "type": "Block"}
    ]
    assert page.graph(gpt2(6))["folds"] == lazy_payload(gpt2(6))["folds"]


def test_a_lora_block_splits_the_run() -> None:
    g = gpt2(6, lora_blocks=(2,))
    assert [f["calls"] for f in fold_groups(g)] == [["blocks.3", "blocks.4", "blocks.5"]]
    runs = [f["calls"] for f in fold_groups(g, fold_min=2) if f["parent"] == ""]
    assert runs == [["blocks.0", "blocks.1"], ["blocks.3", "blocks.4", "blocks.5"]]


def test_runs_shorter_than_fold_min_stay_unfolded() -> None:
    assert FOLD_MIN == 3
    assert fold_groups(gpt2(FOLD_MIN - 1)) == []
    assert [f["calls"] for f in fold_groups(gpt2(FOLD_MIN))] == [[f"blocks.{i}" for i in range(FOLD_MIN)]]


def test_resnet_stages_of_different_widths_do_not_fold() -> None:
    g = captured(ResNet18Like(width=8), torch.randn(2, 3, 8, 8))
    # layer2..layer4 have the same modules and ops (projected shortcut, then an identity block) but
    # different widths: shapes are part of the structure, so no "3 x Sequential" hides them.
    assert fold_groups(g) == []
    assert fold_groups(g, fold_min=2) == [
        {"id": "fold:layer1.0", "calls": ["layer1.0", "layer1.1"], "parent": "layer1", "type": "BasicBlock"}
    ]


def test_fold_groups_are_runs_of_consecutive_siblings() -> None:
    g = gpt2(6, lora_blocks=(2,))
    calls = g.calls
    for f in fold_groups(g, fold_min=2):
        siblings = [c["id"] for c in calls if c["parent"] == f["parent"] and c["size"] > 0]
        start = siblings.index(f["calls"][0])
        assert siblings[start:start + len(f["calls"])] == f["calls"]
        assert {c["type"] for c in calls if c["id"] in f["calls"]} == {f["type"]}


def script(page: str, element_id: str) -> str:
    found = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', page, re.S)
    return found.group(1) if found else ""


def test_exported_lazy_page_embeds_every_chunk_and_stays_small(tmp_path: Path) -> None:
    g = gpt2(6)
    lazy, eager = gv.GraphWidget(g, lazy=True), gv.GraphWidget(g, lazy=False)
    lazy_page, eager_page = page_html(lazy.page_snapshot()), page_html(eager.page_snapshot())
    eager_answers = json.loads(script(eager_page, "gradviz-answers"))
    assert eager_answers["load"] == {}  # an eager page has everything drawn: nothing to load
    embedded = json.loads(script(lazy_page, "gradviz-answers"))
    # The reply bodies the kernel's own handler gives, one load per call: the fake model only looks them up.
    index = LazyGraph(g)
    assert embedded["load"] == {c: plain(load_body(index, {"calls": [c]})) for c in index.all_chunks()}
    assert embedded["values"] == eager_answers["values"]  # the leaves' summaries do not depend on laziness
    assert set(embedded["load"]) == {"", *(c["id"] for c in g.calls)}
    bundle = len(script(lazy_page, "gradviz-bundle"))
    assert len(lazy_page) - bundle <= 1.2 * (len(eager_page) - bundle)
    assert len(lazy_page) <= 1.2 * len(eager_page)
    # A widget with overrides: the page keeps its lazy skeleton and its answers.
    out = gv.export_html(lazy, tmp_path / "lazy.html", expanded=["blocks.0"])
    assert 'id="gradviz-answers"' in out.read_text()


def test_lazy_records_have_exactly_the_contract_fields() -> None:
    from test_page_contract import assert_conforms

    g = gpt2(3)
    skeleton = plain(lazy_payload(g))
    assert {"wiring", "loaded", "edge_shapes", "folds"} <= set(skeleton)
    assert_conforms(skeleton, contract.GraphPayload)
    (chunk,) = plain(chunks(g, ["blocks.0"]))
    assert_conforms(chunk, contract.Chunk)
    sent: list[Any] = []
    w = gv.GraphWidget(g, lazy=True)
    w.send = sent.append  # type: ignore[method-assign]
    w._on_page_message(w, {"id": 1, "kind": "load", "body": {"calls": ["blocks.0"]}}, [])
    w._on_page_message(w, {"id": 2, "kind": "load", "body": {"calls": ["nope"]}}, [])
    for reply in plain(sent):
        assert_conforms(reply, contract.PageReply)


def test_skeleton_carries_the_shapes_of_edges_touching_loaded_calls() -> None:
    g = gpt2(4)
    eager = plain(page.graph(g))
    skeleton = plain(lazy_payload(g, ["", "blocks.1"]))
    members = {n["id"] for n in skeleton["nodes"]}
    touching = [k for k, e in enumerate(eager["edges"]) if e["source"] in members or e["target"] in members]
    assert skeleton["edge_shapes"] == [[k, eager["edges"][k]["shape"]] for k in touching]
    assert any(shape is not None for _, shape in skeleton["edge_shapes"])

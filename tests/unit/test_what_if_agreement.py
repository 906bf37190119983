"""The page's what-if answer (js/src/features/whatif/state.ts) equals Python's ``AutogradGraph.what_if``.

Real models are traced here (GPT-2 small with and without non-reentrant checkpoint, a module called
twice, nn.MultiheadAttention, a chunk/unbind program with multi-output nodes); for each, many seeded
random toggle sets in the page's string form (``"n5:0"``, ``"n5"``, ``"call:<id>"``; freeze leaf ids
and ``"call:<id>"``) go to the TypeScript rule through a small node CLI, and the same toggles,
translated, go to ``g.what_if``. Lost leaves, pruned nodes and runs/total must be equal in every case.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, MHAModel, TwiceCalled, gpt2_loss
from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.widgets.page import graph as graph_payload
from gradviz_nb.widgets.page.toggles import toggle_args

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "js"
ESBUILD = JS / "node_modules" / ".bin" / "esbuild"
CASES_PER_GRAPH = 80

Toggles = dict[str, list[str]]


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("node") is None or not ESBUILD.exists():
        why = "node or js/node_modules missing: cd js && npm ci"
        if os.environ.get("CI"):  # CI has node: a missing one there is a broken setup, not a reason to skip
            pytest.fail(why)
        pytest.skip(why)
    out = tmp_path_factory.mktemp("whatif") / "whatif_cli.mjs"
    subprocess.run(
        [
            str(ESBUILD),
            "src/features/whatif/whatif_cli.ts",
            "--bundle",
            "--platform=node",
            "--format=esm",
            f"--outfile={out}",
            "--log-level=warning",
        ],
        cwd=JS,
        check=True,
    )
    return out


def js_answers(cli: Path, payload: dict[str, Any], toggles: list[Toggles]) -> list[dict[str, Any]]:
    done = subprocess.run(
        ["node", str(cli)],
        input=json.dumps({"payload": payload, "toggles": toggles}),
        capture_output=True,
        text=True,
        check=True,
    )
    answers: list[dict[str, Any]] = json.loads(done.stdout)["answers"]
    return answers


# --- the corpus -------------------------------------------------------------------------------------


def _captured(model: torch.nn.Module, loss_of: Callable[[torch.nn.Module], torch.Tensor]) -> AutogradGraph:
    with gv.capture(model) as cap:
        loss = loss_of(model)
    return gv.trace(loss, model=model, capture=cap)


def gpt2() -> AutogradGraph:
    torch.manual_seed(0)
    return _captured(GPT2(GPT2Config.small_test()), gpt2_loss)  # type: ignore[arg-type]


def gpt2_checkpointed() -> AutogradGraph:
    torch.manual_seed(0)
    return _captured(GPT2(GPT2Config.small_test("non_reentrant")), gpt2_loss)  # type: ignore[arg-type]


def twice_called() -> AutogradGraph:
    torch.manual_seed(0)
    return _captured(TwiceCalled(), lambda m: m(torch.randn(3, 4)).pow(2).sum())


def mha() -> AutogradGraph:
    torch.manual_seed(0)
    return _captured(MHAModel(), lambda m: m(torch.randn(2, 5, 8)).sum())


def chunk_unbind() -> AutogradGraph:
    """Multi-output nodes: chunk (two outputs, different consumers), unbind (four outputs, one consumer),
    split, and a weight used twice (x * x style)."""
    torch.manual_seed(0)
    w1, w2, w3, b = (torch.randn(4, 4, requires_grad=True) for _ in range(4))
    x = torch.randn(4, 4)
    h = x @ w1
    c0, c1 = h.chunk(2, dim=1)
    rows = (c0 @ w2[:2]).relu().unbind(0)
    s0, s1 = torch.split(h * w3, [1, 3], dim=0)
    out = torch.stack(rows).sum() + (c1 * c1).sum() + s0.sum() * s1.tanh().sum() + (b * b).sum()
    return gv.trace([out, (c1 + b[:, 2:]).sum()], names={"w1": w1, "w2": w2, "w3": w3, "b": b})


CORPUS: dict[str, Callable[[], AutogradGraph]] = {
    "gpt2": gpt2,
    "gpt2_checkpoint": gpt2_checkpointed,
    "twice_called": twice_called,
    "mha": mha,
    "chunk_unbind": chunk_unbind,
}


# --- toggles in the page's form, and their Python translation ----------------------------------------


def to_python(g: AutogradGraph, toggles: Toggles) -> tuple[list[object], list[str]]:
    """The translation the widget itself uses (``GraphWidget.what_if``)."""
    return toggle_args(g, toggles)


def usable(g: AutogradGraph, detach: list[str], freeze: list[str]) -> bool:
    """Python raises on a module that holds no op (detach) or no named leaf (freeze): skip those."""
    try:
        g.what_if(*to_python(g, {"detach": detach, "freeze": freeze}))
    except GradvizError:
        return False
    return True


def toggle_sets(g: AutogradGraph, payload: dict[str, Any], seed: int) -> Iterator[Toggles]:
    rng = random.Random(seed)
    nodes = payload["nodes"]
    tensors = sorted({f"{e['source']}:{e['output_nr']}" for e in payload["edges"]})
    outputs: dict[str, set[int]] = {}
    for e in payload["edges"]:
        outputs.setdefault(e["source"], set()).add(e["output_nr"])
    multi = sorted(f"{n}:{o}" for n, outs in outputs.items() if len(outs) > 1 for o in outs)
    ops = [n["id"] for n in nodes if n["kind"] == "op"]
    leaves = [n["id"] for n in nodes if n["kind"] == "leaf"]
    calls = [c["id"] for c in payload["calls"]]
    call_detach = [f"call:{c}" for c in calls if usable(g, [f"call:{c}"], [])]
    call_freeze = [f"call:{c}" for c in calls if usable(g, [], [f"call:{c}"])]

    yield {"detach": [], "freeze": []}
    for item in call_detach:  # every box's outputs, alone
        yield {"detach": [item], "freeze": []}
    for item in call_freeze:
        yield {"detach": [], "freeze": [item]}
    for item in multi:  # one output of a multi-output node cuts only that output
        yield {"detach": [item], "freeze": []}
    for _ in range(CASES_PER_GRAPH):
        pools = [(tensors, 3), (ops, 2), (multi, 2), (call_detach, 1)]
        detach = [x for pool, k in pools if pool for x in rng.sample(pool, rng.randint(0, min(k, len(pool))))]
        freeze = [
            x
            for pool, k in [(leaves, 3), (call_freeze, 1)]
            if pool
            for x in rng.sample(pool, rng.randint(0, min(k, len(pool))))
        ]
        yield {"detach": detach, "freeze": freeze}


@pytest.mark.parametrize("name", list(CORPUS))
def test_page_and_python_agree(cli: Path, name: str) -> None:
    g = CORPUS[name]()
    payload = json.loads(json.dumps(graph_payload(g)))
    cases = list(toggle_sets(g, payload, seed=len(name)))
    answers = js_answers(cli, payload, cases)
    assert len(answers) == len(cases)
    lost_somewhere = 0
    for toggles, page in zip(cases, answers, strict=True):
        detach, freeze = to_python(g, toggles)
        py = g.what_if(detach=detach, freeze=freeze)
        assert sorted(page["lost_ids"]) == sorted(py.lost_ids), (name, toggles)
        assert sorted(page["pruned"]) == sorted(py.pruned), (name, toggles)
        assert (page["runs"], page["total"]) == (py.runs, py.total), (name, toggles)
        lost_somewhere += bool(py.lost_ids)
    # The corpus really exercises the rule: most toggle sets cost some leaf its gradient, some none.
    assert lost_somewhere > len(cases) // 4, (name, lost_somewhere, len(cases))
    assert lost_somewhere < len(cases)


def test_multi_output_detach_cuts_only_that_output(cli: Path) -> None:
    g = chunk_unbind()
    payload = json.loads(json.dumps(graph_payload(g)))
    chunk = next(
        n
        for n, d in g.nx.nodes(data=True)
        if d["op"] == "SplitBackward0" and len({o for _, _, s in g.nx.out_edges(n, data="slots") for o, _ in s}) == 2
    )
    one, both = f"{chunk}:0", chunk
    page_one, page_both = js_answers(cli, payload, [{"detach": [one], "freeze": []}, {"detach": [both], "freeze": []}])
    assert set(page_one["pruned"]) < set(page_both["pruned"])
    assert sorted(page_one["lost_ids"]) == sorted(g.what_if(detach=[(chunk, 0)]).lost_ids)

"""The page's checkpointing answer (js/src/features/checkpoint/state.ts) equals Python's
``checkpoint_what_if`` on the same table and payload: real traced models (GPT-2 small, GPT-2 with LoRA
adapters behind a frozen embedding, where reentrant checkpoints cut gradients) and seeded random marks
(mixed modes, nested calls). Bytes per call, totals, recompute, cuts and lost leaves must be equal, and one
answer on GPT-2 124M's graph must take under 50 ms (measured in the node process)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.analysis.checkpointing import checkpoint_what_if, table
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.widgets.page import graph as graph_payload

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "js"
ESBUILD = JS / "node_modules" / ".bin" / "esbuild"


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("node") is None or not ESBUILD.exists():
        why = "node or js/node_modules missing: cd js && npm ci"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    out = tmp_path_factory.mktemp("checkpoint") / "checkpoint_cli.mjs"
    subprocess.run([str(ESBUILD), "src/features/checkpoint/checkpoint_cli.ts", "--bundle", "--platform=node",
                    "--format=esm", f"--outfile={out}", "--log-level=warning"], cwd=JS, check=True)
    return out


def js_answers(cli: Path, g: AutogradGraph, marks: list[dict[str, str]]) -> tuple[list[dict[str, Any]], float]:
    data = {"payload": graph_payload(g), "table": table(g), "marks": marks}
    done = subprocess.run(["node", str(cli)], input=json.dumps(data), capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    return out["answers"], float(out["ms"])


def _traced(model: torch.nn.Module, loss_of: Callable[[], torch.Tensor]) -> AutogradGraph:
    with gv.capture(model) as cap:
        loss = loss_of()
    return gv.trace(loss, model=model, capture=cap)


def gpt2() -> AutogradGraph:
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=3, n_head=4, d_model=32, vocab=101, block_size=16))
    return _traced(model, lambda: gpt2_loss(model, batch=2))


def lora_frozen_embedding() -> AutogradGraph:
    torch.manual_seed(0)
    model = add_lora(GPT2(GPT2Config(n_layer=3, n_head=4, d_model=32, vocab=101, block_size=16)))
    return _traced(model, lambda: gpt2_loss(model, batch=2))


def _marks(g: AutogradGraph, seed: int, n: int = 40) -> list[dict[str, str]]:
    rng = random.Random(seed)
    calls = [c["id"] for c in g.calls if c["size"] > 0]
    blocks = [c["id"] for c in g.calls if c["type"] == "Block"]
    out: list[dict[str, str]] = [{}, dict.fromkeys(blocks, "reentrant"), dict.fromkeys(blocks[::2], "non_reentrant")]
    for _ in range(n):
        out.append({c: rng.choice(["non_reentrant", "reentrant"]) for c in rng.sample(calls, rng.randint(1, 4))})
    return out


def _same(g: AutogradGraph, marks: dict[str, str], js: dict[str, Any]) -> None:
    py = checkpoint_what_if(g, marks)
    assert (js["before"], js["after"], js["kept"]) == (py.before, py.after, py.kept), marks
    assert js["perCallBefore"] == py.per_call_before and js["perCallAfter"] == py.per_call_after, marks
    assert (js["recomputedOps"], js["recomputedFlops"], js["forwardOps"], js["forwardFlops"]) == (
        py.recomputed_ops, py.recomputed_flops, py.forward_ops, py.forward_flops), marks
    assert (js["cut"], sorted(js["lost"]), js["ignored"]) == (py.cut, sorted(py.lost_ids), py.ignored), marks
    assert (js["nested"], js["inexact"]) == (py.nested, py.inexact), marks


@pytest.mark.parametrize("make", [gpt2, lora_frozen_embedding])
def test_page_and_python_agree(cli: Path, make: Callable[[], AutogradGraph]) -> None:
    g = make()
    marks = _marks(g, seed=1)
    answers, _ = js_answers(cli, g, marks)
    for m, a in zip(marks, answers, strict=True):
        _same(g, m, a)
    assert any(a["lost"] for a in answers)  # the corpus exercises cuts (a reentrant wpe, a frozen embedding)


def test_gpt2_124m_answers_within_50_ms(cli: Path) -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config())
    g = _traced(model, lambda: gpt2_loss(model, batch=1, seq=64))
    blocks = [c["id"] for c in g.calls if c["type"] == "Block"]
    marks = [dict.fromkeys(blocks[::2], "non_reentrant"), dict.fromkeys(blocks[::2], "reentrant")]
    answers, ms = js_answers(cli, g, marks * 5)
    assert ms / len(answers) < 50, f"{ms / len(answers):.1f} ms per answer"
    _same(g, marks[0], answers[0])

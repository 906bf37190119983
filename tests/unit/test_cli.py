"""The gradviz command over unmodified scripts (examples/cli/), each run as a subprocess: the doctor names the bug
in a plain loop, a transformers.Trainer run, a Lightning run and a 2-rank torchrun FSDP2 run, and is silent with
exit 0 on the healthy version of each (the script's own errors passing through: test_cli_inprocess.py)."""

from __future__ import annotations

import json
import os
import runpy
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from gradviz_nb import schema

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "cli"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def gradviz(*argv: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gradviz_nb", *argv], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=timeout, check=False, stdin=subprocess.DEVNULL)


def torchrun(*argv: str) -> subprocess.CompletedProcess[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1", "--master_addr=127.0.0.1",
           f"--master_port={port}", "-m", "gradviz_nb", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600, check=False,
                          stdin=subprocess.DEVNULL)


def _diagnosis(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    record: dict[str, object] = json.loads(proc.stdout)
    jsonschema.validate(record, schema.load_schema())
    return record


CASES = {  # script -> (the bug's kind, the parameters it must name)
    "plain_loop.py": ("detached", {"0.lora_A.weight"}),
    "trainer_lora.py": ("detached", {f"base_model.model.transformer.h.{i}.attn.c_attn.lora_A.default.weight"
                                     for i in (0, 1)}),
    "lightning_frozen.py": ("frozen", {"net.0"}),
}


@pytest.mark.parametrize("script", list(CASES))
def test_doctor_names_the_bug_and_is_silent_on_the_healthy_run(script: str) -> None:
    if script == "trainer_lora.py":
        pytest.importorskip("transformers")
        pytest.importorskip("peft")
    if script == "lightning_frozen.py":
        pytest.importorskip("lightning")
    kind, targets = CASES[script]
    bug = gradviz("doctor", "--json", f"examples/cli/{script}", "--bug")
    assert bug.returncode == 1, bug.stderr[-3000:]
    found = _diagnosis(bug)
    assert {(f["kind"], f["target"]) for f in found["findings"]} == {(kind, t) for t in targets}  # type: ignore[union-attr]
    assert "step 2/2 observed" in bug.stderr  # progress while the script ran
    healthy = gradviz("doctor", f"examples/cli/{script}")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr[-3000:]
    assert "ok, nothing found" in healthy.stdout


def test_doctor_under_torchrun_fsdp2() -> None:
    bug = torchrun("doctor", "--json", "examples/cli/fsdp2_train.py", "--bug")
    assert bug.returncode != 0
    found = _diagnosis(bug)
    # the optimizer holds the tensors fully_shard replaced: every real parameter gets a gradient nothing applies
    assert {(f["kind"], f["target"]) for f in found["findings"]} == {  # type: ignore[union-attr]
        ("not-in-optimizer", n) for n in ("0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias")}
    healthy = torchrun("doctor", "examples/cli/fsdp2_train.py")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr[-3000:]
    assert healthy.stdout.count("ok, nothing found") == 1  # rank 0 reports


def test_continue_lets_the_script_finish_and_still_fails_on_findings() -> None:
    proc = gradviz("doctor", "--continue", "examples/cli/plain_loop.py", "--bug", "--steps", "5")
    assert proc.returncode == 1 and "[detached] 0.lora_A.weight" in proc.stdout
    assert "trained 5 steps" in proc.stdout  # the script's own last line


def test_nan_names_the_backward_birth() -> None:
    proc = gradviz("nan", "--json", "examples/cli/nan_backward.py")
    assert proc.returncode == 1, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    jsonschema.validate(rec, schema.load_schema())
    assert (rec["phase"], rec["op"], rec["node"], rec["cause"]) == ("backward", "aten.div", "LogBackward0", "0/0")
    assert rec["line"].endswith("nan_backward.py:17")
    # the script's model, found through its optimizer, names what the NaN reached (not "a tensor of shape [8, 4]")
    assert {"gradient of 0.weight", "gradient of 0.bias"} <= set(rec["reached"]), rec["reached"]
    assert not any("shape" in r for r in rec["reached"]), rec["reached"]
    ok = gradviz("nan", "examples/cli/plain_loop.py")
    assert ok.returncode == 0 and "no NaN/Inf reached" in ok.stdout


def test_why_prove_and_graph_over_a_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    why = gradviz("why", "--json", "--param", "0.lora_A.weight", "examples/cli/plain_loop.py", "--bug")
    rec = json.loads(why.stdout)
    jsonschema.validate(rec, schema.load_schema())
    assert why.returncode == 1 and (rec["status"], rec["kind"]) == ("none", "detached")
    proof = json.loads(gradviz("prove", "--json", "--param", "0.lora_A.weight", "examples/cli/plain_loop.py",
                               "--bug").stdout)
    jsonschema.validate(proof, schema.load_schema())
    # the truth: the healthy script's first step, run here with plain PyTorch
    monkeypatch.setattr(sys, "argv", ["plain_loop.py", "--steps", "1"])
    ran = runpy.run_path(str(EXAMPLES / "plain_loop.py"))
    truth = float(ran["model"][0].lora_A.weight.grad.norm())
    assert proof["proven"] and proof["before"] is None
    assert proof["after"] == pytest.approx(truth, rel=1e-5)
    page = tmp_path / "step.html"
    drawn = gradviz("graph", "-o", str(page), "examples/cli/plain_loop.py")
    assert drawn.returncode == 0 and page.stat().st_size > 10_000 and "gradvizModel" in page.read_text()

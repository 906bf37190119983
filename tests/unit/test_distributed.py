"""gradviz under FSDP2 and DDP, end to end: one `torchrun --nproc_per_node=2` launch (gloo, CPU) of
tests/unit/distributed_worker.py, whose results (per rank, as JSON) are checked here against what PyTorch
really held on each rank: `full_tensor()`, the engines' reduced `.grad`, storage sizes, a real re-run."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).with_name("distributed_worker.py")
TOL = 1e-6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("distributed")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(WORKER.parents[2]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(WORKER), str(out)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun timed out:\n{e.stdout}\n{e.stderr}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("engine", ["fsdp2", "ddp"])
def test_every_tool_works_under_the_engine(ranks: list[dict[str, Any]], engine: str) -> None:
    for rank, result in enumerate(ranks):
        assert result["rank"] == rank and result["world"] == 2
        r = result[engine]
        # trace / GraphWidget: leaves named by their parameter names, the engine's nodes labelled with a note
        assert r["leaf_names"] == r["trainable"] == r["payload_leaves"]
        assert len(r["trainable"]) == 12
        assert r["engines"] == [engine]
        label = {"fsdp2": "FSDP post-backward hook", "ddp": "DDP sink"}[engine]
        op = {"fsdp2": "RegisterPostBackwardFunctionBackward", "ddp": "_DDPSinkBackward"}[engine]
        assert [s[:2] for s in r["special"]] == [[op, label]]
        assert r["payload_labels"] == [label]
        assert "reduce-scatter" in r["special"][0][2] if engine == "fsdp2" else "all-reduce" in r["special"][0][2]
        assert r["schema_problems"] == []  # label / note / distributed are declared data-model keys
        assert r["unlabelled_ops"] == []  # no mystery op (every op is an ATen backward or a named one)
        assert r["notes"] == r["payload_notes"] and any(("FSDP2" if engine == "fsdp2" else "Distributed")
                                                        in n for n in r["notes"])
        # memory per rank: FSDP2 freed the blocks' all-gathered parameters after forward, DDP holds them all
        assert r["mem_block_param_bytes"] == r["truth_block_param_bytes"]
        assert (r["mem_block_param_bytes"] == 0) == (engine == "fsdp2")
        assert r["mem_activations"] > 0
        # what_if agrees with a real re-run (output really detached, adapter really frozen)
        assert r["what_if_lost"] == r["truth_lost"] and len(r["truth_lost"]) == 5
        # record_backward: .grad untouched; leaf gradients averaged over ranks = the engine's reduced .grad
        assert r["record_grad_untouched"] and r["record_steps"] > 100
        assert r["record_vs_reduced_grad"] <= TOL
        # Dashboard: the full gradients' norms, no flag on a healthy model
        assert r["dashboard_norm_err"] <= TOL and r["dashboard_overlay"] and r["dashboard_flags"] == []
        # doctor: healthy, and every rank's parameters and .grad put back exactly
        assert r["doctor_ok"] and r["doctor_findings"] == []
        assert r["doctor_restored"] and r["doctor_grads_none"]
        # a healthy monitor: no flag at all (no replica-mismatch, no unused-on-rank false alarm)
        assert r["monitor_flags"] == []
    assert ranks[0][engine]["monitor_history"] == ranks[1][engine]["monitor_history"]


def test_fsdp2_monitor_gathers_each_ranks_shard_statistics(ranks: list[dict[str, Any]]) -> None:
    per_rank = ranks[0]["fsdp2"]["monitor_per_rank"]  # (records, world, layers, ...) norm
    assert ranks[1]["fsdp2"]["monitor_per_rank"] is None  # only rank 0 gathers
    history = ranks[0]["fsdp2"]["monitor_history"]
    assert len(per_rank) == len(history) == 3 and len(per_rank[0]) == 2
    for record in range(3):
        for rank in range(2):  # what rank 0 holds for rank r is rank r's own shard norm
            own = ranks[rank]["fsdp2"]["monitor_own"][record]
            assert per_rank[record][rank] == pytest.approx(own, rel=TOL)
        for layer, full in enumerate(history[record]):  # shards' squares add up to the full gradient's norm
            assert math.sqrt(sum(per_rank[record][r][layer] ** 2 for r in range(2))) == pytest.approx(full, rel=TOL)
    assert per_rank[0][0] != per_rank[0][1]  # the shards really differ


def test_ddp_monitor_gathers_identical_replicas(ranks: list[dict[str, Any]]) -> None:
    per_rank = ranks[0]["ddp"]["monitor_per_rank"]
    for record in range(3):
        assert per_rank[record][0] == per_rank[record][1] == ranks[0]["ddp"]["monitor_history"][record]
        assert per_rank[record][1] == pytest.approx(ranks[1]["ddp"]["monitor_own"][record], rel=1e-5)


def test_dtensor_saved_tensors_count_local_shards(ranks: list[dict[str, Any]]) -> None:
    for result in ranks:
        r = result["dtensor_memory"]
        local = r["truth_local"][0]
        assert local == r["full_bytes"] // 2  # really sharded over two ranks
        # self/other of w1 * w2 (parameters), other of w1 * x: three storages, each this rank's shard
        names = [(name, param) for name, _, _, param, _ in r["saved"]]
        assert sorted(names) == [("other", False), ("other", True), ("self", True)]
        assert all(b == sb == local for _, b, sb, _, _ in r["saved"])
        assert len({storage for *_, storage in r["saved"]}) == 3
        assert r["parameters"] == 2 * local
        assert local <= r["activations"] < 2 * local  # x's shard (plus the 4-byte scalar sums)
        assert [op for op, _ in r["special"]] == ["RedistributeBackward", "_ToTorchTensorBackward"]
        assert r["schema_problems"] == []


def test_replica_mismatch_names_the_rank_and_both_norms(ranks: list[dict[str, Any]]) -> None:
    r = ranks[0]["ddp_flags"]
    assert ranks[1]["ddp_flags"]["mismatch_flags"] == []  # verdicts live on rank 0
    flags = r["mismatch_flags"]
    # step 2: rank 1 scaled its gradients after backward; step 4: backward under no_sync(); 1 and 3 are healthy
    assert [(s, kind, target) for s, kind, target, _ in flags] == [
        (s, "replica-mismatch", layer) for s in (2, 4) for layer in r["layers"]]
    for step, _, layer, reason in flags:
        m = re.match(r"rank 1's gradient norm ([\d.e-]+) differs from rank 0's ([\d.e-]+);", reason)
        assert m, reason
        assert float(m.group(1)) == pytest.approx(ranks[1]["ddp_flags"]["mismatch_norms"][step - 1][layer], rel=1e-3)
        assert float(m.group(2)) == pytest.approx(r["mismatch_norms"][step - 1][layer], rel=1e-3)
        assert "DDP replicas must agree" in reason and "no_sync()" in reason


def test_unused_on_rank_names_exactly_the_skipped_branch(ranks: list[dict[str, Any]]) -> None:
    r = ranks[0]["ddp_flags"]
    assert [f[:3] for f in r["unused_flags"]] == [[2, "unused-on-rank", "module.branch"]]  # once, not per step
    _, _, _, reason, params = r["unused_flags"][0]
    assert sorted(params) == r["branch_params"]
    assert reason.startswith("backward on rank 1 never reached module.branch.weight, module.branch.bias, "
                             "which rank 0 did reach")
    assert "Expected to have finished reduction in the prior iteration" in reason
    # the truth it rests on: DDP (find_unused_parameters=True) filled rank 1's .grad anyway, so .grad cannot tell
    assert all(ranks[1]["ddp_flags"]["grad_present_after_skip"].values())
    assert ranks[1]["ddp_flags"]["unused_flags"] == []
    # the DDP sink node of find_unused_parameters=True is named, with a note
    assert [s[:2] for s in r["sink"]] == [["_DDPSinkBackward", "DDP sink"]]


def test_one_launch_is_quick(ranks: list[dict[str, Any]]) -> None:
    print("seconds per section:", ranks[0]["seconds"])
    assert sum(ranks[0]["seconds"].values()) < 120

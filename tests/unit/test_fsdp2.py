"""gradviz under FSDP2 (`fully_shard`, DTensor parameters and gradients): two gloo processes on CPU (torchrun).

tests/unit/fsdp2_worker.py traces, runs gradient_flow, layer_histograms and a GradientMonitor on a sharded tiny
GPT-2 and compares every number with the same functions on an unsharded copy holding the `full_tensor()`s.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).with_name("fsdp2_worker.py")
TOL = 1e-6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(tmp_path: Path, mode: str) -> list[dict[str, Any]]:
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(WORKER.parents[2]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
           "--master_addr=127.0.0.1", f"--master_port={port}", str(WORKER), str(tmp_path), mode]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun timed out:\n{e.stdout}\n{e.stderr}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_fsdp2_trace_flow_monitor_equal_full_tensor(tmp_path: Path, mode: str) -> None:
    ranks = _run(tmp_path, mode)
    for rank, r in enumerate(ranks):
        assert r["rank"] == rank and r["world"] == 2
        # the model really was sharded: every gradient is a DTensor
        assert r["dtensor_grads"] == len(r["trainable"]) - (1 if mode == "full" else 0)  # tied weight once
        # trace: every leaf named by its parameter name, no values read from sharded (unallocated) storage
        assert r["leaf_names"] == (sorted(r["names"]) if mode == "full" else r["trainable"])
        assert all(v is None for name, v in r["leaf_values"].items() if name.startswith("blocks."))
        # every statistic equals the unsharded computation on full_tensor() (rank by rank)
        assert set(r["errors"]) >= {"param.norm_vs_full_tensor", "param.weight_vs_full_tensor", "monitor.norm",
                                    "module.norm", "param.max_abs", "histogram"}
        assert all(err <= TOL for err in r["errors"].values()), r["errors"]
        assert r["flags"] == r["expected_flags"]
        # reduced, never gathered: one collective per call on a 1-D mesh (sums and maxima: one all-gather of a
        # few floats per parameter row, never a gradient)
        for calls in (r["monitor_calls"], r["flow_calls"]):
            assert calls.keys() == {"ALL_GATHER", "ALL_GATHER_FLOATS"} and calls["ALL_GATHER"] == 1, calls
            assert calls["ALL_GATHER_FLOATS"] <= 5 * 2 * r["n_params"]
        assert r["hist_calls"] == {"SUM": 1}
        assert r["update_calls"] == {"SUM": 1}
        assert "monitor.update" in r["errors"]
        assert r["steps"] == [1, 2, 3]
    assert ranks[0]["errors"] == ranks[1]["errors"]  # both ranks hold the same full-tensor statistics

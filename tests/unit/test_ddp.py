"""GradientMonitor under DDP: two gloo processes on CPU (torchrun), rank 0 gathers, rank 1 never renders."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("ddp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_monitor_under_ddp_two_gloo_ranks(tmp_path: Path) -> None:
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(WORKER.parents[2]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
           "--master_addr=127.0.0.1", f"--master_port={port}", str(WORKER), str(tmp_path)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun timed out:\n{e.stdout}\n{e.stderr}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    assert r0["world"] == 2 and r0["steps"] == [1, 3, 5] == r1["steps"]
    assert r0["rendered"] and not r1["rendered"]  # only rank 0 renders
    assert r1["per_rank"] is None
    per_rank = r0["per_rank"]  # (records, world, layers)
    assert len(per_rank) == 3 and len(per_rank[0]) == 2
    fc1 = r0["layers"].index("module.fc1")
    for record, step in enumerate(r0["steps"]):
        for rank, result in enumerate((r0, r1)):
            # what rank 0 gathered is what each rank recorded, and what the rank itself computed
            assert per_rank[record][rank] == result["history"][record]
            assert per_rank[record][rank][fc1] == pytest.approx(result["local_fc1"][step - 1], rel=1e-5)
        reduced = r0["reduced"][record][fc1]
        assert reduced == pytest.approx((per_rank[record][0][fc1] + per_rank[record][1][fc1]) / 2)
    # synchronised steps: both ranks hold the same all-reduced gradients; under no_sync (step 5) they differ
    assert per_rank[0][0][fc1] == pytest.approx(per_rank[0][1][fc1], rel=1e-5)
    assert not math.isclose(per_rank[2][0][fc1], per_rank[2][1][fc1], rel_tol=1e-3)

"""Crafted files against every reader: a clear GradvizError (or a refusal) within 1 s and 100 MB each.

The readers: ``GradientMonitor.load`` (through ``files.load_torch``), ``files.load_torch`` itself,
``gv.from_json``, and the bench CLI's ``--readme``. Each crafted file is a few kB; the worst declared an
expanded zero tensor of 30M ranks, which the monitor loader used to allocate by its shape (3.7 GB).

In process, ``tracemalloc`` sees Python's allocations only; the slow test loads every file again in a fresh
interpreter and reads the peak resident memory, which sees torch's too."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb import files

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S, LIMIT_MB = 1.0, 100


def _monitor_dict(tmp: Path) -> dict[str, Any]:
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    mon = gv.GradientMonitor(model, every=1)
    for _ in range(3):
        model(torch.randn(2, 3)).sum().backward()
        mon.step()
    mon.close()
    mon.save(tmp / "real.pt")
    data: dict[str, Any] = torch.load(tmp / "real.pt", weights_only=True)
    return data


def _expanded(t: torch.Tensor, dim: int, n: int) -> torch.Tensor:
    shape = list(t.shape)
    shape[dim] = n
    return torch.zeros((1,) * len(shape), dtype=t.dtype).expand(*shape)


def crafted_monitor_files(tmp: Path) -> dict[str, Path]:
    """name -> a crafted GradientMonitor.save file (each a few kB)."""
    real = _monitor_dict(tmp)
    count, layers, stats = real["hist"].shape
    variants: dict[str, Any] = {
        "rank_hist of 30M ranks (expanded zeros)": {
            **real, "rank_hist": torch.zeros(1, 1, 1, 1).expand(count, 30_000_000, layers, stats)},
        "hist of 30M layers (expanded)": {**real, "hist": _expanded(real["hist"], 1, 30_000_000)},
        "steps of 30M (expanded), count to match": {**real, "count": 30_000_000, "capacity": 30_000_000,
                                                     "steps": _expanded(real["steps"], 0, 30_000_000)},
        "a capacity of 2**40 (kept as a number: loads)": {**real, "capacity": 2**40},
        "a nested list 10,000 deep": {**real, "events": _deep(10_000)},
    }
    out = {}
    for i, (name, data) in enumerate(variants.items()):
        path = tmp / f"crafted{i}.pt"
        buf = io.BytesIO()
        try:
            torch.save(data, buf)
        except RecursionError:
            continue
        path.write_bytes(buf.getvalue())
        out[name] = path
    raw = (tmp / "real.pt").read_bytes()
    out["truncated"] = _write(tmp / "truncated.pt", raw[: len(raw) // 2])
    out["random bytes"] = _write(tmp / "random.pt", os.urandom(3000))
    out["a zip bomb (deflated zeros)"] = _zip_bomb(tmp / "bomb.pt")
    out["empty"] = _write(tmp / "empty.pt", b"")
    return out


def _deep(n: int) -> Any:
    v: Any = []
    for _ in range(n):
        v = [v]
    return v


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _zip_bomb(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\0" * 50_000_000)
    return path


def crafted_json(tmp: Path) -> dict[str, str]:
    x = torch.randn(2, 3, requires_grad=True)
    real = json.loads(gv.to_json(gv.trace((x * 2).sum())))
    huge = json.loads(json.dumps(real))
    for _, node in huge["nodes"]:
        node["shape"] = [30_000_000, 30_000_000]
    return {
        "nesting 100,000 deep": "[" * 100_000 + "]" * 100_000,
        "a number of 1e999999": '{"format": "gradviz_nb graph", "version": 1e999999}',
        "declared 30M x 30M shapes": json.dumps(huge),
        "not JSON": "\xff\xfe{",
        "3 MB of one string": json.dumps({"format": "x" * 3_000_000}),
    }


def _measured(load: Callable[[], Any]) -> tuple[BaseException | None, float, float]:
    tracemalloc.start()
    start = time.perf_counter()
    try:
        load()
        err: BaseException | None = None
    except Exception as e:  # what the reader raised: checked by the caller
        err = e
    took = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return err, took, peak


def test_every_crafted_monitor_file_is_one_clear_error_fast(tmp_path: Path) -> None:
    for name, path in crafted_monitor_files(tmp_path).items():
        assert path.stat().st_size < 200_000 or "bomb" in name, name
        err, took, peak = _measured(lambda p=path: gv.GradientMonitor.load(p))  # type: ignore[misc]
        if "loads" in name:
            assert err is None, f"{name}: {err!r}"
        else:
            assert isinstance(err, gv.GradvizError), f"{name}: {err!r}"
            assert str(path) in str(err) and "\n" not in str(err), f"{name}: {err}"
        assert took < LIMIT_S and peak < LIMIT_MB, f"{name}: {took:.2f} s, {peak:.0f} MB"


def test_the_expanded_tensor_is_refused_by_load_torch_itself(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    torch.save({"t": torch.zeros(1).expand(30_000_000)}, path)
    assert path.stat().st_size < 3000
    with pytest.raises(gv.GradvizError, match="declares 120,000,000 bytes but the file holds 4"):
        files.load_torch(path, "reader", "a test file")
    torch.save({"t": torch.arange(6.0).reshape(2, 3).t()}, path)  # a transposed view holds all its bytes
    assert files.load_torch(path, "reader", "a test file")["t"].shape == (3, 2)


def test_every_crafted_json_is_one_clear_error_or_a_true_graph_fast(tmp_path: Path) -> None:
    for name, text in crafted_json(tmp_path).items():
        err, took, peak = _measured(lambda t=text: gv.from_json(t))  # type: ignore[misc]
        assert err is None or isinstance(err, gv.GradvizError), f"{name}: {err!r}"
        assert took < LIMIT_S and peak < LIMIT_MB + 3 * len(text) / 1e6, f"{name}: {took:.2f} s, {peak:.0f} MB"


_CHILD = """
import resource, sys, time, pathlib
import gradviz_nb as gv
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
worst = 0.0
for p in sorted(pathlib.Path(sys.argv[1]).glob("crafted*.pt")) + [pathlib.Path(sys.argv[1]) / "bomb.pt"]:
    t = time.perf_counter()
    try:
        gv.GradientMonitor.load(p)
    except gv.GradvizError:
        pass
    worst = max(worst, time.perf_counter() - t)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base, worst)
"""


def test_crafted_files_stay_under_100_mb_of_resident_memory(tmp_path: Path) -> None:
    """A fresh interpreter loads every crafted monitor file; its peak RSS grows by under 100 MB (torch's own
    allocations included, which tracemalloc does not see)."""
    crafted_monitor_files(tmp_path)
    run = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-2000:]
    grown_mb, worst_s = map(float, run.stdout.split())
    assert grown_mb < LIMIT_MB and worst_s < LIMIT_S, (grown_mb, worst_s)

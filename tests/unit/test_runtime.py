"""The kernel's one runtime model (`gradviz_nb/widgets/runtime.py`): every GraphWidget references it, it
carries the shipped bundle, and hot reload (`ANYWIDGET_HMR=1`) goes back to the bundle per widget."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

import gradviz_nb as gv
from gradviz_nb.widgets import runtime
from gradviz_nb.widgets.runtime import BUNDLE, LOADER, GradvizRuntime, shared_runtime


def _loss() -> torch.Tensor:
    x = torch.randn(3, requires_grad=True)
    return (x * 2).sum()


def test_every_widget_references_the_one_runtime() -> None:
    a, b = gv.GraphWidget(_loss()), gv.GraphWidget(_loss())
    assert isinstance(a._runtime, GradvizRuntime) and a._runtime is b._runtime is shared_runtime()
    assert a.get_state()["_runtime"] == f"IPY_MODEL_{a._runtime.model_id}"
    assert a._esm == LOADER.read_text() and len(a._esm) < 10_000


def test_the_runtime_carries_the_shipped_bundle() -> None:
    rt = shared_runtime()
    data = BUNDLE.read_bytes()
    assert rt.encoding == "gzip+base64"
    assert gzip.decompress(base64.b64decode(rt.code)) == data
    assert rt.digest == hashlib.sha256(data).hexdigest()[:16]
    assert len(rt.code) < 0.5 * len(data)  # what makes the saved notebook small
    state = rt.get_state()
    assert state["_model_module"] == "@jupyter-widgets/base" and state["_view_name"] is None  # no view


def test_a_closed_runtime_is_replaced() -> None:
    old = shared_runtime()
    old.close()  # Widget.close_all(), or marimo closing a re-run cell's comms
    w = gv.GraphWidget(_loss())
    assert w._runtime is not old and w._runtime is shared_runtime() and w._runtime.comm is not None


def test_hot_reload_gives_each_widget_the_whole_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYWIDGET_HMR", "1")
    assert runtime.widget_esm() == BUNDLE
    monkeypatch.delenv("ANYWIDGET_HMR")
    assert runtime.widget_esm() == LOADER
    # The class reads it when gradviz_nb is imported: check a fresh interpreter end to end.
    script = (
        "import json, torch, gradviz_nb as gv\n"
        "w = gv.GraphWidget((torch.ones(2, requires_grad=True) * 2).sum())\n"
        "print(json.dumps({'esm': len(w._esm), 'runtime': w.get_state()['_runtime']}))\n"
    )
    env = {**os.environ, "ANYWIDGET_HMR": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                         timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"esm": len(BUNDLE.read_text()), "runtime": None}

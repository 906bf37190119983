"""The single-process parts of the clip as applied (``clip-norm``); the kind itself is proven on four torchrun
ranks in tests/unit/test_meshes.py."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from gradviz_nb.doctor.checks_clip import ratio_name
from gradviz_nb.doctor.grad_edits import clip_arguments
from gradviz_nb.probes.monitor.update import ClipCounter


def test_ratio_names_square_roots_of_rank_counts() -> None:
    assert ratio_name(math.sqrt(2), 4) == "√2"
    assert ratio_name(1 / math.sqrt(4) * 1.01, 4) == "1/√4"
    assert ratio_name(1.3, 4) == "1.3"
    assert ratio_name(math.sqrt(8), 4) == "2.83"  # more ranks than the run has: a plain number


class _Seen(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.args: list[Any] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") in ("_foreach_mul_", "mul_"):
            self.args.append(clip_arguments())
        return func(*args, **(kwargs or {}))


def test_clip_arguments_reads_torchs_clip_frame() -> None:
    w = torch.nn.Parameter(torch.ones(3, 4))
    w.grad = torch.full((3, 4), 2.0)  # norm 2 * sqrt(12)
    seen = _Seen()
    with seen:
        total = torch.nn.utils.clip_grad_norm_([w], 0.5)
    assert seen.args and seen.args[0] == (0.5, float(total))
    assert float(total) == pytest.approx(2 * math.sqrt(12), rel=1e-6)
    assert clip_arguments() is None  # no clipping call on the stack


def test_monitor_clip_applied_wants_the_full_norm_at_max_norm() -> None:
    clip = ClipCounter()
    clip.count(5.0, 1.0)  # the clip bit: a global clip leaves the full gradients' norm at exactly 1.0
    assert clip.applied(torch.tensor([0.6, 0.8]), world=4) is None
    reason = clip.applied(torch.tensor([1.0, 1.0]), world=4)  # sqrt(2) above: each of 2 shards clipped to 1.0
    assert reason is not None and "1/√2 (0.7071x)" in reason and "shards only" in reason
    reason = clip.applied(torch.tensor([0.5, 0.5]), world=4)  # sqrt(2) below: replicas counted as shards
    assert reason is not None and "√2 (1.414x)" in reason and "replicas" in reason
    clip.count(0.5, 1.0)  # under max_norm: the clip did not bite, nothing to compare
    assert clip.applied(torch.tensor([0.3, 0.3]), world=4) is None

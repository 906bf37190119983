"""The cut rule measures an op only when the call is worth it (the user's own), and remembers only what it
measured: a library's read of a parameter is never measured, and never answers for the user's same call."""

from __future__ import annotations

from typing import Any

import torch

from gradviz_nb.tracing import cuts


def _counting(calls: list[int]) -> Any:
    def op(t: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return (t * 2).detach()
    return op


def test_a_call_not_worth_measuring_is_not_measured_nor_remembered() -> None:
    calls: list[int] = []
    op = _counting(calls)
    w = torch.randn(5, requires_grad=True)
    assert cuts.carries_values(op, (w,), {}, worth=lambda: False) is False
    assert calls == []  # no probe run
    assert cuts.carries_values(op, (w,), {}, worth=lambda: True) is True  # measured now: the values matter
    assert len(calls) == 3
    asked: list[int] = []
    assert cuts.carries_values(op, (w,), {}, worth=lambda: bool(asked.append(1))) is True  # remembered
    assert asked == [] and len(calls) == 3

"""Linear in the number of parameters: counted operations, never times (``benchmarks/bench_params.py``
measures the times: ``gradient_flow`` and ``gv.doctor`` on 5,000 and 50,000 parameters in one module)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.probes.flow import stats as flow_stats
from gradviz_nb.tracing import ghosts


class Many(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.ps = nn.ParameterList([nn.Parameter(torch.randn(2)) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([(p * x).sum() for p in self.ps]).sum()


def test_module_stats_never_compares_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Grouping parameters under their modules is by identity: no record is compared with another (a list
    membership test compared field by field, n^2 / 2 comparisons for n parameters of one module)."""
    model = Many(300)
    model(torch.randn(2)).backward()
    compared = []
    original = flow_stats.ParamStats.__eq__

    def counting(self: Any, other: Any) -> Any:
        compared.append(1)
        return original(self, other)

    monkeypatch.setattr(flow_stats.ParamStats, "__eq__", counting)
    flow = gv.gradient_flow(model)
    assert compared == []
    whole = next(m for m in flow.modules if m.path == "")
    assert whole.n_params == 300 and next(m for m in flow.modules if m.path == "ps").n_params == 300


class _CountingDict(dict):  # type: ignore[type-arg]
    walks = 0

    def items(self) -> Any:
        type(self).walks += 1
        return super().items()


def test_a_detach_costs_its_cut_not_every_parameter() -> None:
    """Each ``detach()`` names the parameters it cuts from the cut itself: an optimizer step detaches every
    parameter, and walking all parameters per detach was quadratic (the doctor on 4,000: 169 s)."""
    model = Many(200)
    x = torch.randn(2)
    with gv.capture(model) as cap:
        observer = cap._observer
        assert observer is not None
        observer._param_names = observer._follower.param_names = _CountingDict(observer._param_names)
        loss = sum((p.detach() * x).sum() + (p * x).sum() for p in model.ps)
    assert _CountingDict.walks == 0
    cut = [g.cut for g in cap.ghosts if g.kind == "detached"]
    assert cut[:2] == [["ps.0"], ["ps.1"]] and len(cut) == 200  # the names stay right, in model order
    assert isinstance(loss, torch.Tensor)


def test_names_of_keeps_model_order() -> None:
    model = Many(5)
    follower = ghosts.GhostFollower(list(model.named_parameters()), lambda: None)
    ids = [id(p) for p in model.ps]
    assert follower.names_of({ids[3], ids[1], 12345}) == ["ps.1", "ps.3"]

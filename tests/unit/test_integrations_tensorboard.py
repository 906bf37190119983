"""GradientMonitor -> TensorBoard, read back with TensorBoard's own event reader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import gradviz_nb as gv
from gradviz_nb.integrations import write_tensorboard
from gradviz_nb.probes.flow import layer_histograms


def read(logdir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    return acc


Histograms = tuple[list[float], dict[str, list[float]]]


def train(logdir: Path, steps: int = 6) -> tuple[gv.GradientMonitor, dict[int, Histograms], dict[str, int]]:
    """A loop whose first layer is cut off (a no-grad verdict) writing live; returns the histograms PyTorch's
    gradients had at each recorded step, as the monitor saw them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    mon = gv.GradientMonitor(model, every=2, optimizer=opt, live_interval=0.0)
    log = mon.to_tensorboard(logdir, live=True)
    seen: dict[int, Histograms] = {}
    mon.on_record(lambda m: seen.setdefault(m.steps_seen, layer_histograms(model)))
    for _ in range(steps):
        opt.zero_grad()
        h = model[1](model[0](torch.randn(16, 5))).detach()  # model.0 never gets a gradient
        model[4](model[3](model[2](h))).pow(2).mean().backward()
        mon.step()
        opt.step()
    log.close()
    numel = {"2": 8 * 8 + 8, "4": 8 + 1}
    return mon, seen, numel


def test_scalars_flags_and_histograms_equal_the_monitor(tmp_path: Path) -> None:
    mon, seen, numel = train(tmp_path)
    acc = read(tmp_path)
    assert mon.steps == [1, 3, 5]
    tags = set(acc.Tags()["scalars"])
    for stat in ("norm", "max_abs", "ratio", "update"):
        hist = mon.history(stat)
        for c, layer in enumerate(mon.layers):
            tag = f"gradviz/{stat}/{layer}"
            col = hist[:, c]
            if not bool(torch.isfinite(col).any()):
                assert tag not in tags  # a layer without gradient has no point
                continue
            events = acc.Scalars(tag)
            assert [e.step for e in events] == mon.steps
            assert [e.value for e in events] == pytest.approx(col.tolist(), rel=1e-6)
    # the verdict: model.0 has no gradient on 3 recorded steps in a row (steps 1, 3, 5)
    flags = [(s, f) for s, f in mon.flags()]
    assert [(s, f.kind, f.target) for s, f in flags] == [(5, "no-grad", "0")]
    assert [(e.step, e.value) for e in acc.Scalars("gradviz/flags/no-grad")] == [(5, 1.0)]
    # histograms: one per layer with gradients per recorded step, counts = PyTorch's gradient values binned
    for layer in ("2", "4"):
        events = acc.Histograms(f"gradviz/log10_abs_grad/{layer}")
        assert [e.step for e in events] == mon.steps
        for e in events:
            edges, fractions = seen[e.step][0], seen[e.step][1][layer]
            value = e.histogram_value
            assert list(value.bucket_limit) == pytest.approx(edges)
            assert list(value.bucket) == pytest.approx([f * numel[layer] for f in fractions])
            assert value.num == pytest.approx(numel[layer])
    assert "gradviz/log10_abs_grad/0" not in acc.Tags()["histograms"]


def test_after_training_writes_scalars_but_no_stale_histograms(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    mon = gv.GradientMonitor(model)
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        model(torch.randn(8, 3)).sum().backward()
        mon.step()
    model.zero_grad(set_to_none=True)  # gradients gone: a histogram now would describe nothing
    write_tensorboard(mon, tmp_path)
    acc = read(tmp_path)
    assert [e.value for e in acc.Scalars("gradviz/norm/2")] == pytest.approx(mon.history("norm")[:, 1].tolist(),
                                                                              rel=1e-6)
    assert acc.Tags()["histograms"] == []
    # a writer passed in stays open and receives the same
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path / "mine")) as writer:
        log = write_tensorboard(mon, writer)
        assert log.writer is writer
    assert len(read(tmp_path / "mine").Scalars("gradviz/norm/0")) == 3
    with pytest.raises(gv.GradvizError, match="SummaryWriter or a directory"):
        write_tensorboard(mon, 42)

"""The monitor's verdict rules fed record arrays directly: no model, no hooks, no optimizer."""

from __future__ import annotations

import math

import torch

from gradviz_nb.probes.monitor.buffer import STATS, Records
from gradviz_nb.probes.monitor.update import ClipCounter
from gradviz_nb.probes.monitor.verdicts import (
    MonitorThresholds,
    UpdateRule,
    clip_flag,
    nan_flags,
    no_grad_runs,
    spikes,
)

TH = MonitorThresholds()


def _noisy(records: int, layers: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 1.0 + 0.5 * torch.rand(records, layers, generator=g)


def test_a_spike_fires_once_where_one_layer_jumps_past_the_factor() -> None:
    norms = _noisy(30, 3)
    norms[12, 1] *= 40.0
    norms[13, 1] *= 40.0  # still high: the same spike, not a second one
    found = spikes(norms, TH)
    assert [(r, c) for r, c, _ in found] == [(12, 1)]
    assert "x its running median" in found[0][2]


def test_jumps_under_the_factor_and_before_enough_records_are_no_spike() -> None:
    norms = _noisy(30, 2)
    norms[20, 0] *= 0.9 * TH.spike_factor  # under the factor: the median is at most 1.5
    norms[2, 1] *= 100.0  # only two earlier records: too few to judge
    assert [(r, c) for r, c, _ in spikes(norms / 1.5, TH)] == []


def test_a_spike_clipping_hid_is_found_from_the_preclip_factor() -> None:
    norms = _noisy(30, 2)
    clipped = norms.clone()
    factor = torch.ones(30)
    clipped[15] = norms[15] / norms[15].norm()  # what clip_grad_norm_(max_norm=1) leaves: total 1
    factor[15] = 1e5 * norms[15].norm()  # the step's gradients were 1e5 x the usual
    assert spikes(clipped, TH) == []  # the clipped norms look ordinary
    found = spikes(clipped, TH, preclip=factor)
    assert {c for r, c, _ in found if r == 15} == {0, 1}
    assert "pre-clip" in found[0][2]


def test_the_clip_counter_measures_whether_the_gradients_it_reads_were_clipped() -> None:
    clip = ClipCounter()
    clip.count(5000.0, 1.0)
    layers = torch.tensor([0.6, 0.8])  # total 1.0 = max_norm: already clipped
    total, factor = clip.preclip(layers)
    assert total == 5000.0 and math.isclose(factor, 5000.0)
    clip.count(5000.0, 1.0)
    total, factor = clip.preclip(layers * 5000.0)  # read before clipping: the norms are the pre-clip ones
    assert total == 5000.0 and factor == 1.0
    clip.count(0.5, 1.0)
    assert clip.preclip(torch.tensor([0.3, 0.4]))[1] == 1.0  # under max_norm: nothing clipped
    assert clip.clipped == (2, 3)


def test_no_grad_needs_the_whole_run_and_names_the_model_when_every_layer_is_empty() -> None:
    none = torch.zeros(6, 3, dtype=torch.bool)
    none[1:4, 2] = True  # three in a row on layer 2
    none[0:2, 0] = True  # two only on layer 0
    assert no_grad_runs(none, list(range(1, 7)), TH) == [(4, 2)]
    assert no_grad_runs(torch.ones(4, 2, dtype=torch.bool), [1, 2, 3, 4], TH) == [(3, -1)]


def test_update_size_after_warmup_for_runs_of_too_large_or_too_small_updates() -> None:
    rule = UpdateRule([0, 1, 1], 2, TH)
    fired = []
    for step in range(1, 40):
        zero, layers = rule.feed(step, [0.5, 1e-8], {}, set())
        fired += [(step, c) for c, _ in layers]
        assert zero == []
    first = TH.update_warmup + TH.update_records
    assert fired == [(first, 0), (first, 1)]
    decayed = UpdateRule([0], 1, TH)  # a schedule took the lr below 1e-3 of its peak: never "too small"
    assert not any(decayed.feed(s, [1e-8], {}, {0})[1] for s in range(1, 40))


def test_update_size_names_a_parameter_the_optimizer_never_moves() -> None:
    rule = UpdateRule([0, 0], 1, TH)
    hits = [rule.feed(s, [1e-3], {1: "lr=0 in param group 1 of SGD"}, set())[0] for s in range(1, 40)]
    assert [s for s, h in enumerate(hits, start=1) if h] == [TH.update_warmup + TH.update_records]
    assert hits[TH.update_warmup + TH.update_records - 1] == [1]


def test_nan_and_clipping_flags_from_arrays() -> None:
    norms = torch.tensor([[1.0, math.nan], [math.inf, 2.0]])
    missing = torch.tensor([[0.0, 1.0], [0.0, 0.0]])  # layer 1 of record 0 had no gradient: not a NaN
    flags = nan_flags(norms, missing, [10, 20], ["a", "b"], skipped=set())
    assert [(s, f.target) for s, f in flags] == [(20, "a")]
    assert nan_flags(norms, missing, [10, 20], ["a", "b"], skipped={20}) == []
    assert clip_flag(6, 10, 1.0, 10, TH)[0][1].kind == "clipping"
    assert clip_flag(5, 10, 1.0, 10, TH) == [] and clip_flag(9, 9, 1.0, 9, TH) == []


def test_the_buffer_halves_its_resolution_when_full_and_keeps_preclip_aligned() -> None:
    rec = Records(capacity=4, n_layers=1)
    for step in range(1, 14):
        if not (step - 1) % rec.stride:  # the monitor records every stride steps
            rec.add(torch.full((1, len(STATS)), float(step)), step, preclip=10.0 * step)
    assert rec.stride == 4
    steps = rec.steps[: rec.count].tolist()
    assert steps == [1, 5, 9, 13]
    assert rec.preclip[: rec.count].tolist() == [10.0 * s for s in steps]
    assert rec.column("norm")[:, 0].tolist() == [float(s) for s in steps]

"""The monitor's verdicts as rules over record arrays: no hooks, no model, testable by feeding numbers.

Each rule is fed one record at a time (the monitor does so online, so compaction loses no verdict) and
says which layers it fires on; :func:`spikes` and :func:`no_grad_runs` replay a whole record array.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gradviz_nb.kinds import Kind
from gradviz_nb.probes.flow import Flag


@dataclass(frozen=True)
class MonitorThresholds:
    """When the monitor raises a verdict (defaults chosen for zero flags on healthy MLP/SGD, MLP/Adam,
    transformer/AdamW and LoRA/AdamW loops, see ``tests/unit/test_monitor.py``).

    - ``no_grad_records``: a layer without any gradient (``None`` or exactly zero) on this many recorded
      steps in a row is ``no-grad``. One or two can be deliberate (alternating GAN losses, a branch not
      taken); three in a row rarely are.
    - ``spike_factor``, ``spike_window``, ``spike_min_records``: a layer's norm above ``spike_factor`` x the
      median of its previous ``spike_window`` recorded norms (once it has ``spike_min_records``) is a spike.
      Norms are the pre-clip ones when ``step(grad_norm=, max_norm=)`` reports a clipped step.
    - ``update_high``, ``update_low``, ``update_records``, ``update_warmup``: the rule of thumb is an update of
      ~1e-3 of the weights per step; ``update-size`` needs ``update_records`` recorded steps in a row above
      ``update_high`` or below ``update_low`` (or a parameter with a gradient that never moves), after the first
      ``update_warmup`` steps (zero-initialised weights, e.g. LoRA B, start with ratios near 1 that fall like
      1/t; learning-rate warm-up starts small). A learning rate a schedule has decayed below 1e-3 of its peak
      is deliberate and not judged too small.
    - ``clip_fraction``, ``clip_min_steps``: clipping is a finding when it bit on more than this fraction of at
      least ``clip_min_steps`` steps (otherwise a summary line).
    - ``not_in_optimizer_records``: without the optimizer, recorded steps in a row in which a parameter with a
      gradient did not move while others did.
    """

    no_grad_records: int = 3
    spike_factor: float = 10.0
    spike_window: int = 20
    spike_min_records: int = 5
    update_high: float = 1e-1
    update_low: float = 1e-6
    update_records: int = 5
    update_warmup: int = 20
    clip_fraction: float = 0.5
    clip_min_steps: int = 10
    not_in_optimizer_records: int = 3


def without_grad(missing: torch.Tensor, norms: torch.Tensor, per_layer: torch.Tensor,
                 trainable: torch.Tensor) -> torch.Tensor:
    """Per layer: every parameter lacks ``.grad`` or the gradient is exactly zero (trainable layers only)."""
    return ((missing >= per_layer) | (norms == 0)) & (trainable > 0)


class NoGradRule:
    """``no-grad``: a layer (or the whole model) without gradient on ``no_grad_records`` records in a row."""

    def __init__(self, n_layers: int, th: MonitorThresholds) -> None:
        self.th = th
        self.runs: list[list[int]] = [[] for _ in range(n_layers)]
        self.model_run: list[int] = []

    def feed(self, none: Sequence[bool], step: int) -> list[int]:
        """Layers whose run just reached the threshold; ``[-1]`` for the whole model (then ``model_run``)."""
        n_rec = self.th.no_grad_records
        if none and all(none):
            self.model_run.append(step)
            return [-1] if len(self.model_run) == n_rec else []
        self.model_run = []
        fired = []
        for c, is_none in enumerate(none):
            run = self.runs[c]
            if not is_none:
                run.clear()
                continue
            run.append(step)
            if len(run) == n_rec:
                fired.append(c)
        return fired


class SpikeRule:
    """``spike``: a layer's norm above ``spike_factor`` x the median of its previous recorded norms."""

    def __init__(self, n_layers: int, th: MonitorThresholds) -> None:
        self.th = th
        self.recent = torch.full((th.spike_window, n_layers), math.nan)
        self.i = 0
        self.spiking = [False] * n_layers

    def feed(self, norms: torch.Tensor, preclip: float = 1.0) -> list[tuple[int, str]]:
        """(layer, reason) of the spikes that start at this record. ``norms``: pre-clip layer norms;
        ``preclip``: the factor clipping divided them by on this step (1: not clipped)."""
        th = self.th
        have = (~torch.isnan(self.recent)).sum(dim=0).tolist()
        median = self.recent.nanmedian(dim=0).values.tolist()
        how = "" if preclip == 1.0 else (f" (pre-clip: clip_grad_norm_ divided this step's gradients by "
                                         f"{preclip:.4g})")
        out = []
        for c, (v, med, h) in enumerate(zip(norms.tolist(), median, have, strict=True)):
            spike = h >= th.spike_min_records and med > 0 and math.isfinite(v) and v > th.spike_factor * med
            if spike and not self.spiking[c]:
                out.append((c, f"gradient norm {v:.4g}{how} is {v / med:.1f}x its running median {med:.4g} over the "
                               f"previous {h} recorded steps"))
            self.spiking[c] = spike
        row = norms.clone()
        row[~(torch.isfinite(row) & (row > 0))] = math.nan
        self.recent[self.i % th.spike_window] = row
        self.i += 1
        return out


class UpdateRule:
    """``update-size`` from the optimizer's measured ``||Δw|| / ||w||`` per layer and record."""

    def __init__(self, owner: Sequence[int], n_layers: int, th: MonitorThresholds) -> None:
        self.owner, self.th = list(owner), th
        self.hi: list[list[int]] = [[] for _ in range(n_layers)]
        self.lo: list[list[int]] = [[] for _ in range(n_layers)]
        self.zero: list[list[int]] = [[] for _ in self.owner]

    def feed(self, step: int, ratios: Sequence[float], still: dict[int, str],
             decayed: set[int]) -> tuple[list[int], list[tuple[int, str]]]:
        """(parameters with a gradient the step never moved, ``update_records`` times now; (layer, reason)).
        ``still``: parameters with a nonzero gradient the step did not move; ``decayed``: parameters whose
        learning rate a schedule took below 1e-3 of its peak (never "too small")."""
        th = self.th
        if step <= th.update_warmup:
            return [], []
        for i, run in enumerate(self.zero):
            if i in still and i not in decayed:
                run.append(step)
            elif not math.isnan(ratios[self.owner[i]]):
                run.clear()
        zero = [i for i, run in enumerate(self.zero) if len(run) == th.update_records]
        zero_layers = {self.owner[i] for i, run in enumerate(self.zero) if run}
        out = []
        for c, r in enumerate(ratios):
            if math.isnan(r):
                continue
            hi, lo = self.hi[c], self.lo[c]
            hi.append(step) if r > th.update_high else hi.clear()
            all_decayed = all(i in decayed for i, o in enumerate(self.owner) if o == c)
            lo.append(step) if r < th.update_low and c not in zero_layers and not all_decayed else lo.clear()
            if len(hi) == th.update_records:
                out.append((c, f"optimizer updates are {r:.3g} of the weights' norm (||Δw||/||w|| > "
                               f"{th.update_high:g} on steps {steps_text(hi)}; ~1e-3 is typical): the learning rate "
                               "is likely too large for this layer"))
            if len(lo) == th.update_records:
                out.append((c, f"optimizer updates are {r:.3g} of the weights' norm (||Δw||/||w|| < "
                               f"{th.update_low:g} on steps {steps_text(lo)}; ~1e-3 is typical): this layer barely "
                               "learns; the learning rate is likely too small for it"))
        return zero, out


class RecordRules:
    """``no-grad`` and ``spike`` on each record: (kind, layer, reason, parameters) to report."""

    def __init__(self, layers: Sequence[str], params_of: Sequence[tuple[str, ...]], th: MonitorThresholds) -> None:
        self.layers, self.params_of, self.th = list(layers), list(params_of), th
        self.no_grad = NoGradRule(len(self.layers), th)
        self.spike = SpikeRule(len(self.layers), th)

    def feed(self, step: int, none: Sequence[bool], trainable: Sequence[int], norms: torch.Tensor,
             preclip: float) -> list[tuple[Kind, str, str, tuple[str, ...]]]:
        """``none``: layers without gradient; ``trainable``: trainable parameters per layer; ``norms``: post-clip
        layer norms, ``preclip``: the factor clipping divided them by (1: not clipped)."""
        n_rec = self.th.no_grad_records
        out: list[tuple[Kind, str, str, tuple[str, ...]]] = []
        for c in self.no_grad.feed(none, step):
            if c < 0:
                out.append(("no-grad", "", f"no trainable parameter has a gradient on steps "
                            f"{steps_text(self.no_grad.model_run)} ({n_rec} recorded steps in a row): is "
                            "monitor.step() called after backward() and before optimizer.zero_grad()?", ()))
                continue
            out.append(("no-grad", self.layers[c], f"no gradient on steps {steps_text(self.no_grad.runs[c])} "
                        f"({n_rec} recorded steps in a row): .grad is None or exactly zero for all {trainable[c]} "
                        "trainable parameters; backward does not reach this layer (detached, unused, or cut "
                        "upstream?)", self.params_of[c]))
        for c, why in self.spike.feed(norms * preclip, preclip):
            out.append(("spike", self.layers[c], why, ()))
        return out


def spikes(norms: torch.Tensor, th: MonitorThresholds,
           preclip: torch.Tensor | None = None) -> list[tuple[int, int, str]]:
    """(record, layer, reason) of every spike in a (records x layers) array of post-clip norms; ``preclip``:
    per record, the factor clipping divided the gradients by (NaN or 1: not clipped)."""
    rule = SpikeRule(norms.shape[1], th)
    out = []
    for r in range(norms.shape[0]):
        f = 1.0 if preclip is None or not math.isfinite(float(preclip[r])) else max(float(preclip[r]), 1.0)
        out += [(r, c, why) for c, why in rule.feed(norms[r] * f, f)]
    return out


def no_grad_runs(none: torch.Tensor, steps: Sequence[int], th: MonitorThresholds) -> list[tuple[int, int]]:
    """(step, layer or -1 for the model) of every ``no-grad`` verdict in a (records x layers) bool array."""
    rule = NoGradRule(none.shape[1], th)
    return [(steps[r], c) for r in range(none.shape[0]) for c in rule.feed(none[r].tolist(), steps[r])]


def nan_flags(norms: torch.Tensor, missing: torch.Tensor, steps: Sequence[int], layers: Sequence[str],
              skipped: set[int]) -> list[tuple[int, Flag]]:
    """NaN/Inf layer norms of layers that had gradients, except on steps a GradScaler skipped."""
    out = []
    for r, c in zip(*torch.nonzero(~torch.isfinite(norms) & (missing == 0), as_tuple=True), strict=True):
        if steps[r] not in skipped:
            out.append((steps[r], Flag("nan", layers[c], "gradient norm is NaN or Inf")))
    return out


def clip_flag(hits: int, steps: int, max_norm: float | None, at: int, th: MonitorThresholds) -> list[tuple[int, Flag]]:
    """``clipping`` when it bit on more than ``clip_fraction`` of at least ``clip_min_steps`` steps."""
    if steps < th.clip_min_steps or hits <= th.clip_fraction * steps:
        return []
    return [(at, Flag("clipping", "", f"gradient clipping bit on {hits} of {steps} steps (pre-clip norm > "
                      f"max_norm={max_norm:g}): the clipped direction, not the gradient's size, drives training; "
                      "raise max_norm or lower the learning rate"))]


def steps_text(steps: Sequence[int]) -> str:
    return ", ".join(map(str, steps[:6])) + (f", ... {steps[-1]}" if len(steps) > 6 else "")

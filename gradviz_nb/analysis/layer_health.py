"""Vanishing and exploding layers: rules that hold whatever the rest of the model looks like.

Comparing each layer with the median layer (the old rule) calls the healthy top of a vanishing
network "exploding" and a network whose every layer explodes "fine". These rules judge each layer by
what its gradient would do to its own weights, and the network by how that changes with depth:

* **exploding**: one SGD step at a usual learning rate (``lr``, 1e-3) would move the weights by more
  than their own norm (gradient/weight ratio above ``1/lr``); or the largest gradient element is within
  100x of what the dtype can hold; or the layer's norm is ``peer`` x above every other layer's while
  its ratio exceeds 1.
* **vanishing**: an SGD step even at learning rate 1 would change the weights by less than the dtype's
  resolution (ratio below ``finfo.eps``: 1.2e-7 in float32, 7.8e-3 in bfloat16) and, when the caller can
  check it on the tensors (``moved``), such a step really changes fewer than 1% of the layer's values once
  rounded to their dtype (a bfloat16 LayerNorm: its weights near 1.0 may not move, its biases near 0 do,
  so the layer learns); or the ratio falls
  steadily with depth (Spearman rank correlation >= 0.9 over at least 6 layers) by more than
  ``trend`` x from the output layers to the input layers, and this layer sits more than ``trend`` x
  under the output layers; or the gradient is exactly zero.

Ratios use the weight norm, floored at 1e-3 per element so that zero-initialised layers (biases,
LoRA's B) get a finite ratio. Adapter layers are skipped for vanishing (LoRA's A gets an exactly zero
gradient until B moves); the dead-adapter check covers them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["LayerHealth", "Thresholds", "check_layers"]

WEIGHT_FLOOR = 1e-3  # per element: the "own size" of a zero-initialised weight
MIN_TREND_LAYERS = 6
MIN_TREND_CORRELATION = 0.9
MOVE_FLOOR = 0.01  # a layer an SGD step at lr 1 changes in at least this fraction of its values can learn


@dataclass(frozen=True)
class Thresholds:
    """The knobs of :func:`check_layers` (see the module docstring).

    ``lr``: the usual learning rate of the exploding test. ``peer``: how far above every other layer a
    norm must be. ``trend``: the fall from output to input layers that counts as vanishing.
    ``abs_vanishing`` / ``abs_exploding``: optional absolute limits on a layer's gradient norm.
    """

    lr: float = 1e-3
    peer: float = 100.0
    trend: float = 10.0
    abs_vanishing: float | None = None
    abs_exploding: float | None = None


@dataclass(frozen=True)
class LayerHealth:
    """What :func:`check_layers` needs of one layer, in depth order (inputs first)."""

    path: str
    norm: float
    max_abs: float
    weight_norm: float
    numel: int
    dtype: str  # the coarsest dtype among its parameters, e.g. "float32"


@dataclass(frozen=True)
class LayerVerdict:
    kind: Literal["vanishing", "exploding"]  # of gradviz_nb.kinds.Kind
    path: str
    reason: str


def _finfo(dtype: str) -> torch.finfo:
    try:
        return torch.finfo(getattr(torch, dtype))
    except (AttributeError, TypeError):
        return torch.finfo(torch.float32)


def _ratio(layer: LayerHealth) -> float:
    return layer.norm / max(layer.weight_norm, WEIGHT_FLOOR * math.sqrt(max(layer.numel, 1)))


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = float(rank)
    return ranks


def _spearman(values: Sequence[float]) -> float:
    """Rank correlation of ``values`` with their position (1: rising steadily with position)."""
    n = len(values)
    ranks = _ranks(values)
    d2 = sum((r - i) ** 2 for i, r in enumerate(ranks))
    return 1 - 6 * d2 / (n * (n * n - 1))


def _exploding(layer: LayerHealth, others_max: float, t: Thresholds) -> str:
    ratio = _ratio(layer)
    info = _finfo(layer.dtype)
    if ratio * t.lr > 1:
        return (f"gradient/weight ratio {ratio:.3g}: one SGD step at lr {t.lr:g} would move these weights by "
                f"{ratio * t.lr:.3g}x their own norm")
    if layer.max_abs > info.max / 100:
        return (f"largest gradient element {layer.max_abs:.3g} is within 100x of {layer.dtype}'s maximum "
                f"({info.max:.3g})")
    if others_max > 0 and layer.norm > t.peer * others_max and ratio > 1:
        return (f"gradient norm {layer.norm:.3g} is {layer.norm / others_max:.3g}x the largest of every other layer "
                f"({others_max:.3g}), and its gradient/weight ratio is {ratio:.3g}")
    if t.abs_exploding is not None and layer.norm > t.abs_exploding:
        return f"gradient norm {layer.norm:.3g} is above the absolute limit {t.abs_exploding:g}"
    return ""


def _below_resolution(layer: LayerHealth, moved: Callable[[str], float | None] | None) -> str:
    ratio = _ratio(layer)
    eps = _finfo(layer.dtype).eps
    if ratio >= eps:
        return ""
    # The ratio is a norm: some values (small weights, zero biases) may still move. Ask the tensors.
    frac = moved(layer.path) if moved is not None else None
    if frac is None:
        return (f"gradient/weight ratio {ratio:.3g}: an SGD step even at lr 1 would change these weights by less "
                f"than {layer.dtype}'s resolution ({eps:.2g}), so they cannot learn")
    if frac >= MOVE_FLOOR:
        return ""
    return (f"gradient/weight ratio {ratio:.3g} is under {layer.dtype}'s resolution ({eps:.2g}): an SGD step even at "
            f"lr 1 would change {frac:.2%} of these values once rounded to {layer.dtype}, so they cannot learn")


def _trend(layers: Sequence[LayerHealth], t: Thresholds) -> dict[str, str]:
    """Layers under a steady fall of the ratio from the output layers back to the inputs."""
    live = [m for m in layers if m.norm > 0]
    if len(live) < MIN_TREND_LAYERS:
        return {}
    logs = [math.log10(_ratio(m)) for m in live]
    k = max(2, len(live) // 4)
    top = statistics.median(logs[-k:])
    if top - statistics.median(logs[:k]) <= math.log10(t.trend):
        return {}
    rho = _spearman(logs)
    if rho < MIN_TREND_CORRELATION:
        return {}
    names = ", ".join(m.path or "(top)" for m in live[-k:])
    out = {}
    for m, lg in zip(live, logs, strict=True):
        if top - lg > math.log10(t.trend):
            out[m.path] = (f"gradient/weight ratio {10**lg:.3g} is {10 ** (top - lg):.3g}x under the output layers' "
                           f"(median {10**top:.3g} over {names}); the ratio falls steadily with depth "
                           f"(rank correlation {rho:.2f} over {len(live)} layers)")
    return out


def check_layers(layers: Sequence[LayerHealth], t: Thresholds, skip_vanishing: set[str],
                 moved: Callable[[str], float | None] | None = None) -> list[LayerVerdict]:
    """Vanishing / exploding verdicts for ``layers`` (depth order, inputs first; finite norms only).

    ``moved(path)``: the fraction of the layer's values one SGD step at lr 1 really changes in their dtype
    (None: unknown); asked only for layers whose ratio is under their dtype's resolution."""
    out: list[LayerVerdict] = []
    norms = [m.norm for m in layers]
    trend = _trend([m for m in layers if m.path not in skip_vanishing], t)
    for i, m in enumerate(layers):
        others_max = max((n for j, n in enumerate(norms) if j != i), default=0.0)
        why = _exploding(m, others_max, t)
        if why:
            out.append(LayerVerdict("exploding", m.path, why))
            continue
        if m.path in skip_vanishing:
            continue
        if m.norm == 0:
            why = "gradient is exactly zero (underflow, a dead activation or a zero multiplier on the path)"
        else:
            why = _below_resolution(m, moved) or trend.get(m.path, "")
            if not why and t.abs_vanishing is not None and m.norm < t.abs_vanishing:
                why = f"gradient norm {m.norm:.3g} is below the absolute limit {t.abs_vanishing:g}"
        if why:
            out.append(LayerVerdict("vanishing", m.path, why))
    return out

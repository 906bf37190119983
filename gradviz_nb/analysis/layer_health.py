"""Vanishing and exploding layers: each verdict names a measured consequence, never a comparison alone.

A layer is judged by what one optimizer step does to its own weights: at the optimizer's learning rate
when it is known (its param group's ``lr``; an adaptive optimizer such as Adam moves each element by about
``lr * rms(g) / (rms(g) + eps)``, whatever the gradient's size), else at ``Thresholds.lr`` (1e-3) as an SGD step.

* **exploding**: that step (SGD-like optimizers only: an adaptive step does not grow with the gradient) would
  move the weights by more than their own norm; or the largest gradient element is within 100x of what
  the dtype can hold; or the norm is above the user's ``abs_exploding``. A layer whose norm is ``peer`` x
  above every other layer's is NOT exploding for that alone: it usually stands out because the gradient
  vanished under it, and the layers under it are judged (and named) instead.
* **vanishing**: the gradient is exactly zero; or an SGD step even at learning rate 1 would change the
  weights by less than the dtype's resolution (ratio below ``finfo.eps``: 1.2e-7 in float32, 7.8e-3 in
  bfloat16) and, when the caller can check it on the tensors (``moved``), such a step really changes
  fewer than 1% of the layer's values once rounded to their dtype; or a million steps like the one above
  would move the weights by less than 10% of their norm (:data:`HORIZON_STEPS`, :data:`HORIZON_MOVE`; at a
  guessed learning rate only where the ratio also falls steadily with depth: Spearman rank correlation
  >= 0.9 over at least 6 layers, more than ``trend`` x); or the norm is under the user's ``abs_vanishing``.
  The trend and a layer standing out above are context in the reason, never a verdict by themselves: a
  healthy deep network's lower layers often get 10-100x smaller ratios than its head and learn fine.

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
HORIZON_STEPS = 1_000_000  # a long training run, in optimizer steps
HORIZON_MOVE = 0.1  # weights that HORIZON_STEPS steps move by less than this fraction of their norm barely learn


@dataclass(frozen=True)
class Thresholds:
    """The knobs of :func:`check_layers` (see the module docstring).

    ``lr``: the learning rate of an SGD step when the layer's optimizer is unknown. ``peer``: how far above
    every other layer a norm must be to "stand out" (context for the layers under it). ``trend``: the fall
    of the ratio from output to input layers that is named as context.
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
    lr: float | None = None  # the optimizer's learning rate for this layer (None: unknown, Thresholds.lr)
    adaptive_eps: float | None = None  # an adaptive optimizer's eps (Adam's 1e-8); None: SGD-like step
    optimizer: str = ""  # the optimizer's class name, for the reason


@dataclass(frozen=True)
class LayerVerdict:
    """The layer-health rule's answer for one layer: ``kind`` (``vanishing`` or ``exploding``), the layer's
    ``path``, and the ``reason`` with the numbers measured; ``gradient_flow`` turns it into a
    :class:`~gradviz_nb.probes.flow.Flag`."""
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


def step_move(layer: LayerHealth, t: Thresholds) -> tuple[float, str]:
    """(``||Δw|| / ||w||`` of one optimizer step from this gradient, the words for that step)."""
    lr = layer.lr if layer.lr is not None else t.lr
    own = max(layer.weight_norm, WEIGHT_FLOOR * math.sqrt(max(layer.numel, 1)))
    if layer.adaptive_eps is None:
        name = f"{layer.optimizer} " if layer.optimizer else "SGD "
        where = f"at your lr {lr:g}" if layer.lr is not None else f"at lr {lr:g}"
        return lr * layer.norm / own, f"one {name}step {where}"
    rms = layer.norm / math.sqrt(max(layer.numel, 1))
    per_element = lr * rms / (rms + layer.adaptive_eps)
    return per_element * math.sqrt(max(layer.numel, 1)) / own, (
        f"one {layer.optimizer} step at your lr {lr:g} (about lr x rms(g)/(rms(g)+eps) = {per_element:.3g} per "
        f"element, rms(g) {rms:.3g}, eps {layer.adaptive_eps:g})")


LossStep = Callable[[str], "tuple[float, float] | None"]
"""``loss_step(path)``: the loss before and after stepping only that layer as :func:`step_move` says (None:
no loss to evaluate)."""


def _exploding(layer: LayerHealth, t: Thresholds, loss_step: LossStep | None = None) -> str:
    ratio = _ratio(layer)
    info = _finfo(layer.dtype)
    move, how = step_move(layer, t)
    if layer.adaptive_eps is None and move > 1:
        return f"gradient/weight ratio {ratio:.3g}: {how} would move these weights by {move:.3g}x their own norm"
    losses = loss_step(layer.path) if loss_step is not None else None
    if losses is not None and not losses[1] <= losses[0]:  # NaN after the step counts as raised
        return (f"{how} on this layer alone raises the loss from {losses[0]:.4g} to {losses[1]:.4g} (it moves the "
                f"weights by {move:.3g} of their norm; gradient/weight ratio {ratio:.3g})")
    if layer.max_abs > info.max / 100:
        return (f"largest gradient element {layer.max_abs:.3g} is within 100x of {layer.dtype}'s maximum "
                f"({info.max:.3g})")
    if t.abs_exploding is not None and layer.norm > t.abs_exploding:
        return f"gradient norm {layer.norm:.3g} is above the absolute limit {t.abs_exploding:g}"
    return ""


def _beyond_horizon(layer: LayerHealth, t: Thresholds, on_trend: bool) -> str:
    """The horizon rule. At a guessed learning rate (the optimizer unknown) it also needs the steady fall with
    depth: a small ratio alone may be the user's lr's business (a damped branch learns at a larger lr)."""
    move, how = step_move(layer, t)
    if move * HORIZON_STEPS >= HORIZON_MOVE or (layer.lr is None and not on_trend):
        return ""
    return (f"gradient/weight ratio {_ratio(layer):.3g}: {how} moves these weights by {move:.3g} of their norm, so "
            f"{HORIZON_STEPS:,} such steps would move them by {move * HORIZON_STEPS:.3g} of it: they barely learn")


def _below_resolution(layer: LayerHealth, t: Thresholds, moved: Callable[[str], float | None] | None) -> str:
    """Under the dtype's resolution: the step (at the optimizer's lr when known, else SGD at lr 1) changes the
    weights by less than ``finfo.eps`` of their norm, and ``moved`` confirms it on the values themselves."""
    ratio = _ratio(layer)
    eps = _finfo(layer.dtype).eps
    move, how = step_move(layer, t) if layer.lr is not None else (ratio, "an SGD step even at lr 1")
    if move >= eps:
        return ""
    # The ratio is a norm: some values (small weights, zero biases) may still move. Ask the tensors.
    frac = moved(layer.path) if moved is not None else None
    if frac is None:
        return (f"gradient/weight ratio {ratio:.3g}: {how} would change these weights by less than {layer.dtype}'s "
                f"resolution ({eps:.2g}), so they cannot learn")
    if frac >= MOVE_FLOOR:
        return ""
    return (f"gradient/weight ratio {ratio:.3g} is under {layer.dtype}'s resolution ({eps:.2g}): {how} would change "
            f"{frac:.2%} of these values once rounded to {layer.dtype}, so they cannot learn")


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
            out[m.path] = (f"the ratio is {10 ** (top - lg):.3g}x under the output layers' (median {10**top:.3g} "
                           f"over {names}) and falls steadily with depth (rank correlation {rho:.2f} over "
                           f"{len(live)} layers)")
    return out


def _stands_out(layers: Sequence[LayerHealth], i: int, t: Thresholds) -> bool:
    """Is layer ``i``'s norm ``peer`` x above every other layer's?"""
    others = max((m.norm for j, m in enumerate(layers) if j != i), default=0.0)
    return others > 0 and layers[i].norm > t.peer * others


def _standing_out(layers: Sequence[LayerHealth], t: Thresholds, exploding: set[int]) -> dict[int, str]:
    """Layer index -> context for the layers under a layer that stands out without exploding."""
    norms = [m.norm for m in layers]
    out: dict[int, str] = {}
    for i, m in enumerate(layers):
        if i not in exploding and _stands_out(layers, i, t):
            for j in range(i):
                times = m.norm / max(norms[j], 1e-300)
                out[j] = (f"; {m.path or '(top)'} above gets a gradient norm {m.norm:.3g}, {times:.3g}x this layer's: "
                          "it stands out because the gradient vanishes under it, not because it explodes")
    return out


def check_layers(layers: Sequence[LayerHealth], t: Thresholds, skip_vanishing: set[str],
                 moved: Callable[[str], float | None] | None = None,
                 loss_step: LossStep | None = None) -> list[LayerVerdict]:
    """Vanishing / exploding verdicts for ``layers`` (depth order, inputs first; finite norms only).

    ``moved(path)``: the fraction of the layer's values one step really changes in their dtype (the layer's
    optimizer step when known, else SGD at lr 1; None: unknown); asked only for steps under the resolution.
    ``loss_step(path)`` (:data:`LossStep`): asked only for layers standing out ``peer`` x above every other one."""
    out: list[LayerVerdict] = []
    trend = _trend([m for m in layers if m.path not in skip_vanishing], t)
    exploding = {i: _exploding(m, t, loss_step if _stands_out(layers, i, t) else None) for i, m in enumerate(layers)}
    above = _standing_out(layers, t, {i for i, why in exploding.items() if why})
    for i, m in enumerate(layers):
        why = exploding[i]
        if why:
            out.append(LayerVerdict("exploding", m.path, why))
            continue
        if m.path in skip_vanishing:
            continue
        if m.norm == 0:
            why = "gradient is exactly zero (underflow, a dead activation or a zero multiplier on the path)"
        else:
            why = _below_resolution(m, t, moved) or _beyond_horizon(m, t, m.path in trend)
            if not why and t.abs_vanishing is not None and m.norm < t.abs_vanishing:
                why = f"gradient norm {m.norm:.3g} is below the absolute limit {t.abs_vanishing:g}"
            if why:
                why += (f"; {trend[m.path]}" if m.path in trend else "") + above.get(i, "")
        if why:
            out.append(LayerVerdict("vanishing", m.path, why))
    return out

"""Gradient statistics per parameter and per module path, and per-layer histograms of ``log10 |g|``.

All per-parameter numbers are computed as a few batched tensor ops and read back in one go; a ``DTensor``
(FSDP2 shard) is reduced with one ``SUM`` and one ``MAX`` all-reduce, never gathered. Reads ``.grad``;
changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.backward import reductions
from gradviz_nb.probes.sharded import all_reduce_rows, is_dtensor, local_part
from gradviz_nb.tracing.compiled import real_name, unwrap_compiled

__all__ = ["HIST_RANGE", "ModuleStats", "ParamStats", "dense_values", "layer_histograms", "magnitudes",
           "module_stats", "param_stats"]


@dataclass(frozen=True)
class ParamStats:
    """Gradient statistics of one parameter (a tied weight appears once, with all its ``names``)."""

    name: str
    names: tuple[str, ...]
    module: str
    shape: tuple[int, ...]
    numel: int
    requires_grad: bool
    has_grad: bool
    norm: float
    max_abs: float
    mean: float
    zero_frac: float
    nonfinite: int
    weight_norm: float
    ratio: float  # gradient L2 norm / weight L2 norm (nan without a gradient, inf for a zero weight)
    dtype: str = "float32"
    sparse: bool = False  # a sparse gradient (nn.Embedding(sparse=True)); statistics cover all its elements


@dataclass(frozen=True)
class ModuleStats:
    """Statistics over every parameter under a module path (``""`` is the whole model).

    ``norm`` is the L2 norm of all those gradients together; ``mean`` and ``zero_frac`` are weighted by
    element count; only parameters that have a gradient count, ``n_with_grad`` says how many.
    """

    path: str
    type: str
    depth: int
    n_params: int
    n_with_grad: int
    numel: int
    norm: float
    max_abs: float
    mean: float
    zero_frac: float
    nonfinite: int
    weight_norm: float
    ratio: float
    dtype: str = "float32"  # the coarsest dtype among its parameters (largest resolution step)


def named_params(model: nn.Module) -> list[tuple[list[str], nn.Parameter]]:
    """Each distinct parameter once, with every name it has (tied weights have several). Names are the
    model's own: ``torch.compile``'s ``_orig_mod`` wrapper (whole model or a submodule) is left out."""
    seen: dict[int, tuple[list[str], nn.Parameter]] = {}
    for name, p in unwrap_compiled(model).named_parameters(remove_duplicate=False):
        seen.setdefault(id(p), ([], p))[0].append(real_name(name))
    return list(seen.values())


def dense_values(g: torch.Tensor, wide: bool = True) -> tuple[torch.Tensor, int]:
    """The stored values of a gradient as a dense float tensor, and how many implicit zeros it has.

    A sparse gradient (``nn.Embedding(sparse=True)``) stores only the rows that were used; duplicates
    are summed first (``coalesce``), so norms and extremes are those of the real gradient. A complex
    gradient is read as its magnitudes ``|g|``: the norm, max-abs, zeros and non-finite count are the
    complex tensor's own (never its real part's); ``mean`` is then the mean magnitude. ``wide=False``
    keeps the gradient's own floating dtype (no float32 copy of a float16 or float64 gradient).
    """
    if g.is_sparse:
        values = magnitudes(g.detach().coalesce()._values())
        return (values.float() if wide else values), g.numel() - values.numel()
    values = magnitudes(g.detach())
    if not wide and values.is_floating_point():
        return values, 0
    return values.float(), 0


def magnitudes(t: torch.Tensor) -> torch.Tensor:
    """``|t|`` for a complex tensor (real, same norm and extremes), else ``t``: converting a complex tensor
    to a real dtype would keep only its real part."""
    return t.abs() if t.is_complex() else t


def _batched_stats(grads: list[torch.Tensor]) -> list[list[float]]:
    """Per gradient: [norm, max_abs, sum, zeros, nonfinite], one read-back for all of them.

    Each gradient is read four times, allocating nothing of its size: norm, sum and extremes by
    :func:`~gradviz_nb.probes.backward.reductions` (exact at any magnitude in any dtype: float32 outside
    2**-60..2**60 in float64, float16 in float32, never a float64 copy of a float32 gradient in range),
    zeros by ``count_nonzero``. Non-finite elements are counted only where the max or min says there are
    some (both propagate NaN and Inf)."""
    if not grads:
        return []
    rows: list[torch.Tensor] = []
    values: list[tuple[torch.Tensor, int]] = []
    for g in grads:
        v, implicit = dense_values(g, wide=False)
        values.append((v, implicit))
        if v.numel() == 0:
            rows.append(torch.zeros(5, dtype=torch.float64))
            continue
        t_norm, t_total, t_top, t_low = reductions(v)
        t_zeros = v.numel() - torch.count_nonzero(v)
        row = (t_norm, t_top, t_low, t_total, t_zeros)
        rows.append(torch.stack([x.to(torch.float64, copy=False).cpu() for x in row]))
    table: list[list[float]] = torch.stack(rows).tolist()
    out = []
    for (v, implicit), (norm, top, low, total, zeros) in zip(values, table, strict=True):
        bad = 0.0
        if not (math.isfinite(top) and math.isfinite(low)):  # the rare path: count them
            bad = float((~torch.isfinite(v)).sum())
        out.append([norm, max(top, -low) if v.numel() else 0.0, total, zeros + implicit, bad])
    return out


def _weight_norms(params: list[torch.Tensor]) -> list[float]:
    if not params:
        return []
    norms: list[float] = torch.stack(torch._foreach_norm([magnitudes(p.detach()).float() for p in params], 2)
                                     ).cpu().tolist()
    return norms


def _sharded_stats(grads: list[torch.Tensor | None],
                   params: list[torch.Tensor]) -> tuple[list[list[float]], list[float]]:
    """:func:`_batched_stats` (of the gradients that are not None) and :func:`_weight_norms` when some
    tensors are ``DTensor`` shards (FSDP2): local sums of squares, values, zeros and non-finite values of
    each shard, then one ``SUM`` and one ``MAX`` all-reduce for everything
    (:mod:`gradviz_nb.probes.sharded`). Nothing is gathered. One row per parameter whether it has a
    gradient or not, so every rank reduces buffers of the same size."""
    n = len(params)
    parts = [local_part(t) for t in params]
    gparts = [local_part(g) if g is not None else None for g in grads]
    meshes = [m for _, m, _ in parts] + [gp[1] if gp is not None else m for gp, (_, m, _) in zip(gparts, parts,
                                                                                              strict=True)]
    weight = torch.tensor([w for _, _, w in parts] + [gp[2] if gp is not None else 1.0 for gp in gparts],
                          dtype=torch.float64)
    sums = torch.zeros(2 * n, 4, dtype=torch.float64)  # sum of squares, sum, zeros, non-finite
    maxes = torch.zeros(2 * n, dtype=torch.float64)
    for i, (local, _, _) in enumerate(parts):
        sums[i, 0] = magnitudes(local.detach()).double().square().sum()
    for i, gp in enumerate(gparts, start=n):
        if gp is None:
            continue
        v, implicit = dense_values(gp[0])
        v64 = v.double()
        sums[i] = torch.stack([v64.square().sum(), v64.sum(), (v == 0).sum().double() + implicit,
                               (~torch.isfinite(v)).sum().double()])
        maxes[i] = v64.abs().max() if v.numel() else 0.0
    sums *= weight[:, None]
    all_reduce_rows(meshes, sums, maxes)
    rows, top = sums.tolist(), maxes.tolist()
    stats = [[math.sqrt(rows[i][0]), top[i], rows[i][1], rows[i][2], rows[i][3]]
             for i, g in enumerate(grads, start=n) if g is not None]
    return stats, [math.sqrt(r[0]) for r in rows[:n]]


def _ratio(norm: float, weight_norm: float) -> float:
    if math.isnan(norm):
        return math.nan
    return norm / weight_norm if weight_norm > 0 else (math.inf if norm > 0 else 0.0)


def param_stats(model: nn.Module, grads: Mapping[str, torch.Tensor | None] | None = None,
                scale: float = 1.0) -> list[ParamStats]:
    """Per-parameter statistics of ``.grad`` (or of ``grads``, by parameter name), in model order, with
    ``scale`` (a factor the gradients still carry) divided out."""
    named = named_params(model)
    given = {real_name(k): v for k, v in grads.items()} if grads is not None else None
    if given is not None:
        unknown = set(given) - {n for names, _ in named for n in names}
        if unknown:
            raise GradvizError(f"grads names no parameter of the model: {sorted(unknown)[:5]}")
    grad_of: list[torch.Tensor | None] = []
    for names, p in named:
        if given is None:
            grad_of.append(p.grad)
        else:
            grad_of.append(next((given[n] for n in names if n in given), None))
    present = [g for g in grad_of if g is not None]
    if any(is_dtensor(t) for t in (*present, *(p for _, p in named))):  # FSDP2 shards: reduce, never gather
        sharded, wnorms = _sharded_stats(grad_of, [p for _, p in named])
        stats = iter(sharded)
    else:
        stats = iter(_batched_stats(present))
        wnorms = _weight_norms([p for _, p in named])
    out = []
    for (names, p), g, wn in zip(named, grad_of, wnorms, strict=True):
        norm, max_abs, total, zeros, nonfinite = next(stats) if g is not None else [math.nan, math.nan, math.nan,
                                                                                      math.nan, 0.0]
        norm, max_abs, total = norm / scale, max_abs / scale, total / scale
        n = p.numel()
        out.append(ParamStats(
            name=names[0], names=tuple(names), module=names[0].rpartition(".")[0], shape=tuple(p.shape), numel=n,
            requires_grad=p.requires_grad, has_grad=g is not None, norm=norm, max_abs=max_abs,
            mean=total / n if n else math.nan, zero_frac=zeros / n if n else math.nan, nonfinite=int(nonfinite),
            weight_norm=wn, ratio=_ratio(norm, wn), dtype=str(p.dtype).removeprefix("torch."),
            sparse=bool(g is not None and g.is_sparse),
        ))
    return out


def module_stats(model: nn.Module, params: Sequence[ParamStats]) -> list[ModuleStats]:
    """Aggregate ``params`` over every module path that holds at least one of them, in model order."""
    # Real paths: a compiled submodule's wrapper and the module it wraps share one; the wrapped one (later) wins.
    types = {real_name(path): type(m).__name__
             for path, m in unwrap_compiled(model).named_modules(remove_duplicate=False)}
    # Keyed by identity: a membership test on a list of dataclasses compares field by field, and was
    # quadratic in the parameters of one module (a ParameterList of 8,000: 22 s).
    members: dict[str, dict[int, ParamStats]] = {}
    for p in params:
        for name in p.names:  # a tied weight counts in each module that holds it, once
            parts = name.split(".")[:-1]
            for depth in range(len(parts) + 1):
                members.setdefault(".".join(parts[:depth]), {}).setdefault(id(p), p)
    out = []
    for path in types:
        ps = members.get(path)
        if ps:
            out.append(_aggregate(path, types[path], list(ps.values())))
    return out


def _aggregate(path: str, type_name: str, ps: list[ParamStats]) -> ModuleStats:
    with_grad = [p for p in ps if p.has_grad]
    numel = sum(p.numel for p in with_grad)
    norm = math.sqrt(sum(p.norm**2 for p in with_grad)) if with_grad else math.nan
    weight_norm = math.sqrt(sum(p.weight_norm**2 for p in ps))
    return ModuleStats(
        path=path, type=type_name, depth=path.count(".") + 1 if path else 0, n_params=len(ps),
        n_with_grad=len(with_grad), numel=sum(p.numel for p in ps), norm=norm,
        max_abs=max((p.max_abs for p in with_grad), default=math.nan),
        mean=sum(p.mean * p.numel for p in with_grad) / numel if numel else math.nan,
        zero_frac=sum(p.zero_frac * p.numel for p in with_grad) / numel if numel else math.nan,
        nonfinite=sum(p.nonfinite for p in with_grad), weight_norm=weight_norm,
        ratio=_ratio(norm, math.sqrt(sum(p.weight_norm**2 for p in with_grad))) if with_grad else math.nan,
        dtype=max((p.dtype for p in ps), key=_resolution),
    )


def _resolution(dtype: str) -> float:
    try:
        return float(torch.finfo(getattr(torch, dtype)).eps)
    except (AttributeError, TypeError):
        return 0.0


HIST_RANGE = (-12.0, 4.0)  # log10 |gradient|; values outside are clamped into the end bins


def layer_histograms(model: nn.Module, bins: int = 32,
                     scale: float = 1.0) -> tuple[list[float], dict[str, list[float]]]:
    """Histogram of ``log10 |g|`` per layer (module owning parameters), as fractions of its elements.

    Returns ``(edges, {layer: fractions})``: ``bins`` bins over :data:`HIST_RANGE` plus a first entry
    for exact zeros (so ``len(fractions) == bins + 1``). ``scale``: a factor ``.grad`` still carries (a
    GradScaler's) to divide out. Reads ``.grad``; changes nothing. A ``DTensor`` gradient (FSDP2) is
    counted on this rank's shard and the counts are summed over its mesh (one all-reduce), so every rank
    gets the histogram of the full gradient without gathering it.
    """
    lo, hi = HIST_RANGE
    edges = torch.linspace(lo, hi, bins + 1).tolist()
    counts: dict[str, torch.Tensor] = {}
    shard_rows: list[tuple[str, Any, torch.Tensor]] = []  # (layer, mesh, counts of this rank's shard)
    for names, p in named_params(model):
        g = p.grad
        layer = names[0].rpartition(".")[0]
        acc = counts.setdefault(layer, torch.zeros(bins + 1, dtype=torch.float64))
        if is_dtensor(p) or is_dtensor(g):  # one row per sharded parameter, with or without a gradient
            mesh = local_part(g if g is not None else p)[1]
            acc = torch.zeros(bins + 1, dtype=torch.float64)
            shard_rows.append((layer, mesh, acc))
            if g is None:
                continue
            g, _, weight = local_part(g)
        elif g is None:
            continue
        else:
            weight = 1.0
        values, implicit_zeros = dense_values(g)
        a = values.abs().flatten() / scale
        finite = a[torch.isfinite(a)]
        zeros = (finite == 0).sum() + implicit_zeros
        logs = finite[finite > 0].log10().clamp(lo, hi - 1e-6)
        acc[0] += zeros.double().cpu() * weight
        acc[1:] += torch.histc(logs, bins=bins, min=lo, max=hi).double().cpu() * weight
    if shard_rows:
        table = torch.stack([c for _, _, c in shard_rows])
        all_reduce_rows([m for _, m, _ in shard_rows], table)
        for (layer, _, _), row in zip(shard_rows, table, strict=True):
            counts[layer] += row
    out = {}
    for layer, c in counts.items():
        total = float(c.sum())
        out[layer] = (c / total).tolist() if total else [0.0] * (bins + 1)
    return edges, out

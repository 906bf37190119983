"""Gradient-flow statistics and checks after a backward: "is every part of my model learning?"

:func:`gradient_flow` reads ``.grad`` (or gradients you pass) and never writes to the model or its
gradients. Per parameter and per module (any depth, aggregated over every parameter under the
module's path) it gives the L2 norm, max-abs, mean, fraction of zeros, NaN/Inf count, whether the
gradient is missing, and the gradient-to-weight norm ratio; then flags what looks wrong, with reasons.
All per-parameter numbers are computed as a few batched tensor ops and read back in one go.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gradviz_nb.analysis.layer_health import WEIGHT_FLOOR, LayerHealth, Thresholds, check_layers
from gradviz_nb.errors import GradvizError
from gradviz_nb.kinds import Kind, kinds_of
from gradviz_nb.probes.grad_scale import live_scaler, pending_scale
from gradviz_nb.probes.no_grad import adapter_switch_reasons, no_grad_reason
from gradviz_nb.probes.optimizer_check import optimizer_flags
from gradviz_nb.probes.sharded import all_reduce_rows, is_dtensor, local_part
from gradviz_nb.tracing.compiled import real_name, unwrap_compiled
from gradviz_nb.validate import finite_number, instance, not_meta, tensor_mapping, text_list

if TYPE_CHECKING:
    from gradviz_nb.tracing import AutogradGraph, Capture

__all__ = ["Flag", "GradientFlow", "ModuleStats", "ParamStats", "gradient_flow"]

FLAG_KINDS = kinds_of("flow")


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


@dataclass(frozen=True)
class Flag:
    """Something that looks wrong: ``kind`` (of :data:`FLAG_KINDS`, or the monitor's kinds: the registry is
    :mod:`gradviz_nb.kinds`), what (``target``), and why."""

    kind: Kind
    target: str  # a parameter name, a module path or an adapter path
    reason: str
    params: tuple[str, ...] = ()  # the parameters concerned


@dataclass
class GradientFlow:
    """The result of :func:`gradient_flow`: ``params``, ``modules``, ``layers`` and ``flags``.

    ``layers`` are the modules that own parameters directly (``blocks.0.attn.c_attn``), in model
    order: the bars of the charts and the unit of the vanishing/exploding checks.

    Example::

        flow = gv.gradient_flow(model)
        print(flow.summary())
        flow.flags_for("blocks.1.attn.c_attn")
        flow.to_pandas("modules")
    """

    params: list[ParamStats]
    modules: list[ModuleStats]
    flags: list[Flag]
    thresholds: Thresholds = field(default_factory=Thresholds)
    grad_scale: float = 1.0  # a GradScaler's factor divided out of every statistic (1: none)

    @property
    def layers(self) -> list[ModuleStats]:
        owners = {p.module for p in self.params}
        return [m for m in self.modules if m.path in owners]

    def param(self, name: str) -> ParamStats:
        for p in self.params:
            if name in p.names:
                return p
        raise KeyError(f"no parameter named {name!r}")

    def module(self, path: str) -> ModuleStats:
        for m in self.modules:
            if m.path == path:
                return m
        raise KeyError(f"no module with parameters at path {path!r}")

    def flags_for(self, path: str) -> list[Flag]:
        """Flags on ``path`` itself, on anything under it, or naming one of its parameters."""

        def under(name: str) -> bool:
            return path == "" or name == path or name.startswith(path + ".")

        return [f for f in self.flags if under(f.target) or any(under(p) for p in f.params)]

    def to_pandas(self, which: str = "params") -> Any:
        """A ``pandas.DataFrame`` of ``"params"``, ``"modules"``, ``"layers"`` or ``"flags"``."""
        try:
            import pandas as pd
        except ImportError as err:
            raise GradvizError("to_pandas needs pandas: pip install gradviz_nb[pandas]") from err
        rows: dict[str, Sequence[Any]] = {"params": self.params, "modules": self.modules, "layers": self.layers,
                                          "flags": self.flags}
        if which not in rows:
            raise GradvizError(f"which must be one of {sorted(rows)}, got {which!r}")
        return pd.DataFrame([asdict(r) for r in rows[which]])

    def summary(self) -> str:
        """A few lines: how many parameters got a gradient, the norm range, then every flag."""
        trainable = [p for p in self.params if p.requires_grad]
        with_grad = [p for p in trainable if p.has_grad]
        norms = [m.norm for m in self.layers if m.n_with_grad and math.isfinite(m.norm) and m.norm > 0]
        lines = [f"gradient flow: {len(with_grad)} of {len(trainable)} trainable parameters have a gradient "
                 f"({len(self.params) - len(trainable)} frozen)"]
        if norms:
            lines.append(f"layer gradient norms: min {min(norms):.3g}, median {statistics.median(norms):.3g}, "
                         f"max {max(norms):.3g} over {len(norms)} layers")
        lines.append(f"{len(self.flags)} flags" + (":" if self.flags else ": nothing looks wrong"))
        lines += [f"  [{f.kind}] {f.target}: {f.reason}" for f in self.flags]
        return "\n".join(lines)

    def chart(self, model: nn.Module | None = None, widget: bool = True) -> Any:
        """Per-layer norm bars (log scale, flagged layers red; hover for numbers), with per-layer
        gradient histograms when ``model`` (whose ``.grad`` this was computed from) is given."""
        from gradviz_nb.widgets.flow_charts import as_widget, flow_charts

        hists = layer_histograms(model, scale=self.grad_scale) if model is not None else None
        layout, _ = flow_charts(self, hists)
        return as_widget(layout) if widget else layout

    def __repr__(self) -> str:
        kinds = sorted({f.kind for f in self.flags})
        return f"<GradientFlow: {len(self.params)} parameters, {len(self.flags)} flags {kinds}>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.summary())


# ------------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------------


def _named_params(model: nn.Module) -> list[tuple[list[str], nn.Parameter]]:
    """Each distinct parameter once, with every name it has (tied weights have several). Names are the
    model's own: ``torch.compile``'s ``_orig_mod`` wrapper (whole model or a submodule) is left out."""
    seen: dict[int, tuple[list[str], nn.Parameter]] = {}
    for name, p in unwrap_compiled(model).named_parameters(remove_duplicate=False):
        seen.setdefault(id(p), ([], p))[0].append(real_name(name))
    return list(seen.values())


def dense_values(g: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The stored values of a gradient as a dense float tensor, and how many implicit zeros it has.

    A sparse gradient (``nn.Embedding(sparse=True)``) stores only the rows that were used; duplicates
    are summed first (``coalesce``), so norms and extremes are those of the real gradient. A complex
    gradient is read as its magnitudes ``|g|``: the norm, max-abs, zeros and non-finite count are the
    complex tensor's own (never its real part's); ``mean`` is then the mean magnitude.
    """
    if g.is_sparse:
        values = magnitudes(g.detach().coalesce()._values()).float()
        return values, g.numel() - values.numel()
    return magnitudes(g.detach()).float(), 0


def magnitudes(t: torch.Tensor) -> torch.Tensor:
    """``|t|`` for a complex tensor (real, same norm and extremes), else ``t``: converting a complex tensor
    to a real dtype would keep only its real part."""
    return t.abs() if t.is_complex() else t


def _batched_stats(grads: list[torch.Tensor]) -> list[list[float]]:
    """Per gradient: [norm, max_abs, sum, zeros, nonfinite], in a handful of batched ops, one read-back."""
    if not grads:
        return []
    dense = [dense_values(g) for g in grads]
    g32 = [v for v, _ in dense]
    implicit = torch.tensor([float(z) for _, z in dense])
    rows = torch.stack([
        torch.stack(torch._foreach_norm(g32, 2)),
        torch.stack([v.abs().max() if v.numel() else v.new_zeros(()) for v in g32]),
        torch.stack([g.sum() for g in g32]),
        torch.stack([(g == 0).sum().float() for g in g32]) + implicit,
        torch.stack([(~torch.isfinite(g)).sum().float() for g in g32]),
    ])
    return [list(col) for col in zip(*rows.cpu().tolist(), strict=True)]


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
    named = _named_params(model)
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
    members: dict[str, list[ParamStats]] = {}
    for p in params:
        for name in p.names:  # a tied weight counts in each module that holds it
            parts = name.split(".")[:-1]
            for depth in range(len(parts) + 1):
                bucket = members.setdefault(".".join(parts[:depth]), [])
                if p not in bucket:
                    bucket.append(p)
    out = []
    for path in types:
        ps = members.get(path)
        if ps:
            out.append(_aggregate(path, types[path], ps))
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


# ------------------------------------------------------------------------------------------------
# flags
# ------------------------------------------------------------------------------------------------

def _depth_order(layers: list[ModuleStats], graph: AutogradGraph | None,
                 params: list[ParamStats]) -> list[ModuleStats]:
    """Layers inputs first: by the forward position of the first op using their parameters when the graph
    is known (model order otherwise, and for layers the graph does not hold)."""
    if graph is None:
        return layers
    leaves = graph.leaves()
    g = graph.nx
    first: dict[str, float] = {}
    for p in params:
        node = next((leaves[n] for n in p.names if n in leaves), None)
        seqs = [g.nodes[v].get("seq") for v in g.successors(node)] if node is not None else []
        known = [q for q in seqs if isinstance(q, int)]
        if known:
            first[p.module] = min(first.get(p.module, math.inf), min(known))
    if not first:
        return layers
    index = {m.path: i for i, m in enumerate(layers)}
    return sorted(layers, key=lambda m: (first.get(m.path, math.inf), index[m.path]))


def _check_layers(layers: list[ModuleStats], t: Thresholds, skip: set[str],
                  moved: Callable[[str], float | None] | None = None) -> list[Flag]:
    """Vanishing / exploding layers (``layers`` in depth order); ``skip``: adapter layers for vanishing."""
    health = [LayerHealth(m.path, m.norm, m.max_abs, m.weight_norm, m.numel, m.dtype) for m in layers
              if m.n_with_grad and math.isfinite(m.norm)]
    return [Flag(v.kind, v.path, v.reason) for v in check_layers(health, t, skip, moved)]


def _moved_by_sgd(model: nn.Module, params: list[ParamStats], grads: Mapping[str, torch.Tensor | None] | None,
                  scale: float) -> Callable[[str], float | None]:
    """``moved(layer)``: the fraction of the layer's values that one SGD step at lr 1 (``w - g``, rounded once to
    the parameter's dtype, as ``optimizer.step`` does) really changes. Asked only for layers whose gradient/weight
    ratio is under their dtype's resolution, so it costs nothing on a healthy model. None when it cannot be
    told here (sparse or ``DTensor`` gradients)."""
    tensors = {real_name(n): p for n, p in unwrap_compiled(model).named_parameters(remove_duplicate=False)}
    given = {real_name(k): v for k, v in grads.items()} if grads is not None else None

    def moved(path: str) -> float | None:
        changed = total = 0
        for ps in params:
            if ps.module != path or not ps.has_grad:
                continue
            w = tensors[ps.name]
            g = w.grad if given is None else next((given[n] for n in ps.names if given.get(n) is not None), None)
            if g is None or g.is_sparse or is_dtensor(w) or is_dtensor(g):
                return None
            wide = torch.promote_types(w.dtype, torch.float32)  # compute once wide, round once, like opmath
            with torch.no_grad():
                # A zero-initialised value (a bias, LoRA's B) moves for any gradient at all; judge it at
                # WEIGHT_FLOOR, the "own size" the ratio rule gives it, so 0 -> 1e-30 is not learning.
                v = w.detach()
                v = torch.where(v.abs() < WEIGHT_FLOOR, torch.full_like(v, WEIGHT_FLOOR), v)
                stepped = (v.to(wide) - g.detach().to(wide) / scale).to(w.dtype)
                changed += int((stepped != v).sum())
            total += w.numel()
        return changed / total if total else None

    return moved


def adapter_groups(names: Iterable[str], patterns: Sequence[str]) -> dict[str, list[str]]:
    """Adapter path -> its parameter names: ``a.b.lora_A.default.weight`` belongs to adapter ``a.b``."""
    groups: dict[str, list[str]] = {}
    for name in names:
        parts = name.split(".")
        for i, part in enumerate(parts):
            if part in patterns:
                groups.setdefault(".".join(parts[:i]), []).append(name)
                break
    return groups


def _check_adapters(params: list[ParamStats], patterns: Sequence[str], reasons: dict[str, str],
                    switched_off: dict[str, str]) -> list[Flag]:
    by_name = {n: p for p in params for n in p.names}
    flags = []
    for path, names in adapter_groups(by_name, patterns).items():
        adapter = [by_name[n] for n in names]
        base = [p for p in params if p.name.startswith(path + ".") and p.name not in names]
        if path in switched_off:
            flags.append(Flag("dead-adapter", path, switched_off[path], params=tuple(names)))
            continue
        if not all(p.requires_grad for p in adapter) or any(p.requires_grad for p in base):
            continue  # not a fine-tuning setup: the other checks cover it
        alive = [p for p in adapter if p.has_grad and p.nonfinite == 0 and p.norm > 0]
        if alive:
            continue
        state = ", ".join(f"{n.removeprefix(path + '.')}: {'no gradient' if not by_name[n].has_grad else 'zero'}"
                          for n in names)
        why = next((reasons[n] for n in names if n in reasons), "")
        flags.append(Flag("dead-adapter", path, f"adapter gets no gradient while its base is frozen ({state})"
                          + (f"; {why.split(': ', 1)[-1]}" if why else ""), params=tuple(names)))
    return flags


def check_flags(
    model: nn.Module,
    params: list[ParamStats],
    layers: list[ModuleStats],
    thresholds: Thresholds,
    adapter_patterns: Sequence[str],
    graph: AutogradGraph | None = None,
    capture: Capture | None = None,
    moved: Callable[[str], float | None] | None = None,
) -> list[Flag]:
    """Every flag but ``stale-grad`` (which needs the previous step: :class:`gv.GradientMonitor`).
    ``moved``: see :func:`gradviz_nb.analysis.layer_health.check_layers`."""
    flags: list[Flag] = []
    reasons: dict[str, str] = {}
    any_grad = any(p.has_grad for p in params)
    for p in params:
        if p.requires_grad and not p.has_grad:
            reasons[p.name] = no_grad_reason(model, p.name, p.names, p.module, any_grad, graph, capture)
            flags.append(Flag("no-grad", p.name, reasons[p.name], params=p.names))
        elif p.nonfinite:
            flags.append(Flag("nan", p.name, f"{p.nonfinite} of {p.numel} gradient values are NaN or Inf",
                              params=p.names))
    adapters = {n for names in adapter_groups([p.name for p in params], adapter_patterns).values() for n in names}
    adapter_layers = {p.module for p in params if p.name in adapters and not any(
        q.module == p.module and q.name not in adapters for q in params)}
    flags += _check_layers(_depth_order(layers, graph, params), thresholds, adapter_layers, moved)
    flags += _check_adapters(params, adapter_patterns, reasons, adapter_switch_reasons(model))
    return flags


def _layer_kinds(model: nn.Module, params: list[ParamStats], t: Thresholds, factor: float,
                 graph: AutogradGraph | None) -> dict[str, str]:
    """Layer path -> "vanishing" / "exploding" with every gradient statistic multiplied by ``factor``."""
    scaled = [replace(p, norm=p.norm * factor, max_abs=p.max_abs * factor, mean=p.mean * factor,
                      ratio=p.ratio * factor) for p in params]
    owners = {p.module for p in scaled}
    layers = [m for m in module_stats(model, scaled) if m.path in owners]
    return {f.target: f.kind for f in _check_layers(_depth_order(layers, graph, scaled), t, set())}


def scale_hints(flags: list[Flag], model: nn.Module, params: list[ParamStats], t: Thresholds, scaler: Any | None,
                scale: float, graph: AutogradGraph | None = None) -> list[Flag]:
    """Say so when a GradScaler explains a verdict, instead of a bare "exploding" or "vanishing".

    Without ``scaler=``: exploding layers while a live, enabled ``torch.amp.GradScaler`` still holds an
    un-unscaled scale ``s`` get a hint naming ``s``, and whether dividing by it clears them. With ``scaler=``:
    vanishing layers that only vanish because the statistics were divided by the scale get a hint that the
    gradients may already be unscaled (``scaler.step()`` unscales them, and after ``update()`` the scaler can no
    longer tell)."""
    exploding = [f for f in flags if f.kind == "exploding"]
    if scaler is None and exploding:
        found = live_scaler()
        if found is None:
            return flags
        s = pending_scale(found)
        still = _layer_kinds(model, params, t, 1 / s, graph)
        hint = (f"; these gradients look scaled by a GradScaler: one is alive with scale {s:g} and has not unscaled "
                "them yet (scaler.scale(loss).backward() multiplies every gradient by it)")
        return [replace(f, reason=f.reason + hint + (
            ", and divided by it this layer " + ("still explodes" if still.get(f.target) == "exploding" else
                                                 "does not explode")
            + ". Pass gradient_flow(..., scaler=scaler) or call scaler.unscale_(optimizer) first")) if f in exploding
            else f for f in flags]
    vanishing = [f for f in flags if f.kind == "vanishing"]
    if scaler is not None and scale != 1.0 and vanishing:
        raw = _layer_kinds(model, params, t, scale, graph)
        hint = (f"; only after dividing by the GradScaler's scale {scale:g} (scaler=): if scaler.step() or "
                "scaler.unscale_() already ran on these gradients they are unscaled (after update() the scaler "
                "cannot tell), and undivided this layer does not vanish. Read the flow between backward and "
                "scaler.step()")
        return [replace(f, reason=f.reason + hint) if f in vanishing and raw.get(f.target) != "vanishing" else f
                for f in flags]
    return flags


def gradient_flow(
    model: nn.Module,
    grads: Mapping[str, torch.Tensor | None] | None = None,
    *,
    graph: AutogradGraph | None = None,
    capture: Capture | None = None,
    lr: float = 1e-3,
    peer: float = 100.0,
    trend: float = 10.0,
    abs_vanishing: float | None = None,
    abs_exploding: float | None = None,
    adapter_patterns: Sequence[str] = ("lora_A", "lora_B"),
    optimizer: torch.optim.Optimizer | None = None,
    scaler: Any | None = None,
) -> GradientFlow:
    """Gradient statistics per parameter and module, and flags with reasons, after a backward.

    Reads ``p.grad`` (or ``grads``: parameter name -> gradient) and changes nothing. ``graph`` (from
    :func:`gv.trace` of the same loss, ideally with ``capture``) lets a "no gradient" flag say whether
    the parameter is in the loss's graph at all and where a ``detach()`` cut it; ``capture`` also
    finds a ``.data``/``.detach()`` of the parameter itself, and the graph orders layers by depth.

    Vanishing and exploding are judged per layer by what its gradient would do to its weights, and by
    the trend with depth, never against the median layer (rules in :mod:`gradviz_nb.analysis.layer_health`):
    exploding when one SGD step at ``lr`` would move a layer by more than its own norm, or its norm is
    ``peer`` x above every other layer's; vanishing when even lr 1 would not change its weights at
    their dtype's resolution, or the gradient/weight ratio falls steadily by more than ``trend`` x from
    the output layers to this one. ``abs_vanishing``/``abs_exploding``: optional absolute norm limits.
    Adapters are the parameters with a path component in ``adapter_patterns`` (LoRA's ``lora_A``/``lora_B``).

    ``optimizer``: the optimizer of the training loop; adds ``frozen`` (it holds a parameter that does not
    require grad, so it never moves) and ``not-in-optimizer`` (a parameter gets a gradient but is in no
    param group, or only in groups with lr 0). ``scaler``: a ``torch.amp.GradScaler`` whose
    ``unscale_`` has not run yet; its scale is divided out of every statistic. Pass it between
    ``scaler.scale(loss).backward()`` and ``scaler.step()``: ``step()`` unscales ``.grad`` in place, and after
    ``update()`` the scaler can no longer tell (a layer that only vanishes because of the division says so).
    Without ``scaler=``, an exploding verdict names a live GradScaler that has not unscaled the gradients yet.

    ``torch.compile(model)`` works as the model itself: the same parameters, named without ``_orig_mod.``.

    Under FSDP2 (``fully_shard``: ``DTensor`` parameters and gradients) every statistic is that of the full
    tensor, from this rank's shards plus one ``SUM`` and one ``MAX`` all-reduce (nothing is gathered); call
    it on every rank, as any collective.

    Example::

        loss.backward()
        flow = gv.gradient_flow(model)
        print(flow.summary())
        [f.target for f in flow.flags if f.kind == "dead-adapter"]   # ["blocks.1.attn.c_attn"]
    """
    if not isinstance(model, nn.Module):
        raise GradvizError(f"gradient_flow expects an nn.Module, got {type(model).__name__}.")
    _check_flow_args(grads, graph, capture, lr, peer, trend, abs_vanishing, abs_exploding, adapter_patterns, optimizer)
    not_meta("gv.gradient_flow", model)
    model = unwrap_compiled(model)  # torch.compile(model): the same parameters under their own names
    thresholds = Thresholds(lr, peer, trend, abs_vanishing, abs_exploding)
    scale = pending_scale(scaler)
    params = param_stats(model, grads, scale)
    modules = module_stats(model, params)
    owners = {p.module for p in params}
    layers = [m for m in modules if m.path in owners]
    moved = _moved_by_sgd(model, params, grads, scale)
    flags = check_flags(model, params, layers, thresholds, adapter_patterns, graph, capture, moved)
    flags = scale_hints(flags, model, params, thresholds, scaler, scale, graph)
    if optimizer is not None:
        tensors = {real_name(n): p for n, p in model.named_parameters(remove_duplicate=False)}
        flags += [Flag(*finding) for finding in optimizer_flags(params, tensors, optimizer)]
    return GradientFlow(params, modules, flags, thresholds, scale)


def _check_flow_args(grads: object, graph: object, capture: object, lr: object, peer: object, trend: object,
                     abs_vanishing: object, abs_exploding: object, adapter_patterns: object, optimizer: object) -> None:
    """gradient_flow's arguments, each refused by name when it cannot mean anything (NaN, lr <= 0, ...)."""
    from gradviz_nb.tracing import AutogradGraph, Capture  # at run time: this module names them for mypy only

    if grads is not None:
        tensor_mapping("grads", grads, none_values=True)
    if graph is not None:
        instance("graph", graph, AutogradGraph, "an AutogradGraph (gv.trace of the same loss) or None")
    if capture is not None:
        instance("capture", capture, Capture, "a Capture (gv.capture) or None")
    finite_number("lr", lr, lo=0, lo_open=True, hint="It is the learning rate a usual SGD step would use.")
    finite_number("peer", peer, lo=1, lo_open=True, hint="A layer this many times above every other one explodes.")
    finite_number("trend", trend, lo=1, lo_open=True, hint="A fall by this factor with depth is vanishing.")
    for name, limit in (("abs_vanishing", abs_vanishing), ("abs_exploding", abs_exploding)):
        if limit is not None:
            finite_number(name, limit, lo=0, hint="It is an absolute gradient norm limit, or None for none.")
    text_list("adapter_patterns", adapter_patterns, what="path components, e.g. ('lora_A', 'lora_B')")
    if optimizer is not None:
        instance("optimizer", optimizer, torch.optim.Optimizer, "a torch.optim.Optimizer or None")


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
    for names, p in _named_params(model):
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

"""Flags of :func:`gv.gradient_flow`: no gradient, NaN, vanishing / exploding layers, dead adapters, and the
hints a GradScaler's pending scale adds to a vanishing or exploding verdict."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gradviz_nb import schema
from gradviz_nb.analysis.layer_health import WEIGHT_FLOOR, LayerHealth, LossStep, Thresholds, check_layers
from gradviz_nb.kinds import Kind, kinds_of
from gradviz_nb.probes.causes import adapter_switch_reasons, expected_zero, no_grad_reason
from gradviz_nb.probes.flow.grad_scale import live_scaler, pending_scale
from gradviz_nb.probes.flow.stats import ModuleStats, ParamStats, module_stats
from gradviz_nb.probes.sandbox import sandbox
from gradviz_nb.probes.sharded import is_dtensor
from gradviz_nb.tracing.compiled import real_name, unwrap_compiled

if TYPE_CHECKING:
    from gradviz_nb.tracing import AutogradGraph, Capture

__all__ = ["FLAG_KINDS", "Flag", "adapter_groups", "check_flags", "moved_by_sgd", "scale_hints"]

FLAG_KINDS = kinds_of("flow")


@dataclass(frozen=True)
class Flag:
    """Something that looks wrong about one parameter, layer or adapter.

    Attributes:
        kind: of :data:`FLAG_KINDS`, or the monitor's kinds (the registry is :mod:`gradviz_nb.kinds`).
        target: a parameter name, a module path or an adapter path.
        reason: why, with the numbers that were measured.
        params: the parameters concerned.
    """

    kind: Kind
    target: str  # a parameter name, a module path or an adapter path
    reason: str
    params: tuple[str, ...] = ()  # the parameters concerned

    def to_json(self, step: int | None = None, source: str = "flow", indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``flag`` type)."""
        return schema.dumps(schema.flag(self, step, source), indent)


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


ADAPTIVE = {"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "SparseAdam", "Adagrad", "Adadelta", "RMSprop", "Rprop",
            "Adafactor"}
"""Optimizers whose step per element does not grow with the gradient (it is divided by a running magnitude)."""

LayerStep = tuple[float, float | None, str]
"""A layer's optimizer step: (learning rate, an adaptive optimizer's eps or None, the optimizer's class name)."""


def layer_steps(params: list[ParamStats], tensors: Mapping[str, torch.Tensor],
                optimizer: torch.optim.Optimizer | None) -> dict[str, LayerStep]:
    """Layer path -> the step its optimizer takes: the largest ``lr`` over the param groups holding its
    parameters (a layer in no group, or only with lr 0, is left out: nothing steps it)."""
    if optimizer is None:
        return {}
    name = type(optimizer).__name__
    group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    out: dict[str, LayerStep] = {}
    for ps in params:
        group = group_of.get(id(tensors.get(ps.name)))
        if group is None or not isinstance(lr := group.get("lr"), int | float) or not lr > 0:
            continue
        eps = float(group.get("eps", 1e-8) if name != "Rprop" else 0.0) if name in ADAPTIVE else None
        if ps.module not in out or lr > out[ps.module][0]:
            out[ps.module] = (float(lr), eps, name)
    return out


def loss_stepper(model: nn.Module, params: list[ParamStats], tensors: Mapping[str, torch.Tensor],
                 steps: Mapping[str, LayerStep], t: Thresholds, closure: Callable[[], Any], scale: float) -> LossStep:
    """``loss_step(layer)``: ``closure()`` (the user's loss, no backward) before and after stepping only that
    layer as its optimizer's first step would (SGD: ``lr * g``; adaptive: ``lr * g / (|g| + eps)``), inside
    the sandbox, which puts every value back. None for sparse or ``DTensor`` gradients."""

    def loss_step(path: str) -> tuple[float, float] | None:
        lr, eps, _ = steps.get(path, (t.lr, None, ""))
        members = [tensors[ps.name] for ps in params if ps.module == path and ps.has_grad]
        if any(w.grad is None or w.grad.is_sparse or is_dtensor(w) for w in members):
            return None
        with sandbox(model), torch.no_grad():
            before = float(closure())
            for w, grad in ((w, w.grad) for w in members):
                assert grad is not None  # checked above: every member has a dense gradient
                g = grad.detach() / scale
                w.sub_(lr * (g if eps is None else g / (g.abs() + eps)))
            after = float(closure())
        return before, after

    return loss_step


def _expected_zeros(layers: list[ModuleStats], graph: AutogradGraph | None) -> set[str]:
    """Layers whose exactly-zero gradient is expected, measured on the graph's values: every path to the loss
    multiplies by a parameter that is exactly zero (:func:`gradviz_nb.probes.causes.expected_zero`)."""
    if graph is None:
        return set()
    leaves = graph.leaves()
    out = set()
    for m in layers:
        if m.n_with_grad and m.norm == 0:
            ids = [node for name, node in leaves.items() if name.rpartition(".")[0] == m.path]
            if ids and expected_zero(graph, ids):
                out.add(m.path)
    return out


def _check_layers(layers: list[ModuleStats], t: Thresholds, skip: set[str],
                  moved: Callable[[str], float | None] | None = None,
                  steps: Mapping[str, LayerStep] | None = None, loss_step: LossStep | None = None) -> list[Flag]:
    """Vanishing / exploding layers (``layers`` in depth order); ``skip``: adapter layers for vanishing;
    ``steps``: each layer's optimizer step (:func:`layer_steps`; a layer without one is judged at ``t.lr``);
    ``loss_step``: :func:`loss_stepper`."""
    steps = steps or {}
    health = [LayerHealth(m.path, m.norm, m.max_abs, m.weight_norm, m.numel, m.dtype, *steps[m.path])
              if m.path in steps else LayerHealth(m.path, m.norm, m.max_abs, m.weight_norm, m.numel, m.dtype)
              for m in layers if m.n_with_grad and math.isfinite(m.norm)]
    return [Flag(v.kind, v.path, v.reason) for v in check_layers(health, t, skip, moved, loss_step)]


def moved_by_sgd(model: nn.Module, params: list[ParamStats], grads: Mapping[str, torch.Tensor | None] | None,
                  scale: float, steps: Mapping[str, LayerStep] | None = None) -> Callable[[str], float | None]:
    """``moved(layer)``: the fraction of the layer's values that one step really changes, rounded once to the
    parameter's dtype as ``optimizer.step`` does: the layer's optimizer step from ``steps`` (SGD: ``w - lr g``;
    adaptive: ``w - lr g / (|g| + eps)``), else SGD at lr 1. Asked only for layers whose gradient/weight
    ratio is under their dtype's resolution, so it costs nothing on a healthy model. None when it cannot be
    told here (sparse or ``DTensor`` gradients)."""
    tensors = {real_name(n): p for n, p in unwrap_compiled(model).named_parameters(remove_duplicate=False)}
    given = {real_name(k): v for k, v in grads.items()} if grads is not None else None

    def moved(path: str) -> float | None:
        lr, eps, _ = (steps or {}).get(path, (1.0, None, ""))
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
                upd = g.detach().to(wide) / scale
                upd = upd if eps is None else upd / (upd.abs() + eps)
                stepped = (v.to(wide) - lr * upd).to(w.dtype)
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
    steps: Mapping[str, LayerStep] | None = None,
    loss_step: LossStep | None = None,
) -> list[Flag]:
    """Every flag but ``stale-grad`` (which needs the previous step: :class:`gv.GradientMonitor`).
    ``moved``: see :func:`gradviz_nb.analysis.layer_health.check_layers`; ``steps``: :func:`layer_steps`."""
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
    skip = adapter_layers | _expected_zeros(layers, graph)
    flags += _check_layers(_depth_order(layers, graph, params), thresholds, skip, moved, steps, loss_step)
    flags += _check_adapters(params, adapter_patterns, reasons, adapter_switch_reasons(model))
    return flags


def _layer_kinds(model: nn.Module, params: list[ParamStats], t: Thresholds, factor: float,
                 graph: AutogradGraph | None, steps: Mapping[str, LayerStep] | None = None) -> dict[str, str]:
    """Layer path -> "vanishing" / "exploding" with every gradient statistic multiplied by ``factor``."""
    scaled = [replace(p, norm=p.norm * factor, max_abs=p.max_abs * factor, mean=p.mean * factor,
                      ratio=p.ratio * factor) for p in params]
    owners = {p.module for p in scaled}
    layers = [m for m in module_stats(model, scaled) if m.path in owners]
    return {f.target: f.kind for f in _check_layers(_depth_order(layers, graph, scaled), t, set(), steps=steps)}


def scale_hints(flags: list[Flag], model: nn.Module, params: list[ParamStats], t: Thresholds, scaler: Any | None,
                scale: float, graph: AutogradGraph | None = None,
                steps: Mapping[str, LayerStep] | None = None) -> list[Flag]:
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
        still = _layer_kinds(model, params, t, 1 / s, graph, steps)
        hint = (f"; these gradients look scaled by a GradScaler: one is alive with scale {s:g} and has not unscaled "
                "them yet (scaler.scale(loss).backward() multiplies every gradient by it)")
        return [replace(f, reason=f.reason + hint + (
            ", and divided by it this layer " + ("still explodes" if still.get(f.target) == "exploding" else
                                                 "does not explode")
            + ". Pass gradient_flow(..., scaler=scaler) or call scaler.unscale_(optimizer) first")) if f in exploding
            else f for f in flags]
    vanishing = [f for f in flags if f.kind == "vanishing"]
    if scaler is not None and scale != 1.0 and vanishing:
        raw = _layer_kinds(model, params, t, scale, graph, steps)
        hint = (f"; only after dividing by the GradScaler's scale {scale:g} (scaler=): if scaler.step() or "
                "scaler.unscale_() already ran on these gradients they are unscaled (after update() the scaler "
                "cannot tell), and undivided this layer does not vanish. Read the flow between backward and "
                "scaler.step()")
        return [replace(f, reason=f.reason + hint) if f in vanishing and raw.get(f.target) != "vanishing" else f
                for f in flags]
    return flags

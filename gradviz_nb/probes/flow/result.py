"""Gradient-flow statistics and checks after a backward: "is every part of my model learning?"

:func:`gradient_flow` reads ``.grad`` (or gradients you pass) and never writes to the model or its
gradients. Per parameter and per module (any depth, aggregated over every parameter under the
module's path) it gives the L2 norm, max-abs, mean, fraction of zeros, NaN/Inf count, whether the
gradient is missing, and the gradient-to-weight norm ratio (:mod:`gradviz_nb.probes.flow.stats`); then
flags what looks wrong, with reasons (:mod:`gradviz_nb.probes.flow.checks`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gradviz_nb.analysis.layer_health import Thresholds
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.flow.checks import (
    FLAG_KINDS,
    Flag,
    check_flags,
    layer_steps,
    loss_stepper,
    moved_by_sgd,
    scale_hints,
)
from gradviz_nb.probes.flow.grad_scale import pending_scale
from gradviz_nb.probes.flow.optimizer_check import optimizer_flags
from gradviz_nb.probes.flow.stats import (
    HIST_RANGE,
    ModuleStats,
    ParamStats,
    dense_values,
    layer_histograms,
    magnitudes,
    module_stats,
    param_stats,
)
from gradviz_nb.tracing.compiled import real_name, unwrap_compiled
from gradviz_nb.validate import finite_number, function, instance, not_meta, tensor_mapping, text_list

if TYPE_CHECKING:
    from gradviz_nb.tracing import AutogradGraph, Capture

__all__ = ["FLAG_KINDS", "HIST_RANGE", "Flag", "GradientFlow", "ModuleStats", "ParamStats", "dense_values",
           "gradient_flow", "layer_histograms", "magnitudes", "module_stats", "param_stats"]


@dataclass
class GradientFlow:
    """The result of :func:`gradient_flow`: ``params``, ``modules``, ``layers`` and ``flags``.

    ``layers`` are the modules that own parameters directly (``blocks.0.attn.c_attn``), in model
    order: the bars of the charts and the unit of the vanishing/exploding checks.

    Attributes:
        params: one :class:`ParamStats` per parameter (norm, max, zero fraction, ratio to the weight, ...).
        modules: one :class:`ModuleStats` per module holding parameters, totals over its subtree.
        flags: what looks wrong (:class:`Flag`), worst first.
        thresholds: the layer-health thresholds the flags were judged with.
        grad_scale: a GradScaler's factor divided out of every statistic (1: none).

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
        """The modules that own parameters directly, in model order (the charts' bars, the unit the
        vanishing/exploding rules judge)."""
        owners = {p.module for p in self.params}
        return [m for m in self.modules if m.path in owners]

    def param(self, name: str) -> ParamStats:
        """The statistics of parameter ``name`` (any of its names, for a tied weight); a GradvizError naming
        close matches when there is none."""
        for p in self.params:
            if name in p.names:
                return p
        known = [n for p in self.params for n in p.names]
        raise GradvizError(f"flow.param: no parameter named {name!r}{_close(name, known)}; the names are "
                           "model.named_parameters()'s.")

    def module(self, path: str) -> ModuleStats:
        """The statistics of the module at ``path`` (``""``: the whole model); a GradvizError when it holds no
        parameters."""
        for m in self.modules:
            if m.path == path:
                return m
        raise GradvizError(f"flow.module: no module with parameters at path {path!r}"
                           f"{_close(path, [m.path for m in self.modules])}; paths are model.named_modules()'s.")

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
    closure: Callable[[], Any] | None = None,
) -> GradientFlow:
    """Gradient statistics per parameter and module, and flags with reasons, after a backward.

    Reads ``p.grad`` (or ``grads``: parameter name -> gradient) and changes nothing. ``graph`` (from
    :func:`gv.trace` of the same loss, ideally with ``capture``) lets a "no gradient" flag say whether
    the parameter is in the loss's graph at all and where a ``detach()`` cut it; ``capture`` also
    finds a ``.data``/``.detach()`` of the parameter itself, and the graph orders layers by depth.

    Vanishing and exploding are judged per layer by a measured consequence of one optimizer step, never by
    comparing layers alone (rules in :mod:`gradviz_nb.analysis.layer_health`): at ``optimizer``'s learning
    rate when given (an adaptive optimizer's step does not grow with the gradient), else an SGD step at
    ``lr``. Exploding: that step would move a layer by more than its own norm, an element is within 100x of
    its dtype's maximum, or (``closure``) stepping a layer that stands out ``peer`` x above every other one
    raises the loss. Vanishing: an exact zero, a step even at lr 1 lost to the dtype's resolution, or a
    million such steps moving the layer by under 10% of its norm (at ``lr``, only where the ratio also falls
    steadily with depth by more than ``trend`` x). ``abs_vanishing``/``abs_exploding``: optional absolute
    norm limits. ``closure``: the loss without backward (``lambda: loss_fn(model(x), y)``), evaluated
    inside the sandbox (every value put back) before and after stepping only a standing-out layer.
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
    if closure is not None:
        function("closure", closure, "lambda: loss_fn(model(x), y)")
    not_meta("gv.gradient_flow", model)
    model = unwrap_compiled(model)  # torch.compile(model): the same parameters under their own names
    thresholds = Thresholds(lr, peer, trend, abs_vanishing, abs_exploding)
    scale = pending_scale(scaler)
    params = param_stats(model, grads, scale)
    modules = module_stats(model, params)
    owners = {p.module for p in params}
    layers = [m for m in modules if m.path in owners]
    tensors = {real_name(n): p for n, p in model.named_parameters(remove_duplicate=False)}
    steps = layer_steps(params, tensors, optimizer)
    moved = moved_by_sgd(model, params, grads, scale, steps)
    loss_step = loss_stepper(model, params, tensors, steps, thresholds, closure, scale) if closure else None
    flags = check_flags(model, params, layers, thresholds, adapter_patterns, graph, capture, moved, steps, loss_step)
    flags = scale_hints(flags, model, params, thresholds, scaler, scale, graph, steps)
    if optimizer is not None:
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
    finite_number("lr", lr, lo=0, lo_open=True, hint="It is the SGD learning rate used without optimizer=.")
    finite_number("peer", peer, lo=1, lo_open=True, hint="A layer this many times above every other one stands out.")
    finite_number("trend", trend, lo=1, lo_open=True, hint="A fall by this factor with depth is vanishing.")
    for name, limit in (("abs_vanishing", abs_vanishing), ("abs_exploding", abs_exploding)):
        if limit is not None:
            finite_number(name, limit, lo=0, hint="It is an absolute gradient norm limit, or None for none.")
    text_list("adapter_patterns", adapter_patterns, what="path components, e.g. ('lora_A', 'lora_B')")
    if optimizer is not None:
        instance("optimizer", optimizer, torch.optim.Optimizer, "a torch.optim.Optimizer or None")


def _close(name: object, known: list[str]) -> str:
    import difflib

    near = difflib.get_close_matches(str(name), known, n=3) if isinstance(name, str) else []
    return f" (did you mean {', '.join(map(repr, near))}?)" if near else ""

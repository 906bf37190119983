"""The flow family: ``gv.gradient_flow``, per-parameter and per-layer gradient statistics and their flags.

- :mod:`.result`: :func:`gradient_flow` and :class:`GradientFlow` (the facade, its chart).
- :mod:`.stats`: per-parameter and per-module statistics, histograms (sharded tensors reduced, not gathered).
- :mod:`.checks`: the flags (no gradient, vanishing, exploding, adapters, loss scale).
- :mod:`.grad_scale`: a live ``GradScaler``'s pending scale.
- :mod:`.optimizer_check`: parameters the optimizer does not hold, or holds twice.

Other families import the names below, never a module's private names.
"""

from gradviz_nb.probes.flow.grad_scale import live_scaler, pending_scale
from gradviz_nb.probes.flow.optimizer_check import optimizer_flags, optimizer_roles
from gradviz_nb.probes.flow.result import (
    FLAG_KINDS,
    HIST_RANGE,
    Flag,
    GradientFlow,
    ModuleStats,
    ParamStats,
    dense_values,
    gradient_flow,
    layer_histograms,
    magnitudes,
    module_stats,
    param_stats,
)

__all__ = ["FLAG_KINDS", "HIST_RANGE", "Flag", "GradientFlow", "ModuleStats", "ParamStats", "dense_values",
           "gradient_flow", "layer_histograms", "live_scaler", "magnitudes", "module_stats", "optimizer_flags",
           "optimizer_roles", "param_stats", "pending_scale"]

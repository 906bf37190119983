"""What every integration shares: importing an optional package with an error that names its extra, and
finding the user's model and optimizer inside the wrappers a framework puts around them."""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import torch
from torch import nn

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.monitor import GradientMonitor, MonitorThresholds
from gradviz_nb.validate import boolean, given, instance, positive_int


def check_callback_args(every: object, flags: Mapping[str, object], tensorboard: object, thresholds: object,
                        monitor_kwargs: Mapping[str, object]) -> int:
    """A callback's constructor arguments, checked when it is made (not at the first training step):
    ``every`` a whole number >= 1, the switches True/False, ``tensorboard`` True/False or a directory,
    and ``monitor_kwargs`` only :class:`GradientMonitor`'s own keywords. Returns ``every``."""
    every = positive_int("every", every, hint="It is the optimizer steps between records.")
    for name, value in flags.items():
        boolean(name, value)
    if not isinstance(tensorboard, (bool, str, os.PathLike)):
        raise GradvizError(f"tensorboard must be True, False or a directory; got {given(tensorboard)}.")
    if thresholds is not None:
        instance("thresholds", thresholds, MonitorThresholds, "a MonitorThresholds or None")
    accepted = [p for p in inspect.signature(GradientMonitor).parameters
                if p not in ("model", "every", "optimizer", "scaler", "thresholds")]
    unknown = sorted(set(monitor_kwargs) - set(accepted))
    if unknown:
        raise GradvizError(f"unknown keyword argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: the "
                           f"others go to gv.GradientMonitor, which takes {', '.join(accepted)}.")
    return every


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` or raise a GradvizError saying which ``gradviz_nb`` extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:  # also a module set to None in sys.modules (how the tests simulate absence)
        package = module.split(".")[0]
        raise GradvizError(f"{feature} needs {package}: pip install gradviz_nb[{extra}]") from err


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside DDP / DataParallel / FSDP1 (``.module``) and ``torch.compile`` (``._orig_mod``)
    wrappers, so parameters keep the names the user gave them (``accelerate.prepare`` adds such wrappers)."""
    seen = 0
    while seen < 8:  # wrappers nest (DDP of a compiled model); a handful is plenty
        seen += 1
        orig = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule (no torch._dynamo import)
        if isinstance(orig, nn.Module):
            model = orig
        elif isinstance(inner := getattr(model, "module", None), nn.Module) and type(model).__name__ in _WRAPPERS:
            model = inner
        else:
            break
    return model


# Wrapper classes whose only job is to hold the real model under ``.module`` (checked by name: importing them
# would import torch.distributed pieces or accelerate for nothing).
_WRAPPERS = {"DistributedDataParallel", "DataParallel", "FullyShardedDataParallel", "DeepSpeedEngine"}


def inner_optimizer(optimizer: Any) -> torch.optim.Optimizer | None:
    """The ``torch.optim.Optimizer`` that really steps: accelerate's ``AcceleratedOptimizer`` and Lightning's
    ``LightningOptimizer`` hold it under ``.optimizer`` (step hooks registered on the wrapper never fire)."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None)
        if isinstance(inner, torch.optim.Optimizer):
            optimizer = inner
        else:
            break
    return optimizer if isinstance(optimizer, torch.optim.Optimizer) else None


def total_grad_norm(model: nn.Module) -> torch.Tensor | None:
    """The total L2 norm of the gradients, as ``clip_grad_norm_`` computes it (None where it cannot be read off
    the local tensors: ``DTensor`` shards or sparse gradients). Stays on the device: no sync."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads or any(type(g).__name__ == "DTensor" or g.layout != torch.strided for g in grads):
        return None
    total: torch.Tensor = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2)))
    return total


def last_record_numbers(monitor: Any, n_flags: int) -> dict[str, float]:
    """Per-step summary numbers for a framework's logger: the latest record's total and largest layer norm."""
    norms = monitor.history("norm")[-1]
    finite = norms[torch.isfinite(norms)]
    total = float(finite.pow(2).sum().sqrt()) if finite.numel() else float("nan")
    biggest = float(finite.max()) if finite.numel() else float("nan")
    return {"gradviz/grad_norm": total, "gradviz/max_layer_norm": biggest, "gradviz/flags": float(n_flags),
            "gradviz/step": float(monitor.steps[-1])}

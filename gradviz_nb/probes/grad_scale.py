"""Gradients under ``torch.amp.GradScaler``: by how much ``.grad`` is still scaled.

``scaler.scale(loss).backward()`` leaves every gradient multiplied by ``scaler.get_scale()`` (65,536 at
first) until ``scaler.unscale_(optimizer)`` divides it in place (``scaler.step`` does it too). Statistics
read in between are that many times too big: a healthy model would look like it explodes.
"""

from __future__ import annotations

from typing import Any

from gradviz_nb.errors import GradvizError

__all__ = ["pending_scale"]


def pending_scale(scaler: Any | None) -> float:
    """The factor ``.grad`` still carries: ``scaler.get_scale()`` unless ``unscale_`` already ran for an
    optimizer since the last ``update()`` (or the scaler is disabled), else 1."""
    if scaler is None:
        return 1.0
    if not (hasattr(scaler, "get_scale") and hasattr(scaler, "is_enabled")):
        raise GradvizError(f"scaler must be a torch.amp.GradScaler, got {type(scaler).__name__}.")
    if not scaler.is_enabled():
        return 1.0
    from torch.amp.grad_scaler import OptState

    states = getattr(scaler, "_per_optimizer_states", {})
    if any(s.get("stage") is OptState.UNSCALED for s in states.values()):
        return 1.0
    return float(scaler.get_scale())

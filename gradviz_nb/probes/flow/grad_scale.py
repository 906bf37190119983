"""Gradients under ``torch.amp.GradScaler``: by how much ``.grad`` is still scaled.

``scaler.scale(loss).backward()`` leaves every gradient multiplied by ``scaler.get_scale()`` (65,536 at
first) until ``scaler.unscale_(optimizer)`` divides it in place (``scaler.step`` does it too). Statistics
read in between are that many times too big: a healthy model would look like it explodes.
"""

from __future__ import annotations

import gc
from typing import Any

from gradviz_nb.errors import GradvizError

__all__ = ["live_scaler", "pending_scale"]


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


def live_scaler() -> Any | None:
    """A live, enabled ``torch.amp.GradScaler`` whose scale ``.grad`` may still carry (:func:`pending_scale` > 1),
    else None; the one with the largest pending scale if several are.

    Found by scanning the garbage collector's objects (about 0.1 s per 300,000 objects): only for explaining an
    alarm (a layer looks like it explodes and no ``scaler=`` was given), never on a healthy path.
    """
    from torch.amp import GradScaler

    best: tuple[float, Any] | None = None
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads __class__, which raises on a dead weakref.proxy
        if issubclass(type(obj), GradScaler):
            scale = pending_scale(obj) if obj._scale is not None else 1.0  # never used: nothing scaled yet
            if scale > 1 and (best is None or scale > best[0]):
                best = (scale, obj)
    return best[1] if best is not None else None

"""JSON has no NaN or Infinity, and a Jupyter comm message holding them is dropped by the browser's
``JSON.parse``: a widget showing a NaN value or gradient would never draw. Numbers are sent as the
strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` instead, and ``js/src/state/finite.ts`` turns the
number fields of the page contract back into numbers."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_json"]


def finite_json(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by its string name (containers copied only if needed)."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        out = {k: finite_json(v) for k, v in obj.items()}
        return obj if all(out[k] is v for k, v in obj.items()) else out
    if isinstance(obj, (list, tuple)):
        items = [finite_json(v) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else items
    return obj

"""Which half a mechanism class belongs to, fixed before any rule was written for it.

The 22 families the doctor was developed against are the ``"original"`` classes. Every class added after
them is put in ``"tuned"`` or ``"held-out"`` by the first bit of the SHA-256 of its name: a rule that needs
no judgement, committed together with the classes and before the doctor's rules for them. Rules may be
tuned on the ``"tuned"`` half only; the ``"held-out"`` half is run and reported, never fitted.
"""

from __future__ import annotations

import hashlib
from typing import Literal

__all__ = ["ORIGINAL", "Half", "half"]

Half = Literal["original", "tuned", "held-out"]

ORIGINAL = frozenset({
    "detach", "data", "left-graph", "zero-derivative", "saturated", "hook-zeroed", "custom-backward", "no-grad",
    "reentrant-checkpoint", "unused-parameter", "frozen", "not-in-optimizer", "not-a-parameter", "dead-adapter",
    "recreated-parameter", "mode", "detached-pred", "double-backward", "unscaled-accumulation", "two-optimizers",
    "zero-grad-before-step", "stale-grad",
})


def half(name: str) -> Half:
    """``"original"`` for the first 22 families; else ``"tuned"`` or ``"held-out"`` by a hash of the name."""
    if name in ORIGINAL:
        return "original"
    return "tuned" if hashlib.sha256(name.encode()).digest()[0] & 1 == 0 else "held-out"

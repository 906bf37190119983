"""A NaN/Inf seen in the doctor's steps, traced to its birth: the failing step replayed under ``gv.find_nonfinite``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from gradviz_nb.doctor.findings import Finding
from gradviz_nb.doctor.nodes import origin_node
from gradviz_nb.doctor.observe import StepRecord
from gradviz_nb.doctor.state import TrainingState
from gradviz_nb.kinds import nan_fix

__all__ = ["nan_origin"]


def nan_origin(step: Callable[[], Any], model: nn.Module, saved: TrainingState, bad: StepRecord) -> Finding:
    """Replay up to the step that went non-finite and run that one under gv.find_nonfinite."""
    from gradviz_nb.probes.nonfinite import find_nonfinite

    saved.restore()
    found = None
    try:
        for _ in range(bad.index - 1):
            step()
        found = find_nonfinite(step, model)
    except Exception:  # the step failing on replay: the NaN/Inf stays reported, its origin unknown
        found = None
    if found is None:
        return Finding("nan-origin", "(unknown)", f"NaN/Inf in the loss or the gradients at step {bad.index}",
                       "replaying the step under gv.find_nonfinite did not reproduce it (randomness outside "
                       "torch's RNG, or data that changes between calls)", "run gv.find_nonfinite(step, model) "
                       "on the failing batch", bad.index)
    where = found.module or "(top level)"
    return Finding("nan-origin", f"{found.op} in {where}", f"{found.kind} born in the {found.phase} pass: "
                   f"{found.cause}", "; ".join(line.strip() for line in found.summary().splitlines()),
                   nan_fix(found.cause),
                   bad.index, origin_node(bad, found.module, found.node or found.op))


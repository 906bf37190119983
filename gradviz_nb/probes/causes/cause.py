"""The answer the causes family gives (:class:`Cause`) and the wording the walk and the recorded backward share:
where a recorded forward event happened, a user's custom ``autograd.Function``, a hook measured zeroing, a
saturated activation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gradviz_nb.kinds import Kind, fix_for
from gradviz_nb.tracing import AutogradGraph
from gradviz_nb.tracing.capture import recent_line
from gradviz_nb.tracing.evidence import Evidence

__all__ = ["TORCH_PY_NODES", "Cause"]

# Python-level nodes torch itself makes (not a user's autograd.Function)
TORCH_PY_NODES = {"CheckpointFunctionBackward", "BackwardHookFunctionBackward", "CompiledFunctionBackward",
                  "RegisterPostBackwardFunctionBackward", "_DDPSinkBackward", "RedistributeBackward"}
_NATIVE = re.compile(r"Backward\d+$")

@dataclass(frozen=True)
class Cause:
    """``kind`` None: nothing is wrong (or the zero is expected); ``event``: the recorded forward evidence
    behind it (for prove())."""

    status: str
    kind: Kind | None
    cause: str
    evidence: str
    fix: str
    node: str = ""
    event: Evidence | None = None
    hook: Any = None  # hook-zeroed: the live hook object found on the parameter or module


def _place(e: Evidence) -> str:
    where = f" in module {e.where!r}" if e.where else " at the model's top level"
    return f"{e.line or 'an unknown line'}{where}"


def _custom(attrs: dict[str, Any]) -> bool:
    op = str(attrs.get("op", ""))
    return (attrs.get("kind") == "op" and op.endswith("Backward") and not _NATIVE.search(op)
            and op not in TORCH_PY_NODES and not attrs.get("compiled") and not attrs.get("distributed"))


def _hook_cause(status: str, name: str, e: Evidence, node: str) -> Cause:
    nums = e.numbers
    return Cause(status, "hook-zeroed", f"the hook {e.hook} registered at {_place(e)} returned a zero gradient",
                 f"measured in backward: the hook received a gradient of norm {nums['grad_in']:.3g} and returned "
                 f"norm {nums['grad_out']:.3g}; {name} is upstream of it", fix_for("hook-zeroed"), node, e)


def _on_bound(e: Evidence) -> str:
    """The evidence's note on inputs exactly on a clipping op's bound, whose derivative is 0 there (relu,
    relu6, hardtanh in every torch; clamp from torch 2.14 on), or ``""``."""
    share = e.numbers.get("on_bound", 0.0)
    if not share:
        return ""
    rule = "from torch 2.14 on, clamp's derivative is 0 there" if e.op.startswith(("clamp", "clip")) \
        else f"{e.op}'s derivative is 0 there"
    return f" ({share:.1%} of its inputs were exactly on its bound: {rule})"


def _saturated(status: str, name: str, e: Evidence, node: str, graph: AutogradGraph) -> Cause:
    nums = e.numbers
    return Cause(status, "saturated", f"{e.op} at {_place(e)} is saturated: {nums['fraction']:.1%} of its outputs "
                 "pass no gradient", f"measured in forward: {nums['fraction']:.1%} of {e.op}'s {e.shape} outputs sat "
                 f"in its flat region{_on_bound(e)}, mean local derivative {nums['derivative']:.3g}; {name} is "
                 "upstream of it", fix_for("saturated"), node, e)


def _made_at(seq: object, lines: dict[int, str] | None = None) -> str:
    """The user's line that made the node numbered ``seq``: from ``lines`` (a re-run's, or the doctor's record of
    each custom Function's call), else from the capture that recorded it ("" when none did)."""
    if not isinstance(seq, int) or seq < 0:
        return ""
    return (lines or {}).get(seq, "") or recent_line(seq)

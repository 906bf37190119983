"""The one registry of verdict kinds: every "something is wrong" a tool can say, with its label, rank and fix.

Three words, one vocabulary (see the glossary in CONTRIBUTING.md):

- a **flag** (:class:`~gradviz_nb.probes.flow.Flag`) is what ``gradient_flow`` and ``GradientMonitor``
  raise about one parameter or layer;
- a **verdict** (:class:`~gradviz_nb.analysis.layer_health.LayerVerdict`) is the pure layer-health rule's
  answer, which ``gradient_flow`` turns into a flag;
- a **finding** (:class:`~gradviz_nb.doctor.Finding`) is what ``gv.doctor`` reports, with evidence and a fix.

All three carry a :data:`Kind`, so mypy refuses a misspelt kind, and a test checks that every kind here has
a bug-zoo case and that every kind a tool emits is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast, get_args

__all__ = ["KINDS", "Kind", "KindInfo", "Tool", "as_kind", "fix_for", "kinds_of", "rank"]

Kind = Literal[
    "nan-origin", "inplace", "stale-grad", "zero-grad-before-step", "double-backward", "unscaled-accumulation",
    "two-optimizers", "recreated-parameter", "not-in-optimizer", "not-a-parameter", "frozen", "detached",
    "data-access", "left-graph", "reentrant-checkpoint", "custom-backward", "zero-derivative", "saturated",
    "hook-zeroed", "unused-parameter", "no-grad", "mode", "dead-adapter", "exploding", "vanishing", "spike",
    "nan", "update-size", "clipping", "replica-mismatch", "unused-on-rank",
]
Tool = Literal["doctor", "flow", "monitor"]


@dataclass(frozen=True)
class KindInfo:
    """``label``: a few words for charts and lists; ``rank``: the order a reader should fix things in (lower
    first); ``fix``: the one-line fix a tool gives when it has nothing more specific; ``produced_by``: the
    tools that can emit it; ``case``: the bug-zoo group that proves it, or the test that does where a zoo
    case cannot (two processes)."""

    label: str
    rank: int
    fix: str
    produced_by: frozenset[Tool]
    case: str = ""


def _info(label: str, fix: str, *tools: Tool, case: str = "") -> tuple[str, str, frozenset[Tool], str]:
    return label, fix, frozenset(tools), case


# In the order a reader should fix them: a NaN's birth first, loud errors, then silent losses, then sizes.
_TABLE: dict[Kind, tuple[str, str, frozenset[Tool], str]] = {
    "nan-origin": _info("NaN/Inf born here", "guard the op's input (clamp, add an epsilon, or mask before it)",
                        "doctor"),
    "inplace": _info("in-place overwrite", "replace the in-place op (x.add_(...)) by its out-of-place form",
                     "doctor"),
    "stale-grad": _info("stale gradient", "call optimizer.zero_grad() (or model.zero_grad()) once per step",
                        "doctor", "flow", "monitor"),
    "zero-grad-before-step": _info("zero_grad between backward and step",
                                   "call optimizer.zero_grad() before backward() (or after step()), never between "
                                   "backward() and step()", "doctor"),
    "double-backward": _info("backward twice per step",
                             "call backward() once per optimizer step (sum the losses first, or divide each)",
                             "doctor"),
    "unscaled-accumulation": _info("accumulation not divided",
                                   "divide each micro-batch's loss by the number of accumulation steps",
                                   "doctor"),
    "two-optimizers": _info("stepped by two optimizers", "give each parameter to exactly one optimizer",
                            "doctor"),
    "recreated-parameter": _info("parameter re-created in forward",
                                 "create parameters once in __init__, never inside forward()", "doctor"),
    "not-in-optimizer": _info("not in the optimizer", "build the optimizer from model.parameters()",
                              "doctor", "flow", "monitor"),
    "not-a-parameter": _info("not registered", "register it: nn.Parameter(...), nn.ModuleList / nn.ModuleDict",
                             "doctor"),
    "frozen": _info("frozen but optimized", "p.requires_grad_(True), or leave it out of the optimizer",
                    "doctor", "flow"),
    "detached": _info("cut by detach()", "remove the detach() on the path from this parameter to the loss",
                      "doctor"),
    "data-access": _info("cut by .data", "use the tensor itself, not .data", "doctor"),
    "left-graph": _info("left the graph",
                        "keep the value a tensor: no .item(), .tolist(), numpy round trip, torch.tensor(...) "
                        "re-wrapping or integer cast on the path to the loss", "doctor"),
    "reentrant-checkpoint": _info("reentrant checkpoint cut",
                                  "checkpoint(..., use_reentrant=False), or make the block's input require grad "
                                  "(model.enable_input_require_grads())", "doctor"),
    "custom-backward": _info("custom backward drops the gradient",
                             "return the gradient for that input from the autograd.Function's backward "
                             "(check it with gv.gradcheck)", "doctor"),
    "zero-derivative": _info("zero-derivative op",
                             "replace the op on the path (round, sign, a comparison) by a differentiable one, or a "
                             "straight-through estimator", "doctor"),
    "saturated": _info("saturated activation",
                       "bring the activation's input back into range: init, bias, input scale or normalisation",
                       "doctor"),
    "hook-zeroed": _info("gradient zeroed by a hook", "fix or remove the hook that returns a zero gradient",
                         "doctor"),
    "unused-parameter": _info("unused parameter",
                              "use it in the loss, set requires_grad_(False), or DDP(find_unused_parameters=True)",
                              "doctor"),
    "no-grad": _info("no gradient", "put the parameter on the loss's path (no detach, no torch.no_grad())",
                     "doctor", "flow", "monitor"),
    "mode": _info("train/eval mode", "model.train() before training steps, model.eval() before evaluating",
                  "doctor"),
    "dead-adapter": _info("dead adapter",
                          "make sure the adapter is on the loss's path: no detach() around it, adapters enabled",
                          "doctor", "flow"),
    "exploding": _info("exploding gradient",
                       "lower the learning rate or clip gradients (torch.nn.utils.clip_grad_norm_); check the init",
                       "doctor", "flow"),
    "vanishing": _info("vanishing gradient",
                       "shorten the gradient path: residual connections, normalisation, or a non-saturating "
                       "activation", "doctor", "flow"),
    "spike": _info("gradient spike", "look at that step's batch (outliers, bad labels); clip gradients",
                   "doctor", "monitor"),
    "nan": _info("NaN/Inf gradient", "find where the NaN is born: gv.find_nonfinite(step)",
                 "doctor", "flow", "monitor"),
    "update-size": _info("update size", "check the learning rate and the optimizer's param groups", "monitor"),
    "clipping": _info("clipping bites", "raise max_norm, or lower the learning rate", "monitor"),
    "replica-mismatch": _info("replicas disagree",
                              "check for rank-dependent code between backward and the all-reduce", "monitor",
                              case="tests/unit/test_ddp.py (needs two torchrun ranks)"),
    "unused-on-rank": _info("unused on a rank", "use the parameter on every rank, or find_unused_parameters=True",
                            "monitor", case="tests/unit/test_ddp.py (needs two torchrun ranks)"),
}

KINDS: dict[Kind, KindInfo] = {
    kind: KindInfo(label, rank, fix, tools, case)
    for rank, (kind, (label, fix, tools, case)) in enumerate(_TABLE.items())
}
assert set(KINDS) == set(get_args(Kind)), "every Kind has one row in the table"


def kinds_of(tool: Tool) -> tuple[Kind, ...]:
    """The kinds one tool can emit, in rank order."""
    return tuple(k for k, info in KINDS.items() if tool in info.produced_by)


_RANKS: dict[str, int] = {k: info.rank for k, info in KINDS.items()}


def rank(kind: str) -> int:
    """Where a kind sorts (unknown kinds last)."""
    return _RANKS.get(kind, len(KINDS))


def as_kind(name: str) -> Kind:
    """``name`` as a :data:`Kind` (from a saved file, say); ValueError when the registry lacks it."""
    if name not in _RANKS:
        raise ValueError(f"unknown verdict kind {name!r}; known: {', '.join(KINDS)}")
    return cast(Kind, name)


def fix_for(kind: Kind) -> str:
    return KINDS[kind].fix

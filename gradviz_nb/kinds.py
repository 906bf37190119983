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
from typing import Any, Literal, cast, get_args

__all__ = ["KINDS", "NAN_FIX", "Kind", "KindInfo", "Tool", "as_kind", "fix_for", "kinds_of", "nan_fix", "rank"]

Kind = Literal[
    "nan-origin", "inplace", "stale-grad", "zero-grad-before-step", "double-backward", "unscaled-accumulation",
    "two-optimizers", "clip-before-unscale", "unscaled-step", "clipped-away", "grad-edited", "loss-weight",
    "zero-grad-in-accumulation", "lr-zero", "wrong-gradient", "data-write", "recreated-parameter", "not-in-optimizer",
    "not-a-parameter", "frozen", "detached",
    "data-access", "left-graph", "reentrant-checkpoint", "custom-backward", "zero-derivative", "saturated",
    "hook-zeroed", "unused-parameter", "no-grad", "mode", "dead-adapter", "exploding", "vanishing", "spike",
    "nan", "update-size", "clipping", "clip-norm", "replica-mismatch", "unused-on-rank",
]
Tool = Literal["doctor", "flow", "monitor"]


@dataclass(frozen=True)
class KindInfo:
    """Everything said about one kind, in one place (the page and the docs' kind tables read it too).

    Attributes:
        label: a few words for charts and lists.
        rank: the order a reader should fix things in (lower first).
        fix: the one-line fix a tool gives when it has nothing more specific.
        produced_by: the tools that can emit it.
        scope: where a finding of this kind applies when it is not on the graph ("the optimizer step"), or
            ``""`` when it applies to the parameter, module or op it names (its target).
        case: the bug-zoo group that proves it, or the test that does where a zoo case cannot (two processes).
    """

    label: str
    rank: int
    fix: str
    produced_by: frozenset[Tool]
    scope: str = ""
    case: str = ""


def _info(label: str, fix: str, *tools: Tool, scope: str = "", case: str = "") -> dict[str, Any]:
    return {"label": label, "fix": fix, "produced_by": frozenset(tools), "scope": scope, "case": case}


# Where a kind about the training loop, not a tensor, applies (KindInfo.scope).
_STEP = "the optimizer step"
_BACKWARDS = "the step's backward calls"
_REGISTERED = "the module's registered parameters"
_RANKS_RUN = "the ranks of the distributed run"


# In the order a reader should fix them: a NaN's birth first, loud errors, then silent losses, then sizes.
_TABLE: dict[Kind, dict[str, Any]] = {
    "nan-origin": _info("NaN/Inf born here", "guard the op's input (clamp, add an epsilon, or mask before it)",
                        "doctor"),
    "inplace": _info("in-place overwrite", "replace the in-place op (x.add_(...)) by its out-of-place form",
                     "doctor"),
    "stale-grad": _info("stale gradient", "call optimizer.zero_grad() (or model.zero_grad()) once per step",
                        "doctor", "flow", "monitor", scope=_STEP),
    "zero-grad-before-step": _info("zero_grad between backward and step",
                                   "call optimizer.zero_grad() before backward() (or after step()), never between "
                                   "backward() and step()", "doctor", scope=_STEP),
    "double-backward": _info("backward twice per step",
                             "call backward() once per optimizer step (sum the losses first, or divide each)",
                             "doctor", scope=_BACKWARDS),
    "unscaled-accumulation": _info("accumulation not divided",
                                   "divide each micro-batch's loss by the number of accumulation steps",
                                   "doctor", scope=_BACKWARDS),
    "two-optimizers": _info("stepped by two optimizers", "give each parameter to exactly one optimizer",
                            "doctor", scope=_STEP),
    "clip-before-unscale": _info("clipped before unscaling",
                                 "call scaler.unscale_(optimizer) before clipping, then scaler.step(optimizer)",
                                 "doctor", scope=_STEP),
    "unscaled-step": _info("loss scale never undone",
                           "step through the scaler: scaler.step(optimizer); scaler.update()", "doctor", scope=_STEP),
    "clipped-away": _info("clipping leaves nothing",
                          "raise the clipping threshold (max_norm around 1.0; clip_value above the gradients' size)",
                          "doctor", scope=_STEP),
    "grad-edited": _info(".grad edited to nothing", "remove the write into .grad between backward() and step()",
                         "doctor", scope=_STEP),
    "loss-weight": _info("loss weight leaves nothing",
                         "give the loss a weight that is not zero at this step", "doctor", scope=_BACKWARDS),
    "zero-grad-in-accumulation": _info("zero_grad inside accumulation",
                                       "call optimizer.zero_grad() once per optimizer step, outside the micro-batch "
                                       "loop", "doctor", scope=_STEP),
    "lr-zero": _info("learning rate 0 in every step",
                     "give the param group a learning rate above 0 when the optimizer steps", "doctor", scope=_STEP),
    "wrong-gradient": _info("backward disagrees with forward",
                            "fix the autograd.Function's backward (gv.gradcheck names the input and the error)",
                            "doctor"),
    "data-write": _info("written through .data in forward",
                        "do not write parameters through .data during forward; update them after step() "
                        "under torch.no_grad()", "doctor"),
    "recreated-parameter": _info("parameter re-created in forward",
                                 "create parameters once in __init__, never inside forward()", "doctor",
                                 scope=_REGISTERED),
    "not-in-optimizer": _info("not in the optimizer", "build the optimizer from model.parameters()",
                              "doctor", "flow", "monitor", scope=_STEP),
    "not-a-parameter": _info("not registered", "register it: nn.Parameter(...), nn.ModuleList / nn.ModuleDict",
                             "doctor", scope=_REGISTERED),
    "frozen": _info("frozen but optimized", "p.requires_grad_(True), or leave it out of the optimizer",
                    "doctor", "flow", scope=_STEP),
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
                  "doctor", scope="the model's train/eval mode"),
    "dead-adapter": _info("dead adapter",
                          "make sure the adapter is on the loss's path: no detach() around it, adapters enabled",
                          "doctor", "flow"),
    "exploding": _info("exploding gradient",
                       "lower the learning rate or clip gradients (torch.nn.utils.clip_grad_norm_); check the init",
                       "doctor", "flow"),
    "vanishing": _info("vanishing gradient",
                       "shorten the gradient path: residual connections, normalisation, or a non-saturating "
                       "activation", "doctor", "flow"),
    "spike": _info("gradient spike", "look at that step's batch (outliers, bad labels); clip gradients "
                   "(torch.nn.utils.clip_grad_norm_)",
                   "doctor", "monitor"),
    "nan": _info("NaN/Inf gradient", "find where the NaN is born: gv.find_nonfinite(step)",
                 "doctor", "flow", "monitor"),
    "update-size": _info("update size", "check the learning rate and the optimizer's param groups", "monitor",
                         scope=_STEP),
    "clipping": _info("clipping bites", "raise max_norm, or lower the learning rate", "monitor", scope=_STEP),
    "clip-norm": _info("clip used the wrong norm",
                       "clip with the global norm: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) on "
                       "the DTensor parameters (one call per mesh), never a norm of this rank's shards alone, and "
                       "never one summed over replicas", "doctor", "monitor",
                       case="tests/unit/test_meshes.py (needs four torchrun ranks)", scope=_STEP),
    "replica-mismatch": _info("replicas disagree",
                              "check for rank-dependent code between backward and the all-reduce", "monitor",
                              case="tests/unit/test_ddp.py (needs two torchrun ranks)", scope=_RANKS_RUN),
    "unused-on-rank": _info("unused on a rank", "use the parameter on every rank, or find_unused_parameters=True",
                            "monitor", case="tests/unit/test_ddp.py (needs two torchrun ranks)", scope=_RANKS_RUN),
}

KINDS: dict[Kind, KindInfo] = {kind: KindInfo(rank=rank, **row) for rank, (kind, row) in enumerate(_TABLE.items())}
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
    """The registry's one-line fix for ``kind`` (what a check says unless its fix names something only it
    knows, such as the attribute or the number of micro-batches)."""
    return KINDS[kind].fix


# The fix of a ``nan-origin`` finding by the cause gv.find_nonfinite named (NonFinite.cause).
NAN_FIX: dict[str, str] = {
    "log(0)": "clamp the log's input: torch.log(x.clamp_min(eps)), or use log_softmax / logsumexp",
    "log of a negative": "clamp the log's input to be positive, or fix the sign upstream",
    "0/0": "add an epsilon to the divisor (x / (x.norm() + eps)) or torch.nn.functional.normalize",
    "division by zero": "add an epsilon to the divisor, or mask zero rows",
    "exp overflow": "subtract the max before exp (torch.softmax / logsumexp do it for you)",
    "sqrt of a negative": "clamp before sqrt: torch.sqrt(x.clamp_min(0) + eps)",
}


def nan_fix(cause: str) -> str:
    """The fix for a NaN/Inf born of ``cause`` (:data:`NAN_FIX`), else the ``nan-origin`` kind's own."""
    return NAN_FIX.get(cause, fix_for("nan-origin"))

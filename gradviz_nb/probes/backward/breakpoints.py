"""Breakpoints on a backward recording: jump to the step where something first happened, in engine order.

A recording of a deep model has thousands of steps; nobody presses "step" 2,000 times. Each function here
reads the recorded statistics of every step (what the node *received*, the gradients w.r.t. its outputs,
and what it *sent*, the gradients w.r.t. its inputs) and returns a :class:`Stop`: the step, the node to
frame, and the rule that fired with PyTorch's numbers. A breakpoint that never fires says so (``hit`` is
False and the text says what was checked). Nothing here runs the model: it reads what
:func:`gv.record_backward` recorded. ``rec.find(...)`` is the entry point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gradviz_nb import schema
from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.calltree import CallTree

if TYPE_CHECKING:
    from gradviz_nb.probes.backward.recording import BackwardRecording
    from gradviz_nb.probes.backward.stats import GradStats
    from gradviz_nb.probes.backward.steps import Step

__all__ = ["RULES", "Stop", "find"]

RULES = ("nonfinite", "zero", "above", "jump", "module", "leaf")


@dataclass(frozen=True)
class Stop:
    """Where a breakpoint stopped: ``step`` (None when it never fired), the ``node`` to frame, and ``text``,
    the rule with the numbers that made it fire. ``last``: the last step of a module box or leaf.
    ``healed``: for ``nonfinite``, later steps that received NaN/Inf and sent only finite gradients.
    ``each``: for ``leaf``, every step that delivered a gradient into it, first to last (a tied or reused
    parameter gets one per use)."""

    rule: str
    step: Step | None
    text: str
    last: Step | None = None
    healed: tuple[Step, ...] = field(default=(), repr=False)
    each: tuple[Step, ...] = field(default=(), repr=False)

    @property
    def hit(self) -> bool:
        """True when the breakpoint fired."""
        return self.step is not None

    @property
    def index(self) -> int:
        """The stepper's step for this stop (``w.step = stop.index``); -1 when it never fired."""
        return self.step.index if self.step is not None else -1

    @property
    def node(self) -> str:
        """The graph node of the step it stopped at (``""`` when it never fired)."""
        return self.step.node if self.step is not None else ""

    def __str__(self) -> str:
        return self.text

    def to_json(self, indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``stop`` type)."""
        return schema.dumps(schema.stop(self), indent)

    def __repr__(self) -> str:
        where = f"cursor {self.index}" if self.hit else "never hit"
        return f"<Stop {self.rule}: {where}: {self.text}>"


def _bad(grads: Sequence[GradStats | None]) -> list[int]:
    return [k for k, g in enumerate(grads) if g is not None and g.nonfinite]


def _norm(grads: Sequence[GradStats | None]) -> float:
    """The norm of all of a step's gradients together (sqrt of the sum of squares)."""
    return math.sqrt(sum(g.norm**2 for g in grads if g is not None))


class _Where:
    """Names a step by op, module and pass, as a reader reads them: numbered from 1 within its pass, as the
    stepper's header counts ("step 2 of 19"), not by the 0-based cursor ``stop.index``."""

    def __init__(self, rec: BackwardRecording, names: dict[str, str] | None = None) -> None:
        self.nodes = rec.graph.nx.nodes
        self.names = names or {}  # a leaf named as the user asked (a tied weight has several names)
        self.passes = rec.passes
        self.start: dict[int, int] = {}
        for s in rec.steps:
            self.start.setdefault(s.pass_index, s.index)

    def __call__(self, s: Step) -> str:
        d = self.nodes[s.node]
        name = self.names.get(s.node) or ((d.get("names") or [""])[0] if d.get("kind") == "leaf" else "")
        what = name or s.op
        call = d.get("call") or ""
        inside = f" in {call}" if call else ""
        passed = f", pass {s.pass_index + 1}" if self.passes > 1 else ""
        return f"step {s.index - self.start.get(s.pass_index, 0) + 1} ({what}{inside}{passed})"


def first_nonfinite(rec: BackwardRecording) -> Stop:
    """The first step that received or sent a NaN/Inf gradient; where it was born when it received only
    finite ones. Steps that later received NaN/Inf but sent only finite gradients are ``healed``."""
    where = _Where(rec)
    first: Step | None = None
    healed: list[Step] = []
    for s in rec.steps:
        got, sent = _bad(s.grad_outputs), _bad(s.grad_inputs)
        if first is None and (got or sent):
            first = s
        if got and not sent and any(g is not None for g in s.grad_inputs):
            healed.append(s)
    if first is None and rec.armed is not None and not rec.steps:
        return Stop("nonfinite", None, f"never hit: the armed backward checked all {rec.armed.steps} steps and "
                                       "every gradient was finite (nothing recorded)")
    if first is None:
        return Stop("nonfinite", None, f"never hit: all {len(rec.steps)} recorded steps received and sent only "
                                       "finite gradients")
    got, sent = _bad(first.grad_outputs), _bad(first.grad_inputs)
    if rec.forward_text:  # the loss was already NaN/Inf: backward only carried it
        text = f"made in the forward pass: {rec.forward_text}; backward first carried it at {where(first)}"
    elif not got:
        received = _norm(first.grad_outputs)
        text = (f"born at {where(first)}: it received finite gradients (norm {received:.4g}) and sent NaN/Inf "
                f"to input {', '.join(map(str, sent))}")
    else:
        text = (f"{where(first)} already received a NaN/Inf gradient: the loss's gradient is not finite, so the "
                "NaN/Inf was made in the forward pass (gv.find_nonfinite names the op that made it)")
    if healed:
        text += (f"; healed {len(healed)} time{'s' if len(healed) != 1 else ''} later (received NaN/Inf, sent "
                 f"finite values), first at {where(healed[0])}")
    return Stop("nonfinite", first, text, healed=tuple(healed))


def first_zero(rec: BackwardRecording) -> Stop:
    """The first step that received a non-zero gradient and sent an exactly-zero one."""
    where = _Where(rec)
    for s in rec.steps:
        received = _norm(s.grad_outputs)
        if not received > 0 or not math.isfinite(received):
            continue
        zeros = [k for k, g in enumerate(s.grad_inputs) if g is not None and g.norm == 0 and g.max_abs == 0]
        if zeros:
            return Stop("zero", s, f"{where(s)} received a gradient of norm {received:.4g} and sent exactly zero "
                                   f"to input {', '.join(map(str, zeros))}: its local derivative is zero there")
    return Stop("zero", None, f"never hit: no step of {len(rec.steps)} turned a non-zero gradient into an "
                              "exactly-zero one")


def first_above(rec: BackwardRecording, threshold: float) -> Stop:
    """The first step that received or sent a gradient whose norm is above ``threshold``."""
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold >= 0):
        raise GradvizError(f"rec.find('above', threshold=...): give a finite number >= 0, got {threshold!r}.")
    where = _Where(rec)
    for s in rec.steps:
        for label, grads in (("received", s.grad_outputs), ("sent", s.grad_inputs)):
            big = [(k, g.norm) for k, g in enumerate(grads) if g is not None and g.norm > threshold]
            if big:
                k, norm = big[0]
                side = "for output" if label == "received" else "to input"
                return Stop("above", s, f"{where(s)} {label} a gradient of norm {norm:.4g} {side} {k}, "
                                        f"above {threshold:.4g}")
    return Stop("above", None, f"never hit: every gradient of {len(rec.steps)} steps has norm <= {threshold:.4g}")


def largest_jump(rec: BackwardRecording) -> Stop:
    """The step whose sent gradient's norm differs most from the norm it received (by factor, either way)."""
    where = _Where(rec)
    best: tuple[float, Step, float, float] | None = None
    for s in rec.steps:
        received, sent = _norm(s.grad_outputs), _norm(s.grad_inputs)
        if not (received > 0 and sent > 0 and math.isfinite(received) and math.isfinite(sent)):
            continue
        size = abs(math.log10(sent / received))
        if best is None or size > best[0]:
            best = (size, s, received, sent)
    if best is None:
        return Stop("jump", None, "never hit: no step both received and sent a finite, non-zero gradient")
    _, s, received, sent = best
    return Stop("jump", s, f"largest change of norm at {where(s)}: received {received:.4g}, sent {sent:.4g} "
                           f"(x{sent / received:.4g})")


def module_span(rec: BackwardRecording, module: str) -> Stop:
    """The first and last backward step inside a module box (by call id or module path)."""
    calls = rec.graph.calls
    chosen = {c["id"] for c in calls if module in (c["id"], c["path"])}
    if not chosen:
        known = ", ".join(sorted({c["path"] for c in calls})[:8]) or "none (trace under gv.capture)"
        raise GradvizError(f"rec.find(module={module!r}): no module call of that name in the recorded graph; "
                           f"module paths there: {known}.")
    tree, nodes, where = CallTree(calls), rec.graph.nx.nodes, _Where(rec)
    inside = [s for s in rec.steps if tree.inside(nodes[s.node].get("call") or "", chosen)]
    if not inside:
        return Stop("module", None, f"never hit: backward ran no step inside {module}")
    first, last = inside[0], inside[-1]
    return Stop("module", first, f"{module}: {len(inside)} backward steps, first {where(first)}, last "
                                 f"{where(last)}", last=last)


def leaf_span(rec: BackwardRecording, name: str) -> Stop:
    """Every delivery into a leaf: the steps that sent a gradient into its buffer, first to last (a tied
    or reused parameter gets one per use; PyTorch sums them before ``AccumulateGrad`` runs once per pass)."""
    node = rec.graph.find(name)
    attrs = rec.graph.nx.nodes[node]
    if attrs["kind"] != "leaf":
        raise GradvizError(f"rec.find(leaf={name!r}): that is not a leaf of the recorded graph; give a parameter "
                           "name or a leaf's node id.")
    label = name if name != node else (attrs.get("names") or [node])[0]
    where = _Where(rec, {node: label})
    each = [s for s in rec.steps if any(d.target == node for d in s.deliveries)]
    if not each:  # a leaf the engine reached without a recorded producer: its own step
        each = [s for s in rec.steps if s.node == node]
    if not each:
        return Stop("leaf", None, f"never hit: no gradient was delivered to {label} in the recorded passes")

    def got(s: Step) -> str:
        if s.node == node:
            g = s.grad_outputs[0] if s.grad_outputs else None
            return f"norm {g.norm:.4g}" if g is not None else "no gradient"
        sent = [s.grad_inputs[d.input_nr] for d in s.deliveries if d.target == node and d.input_nr < len(s.grad_inputs)]
        return f"norm {_norm(sent):.4g}" if any(g is not None for g in sent) else "no gradient"

    first, last = each[0], each[-1]
    text = f"{label}: first delivery at {where(first)} ({got(first)})"
    if last is not first:
        text += f", last at {where(last)} ({got(last)}), {len(each)} in all"
    return Stop("leaf", first, text, last=last, each=tuple(each))


def quiet(rec: BackwardRecording, rule: str) -> Stop:
    """A quiet armed recording kept no steps: what it can say, and the call that records them."""
    armed = rec.armed
    assert armed is not None
    return Stop(rule, None, f"never hit: this armed recording kept no steps (its backward of {armed.steps} steps "
                            "had no NaN/Inf, which is all until='nonfinite' checks); record the steps with "
                            "gv.record_backward(loss, model=model), without until=")


def _check(rule: object, threshold: object, module: object, leaf: object) -> None:
    """Arguments that cannot all apply are refused, naming the combinations that can."""
    valid = ("rec.find('nonfinite'), rec.find('zero'), rec.find('jump'), rec.find('above', threshold=1e3), "
             "rec.find(module='blocks.3') or rec.find(leaf='fc1.weight')")
    if not isinstance(rule, str):
        raise GradvizError(f"rec.find({rule!r}): give one rule as a string; one of {valid}.")
    for label, value in (("module", module), ("leaf", leaf)):
        if not isinstance(value, str):
            raise GradvizError(f"rec.find({label}={value!r}): give a {label} name as a string, e.g. {valid}.")
    given = [f"rule {rule!r}"] * bool(rule) + [f"module={module!r}"] * bool(module) + [f"leaf={leaf!r}"] * bool(leaf)
    if len(given) > 1:
        raise GradvizError(f"rec.find({', '.join(given)}): these cannot apply together; give one of {valid}.")
    if threshold is not None and rule != "above":
        raise GradvizError(f"rec.find({', '.join(given) or 'threshold=...'}): threshold= only applies to 'above', "
                           f"as in rec.find('above', threshold=1e3); give one of {valid}.")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise GradvizError(f"rec.find('above', threshold={threshold!r}): give a finite number >= 0, e.g. 1e3.")


def find(rec: BackwardRecording, rule: str = "", *, threshold: float | None = None, module: str = "",
         leaf: str = "") -> Stop:
    """``rule``: "nonfinite", "zero", "above" (with ``threshold``) or "jump"; or ``module=`` / ``leaf=``."""
    _check(rule, threshold, module, leaf)
    if not (module or leaf) and rule not in RULES[:4]:
        raise GradvizError(f"rec.find({rule!r}): give one of {', '.join(repr(r) for r in RULES[:4])}, or "
                           "module='path' / leaf='name'.")
    if rule == "above" and threshold is None:
        raise GradvizError("rec.find('above') needs threshold=: the gradient norm to stop above.")
    if rule == "above":
        assert threshold is not None
        if not (math.isfinite(threshold) and threshold >= 0):
            raise GradvizError(f"rec.find('above', threshold=...): give a finite number >= 0, got {threshold!r}.")
    if rec.armed is not None and not rec.steps and rule != "nonfinite":
        return quiet(rec, rule or ("module" if module else "leaf"))
    if module:
        return module_span(rec, module)
    if leaf:
        return leaf_span(rec, leaf)
    if rule == "above":
        assert threshold is not None
        return first_above(rec, threshold)
    rules = {"nonfinite": first_nonfinite, "zero": first_zero, "jump": largest_jump}
    return rules[rule](rec)

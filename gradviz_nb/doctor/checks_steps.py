"""Checks on a step's arithmetic: how many backwards fed each optimizer step, at what scale, through how many
optimizers, and whether the gradients were still there when the optimizer stepped.

All read :class:`~gradviz_nb.doctor.steps.StepEvents` (what the step really did) and name measured numbers:
gradient norms per backward, the gradient the optimizer used, the update each parameter received and what
the optimizer's rule gives (SGD: ``lr * |g|`` for a gradient ``g``; Adam-family on its first step: at most
``lr`` per element, whatever the gradient's size).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gradviz_nb.doctor.findings import Finding
from gradviz_nb.doctor.observe import StepRecord
from gradviz_nb.doctor.step_events import Backward, Foreign, OptimizerStep
from gradviz_nb.kinds import fix_for

if TYPE_CHECKING:
    from gradviz_nb.doctor.checks import Observed

__all__ = ["check_double_backward", "check_recreated", "check_two_optimizers", "check_unscaled_accumulation",
           "check_zero_grad_before_step", "common_module"]

SCALE_SLACK = 1.5  # a step's gradient this many times one loss's gradient is reported (2x and up are bugs)


def common_module(names: Iterable[str]) -> str:
    """The deepest module holding every name ("(model)" at the top)."""
    parts = [n.split(" ")[0].split(".")[:-1] for n in names]
    common: list[str] = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common) or "(model)"


def _norm(values: Iterable[float]) -> float:
    return math.sqrt(sum(v * v for v in values))


def _g(x: float) -> str:
    return f"{x:.3g}"


def _window(rec: StepRecord, step: OptimizerStep) -> list[Backward]:
    """The backwards whose gradients this optimizer step used: after its previous step and the last
    zero_grad() before it, feeding at least one tensor it stepped."""
    ev = rec.events
    start = max([s.order for s in ev.optimizer_steps if s.key == step.key and s.order < step.order]
                + [z.order for z in ev.zeros if z.order < step.order], default=0)
    return [b for b in ev.backwards if start < b.order < step.order and set(b.contrib) & set(step.grad)]


def _repeats(win: list[Backward]) -> list[tuple[Backward, Backward, str]]:
    """(later, earlier, how) for each backward of the same loss as an earlier one in the window."""
    out = []
    for j, b in enumerate(win):
        for a in win[:j]:
            if b.repeat_of == a.index:
                out.append((b, a, "the same loss tensor"))
            elif b.forward > a.forward and b.batch and b.batch == a.batch:
                out.append((b, a, "the same batch through the model again"))
            elif b.forward == a.forward and b.loss == a.loss and b.contrib == a.contrib:
                out.append((b, a, "an equal loss from the same forward, adding an identical gradient"))
            else:
                continue
            break
    return out


def _update_text(step: OptimizerStep, names: list[str], grad_of_one: dict[str, float],
                 what: str = "one backward's gradient") -> str:
    """What the step did to the largest of ``names`` against the rule for one backward's gradient."""
    n = max(names, key=lambda k: step.update.get(k, 0.0))
    lr, rule = step.lr.get(n, float("nan")), step.rule.get(n, float("nan"))
    if step.kind == "SGD" and math.isfinite(rule) and grad_of_one.get(n):
        one = lr * grad_of_one[n]
        return (f"; {step.label} moved {n} by {_g(step.update[n])}, {step.update[n] / one:.2f}x the lr*|g| "
                f"= {_g(one)} {what} gives at lr {_g(lr)}")
    if step.rule_is_bound:
        return (f"; {step.kind} normalises the gradient, so its step barely changes (largest element moved "
                f"{_g(step.update_max.get(n, 0.0))} at lr {_g(lr)}): the size shows in clipping, logging and "
                "weight decay's balance")
    return ""


def check_double_backward(obs: Observed) -> list[Finding]:
    """A backward of the same loss (the same tensor, or the same batch again) twice into one optimizer step:
    the step uses twice the loss's gradient."""
    for rec in obs.records:
        for step in rec.events.optimizer_steps:
            win = _window(rec, step)
            reps = _repeats(win)
            if not reps:
                continue
            later, first, how = reps[0]
            if first.scale + later.scale < SCALE_SLACK * max(first.scale, later.scale):
                continue
            shared = sorted(set(first.contrib) & set(step.grad))
            ratio = _norm(step.grad[n] for n in shared) / max(_norm(first.contrib[n] for n in shared), 1e-30)
            losses = ", ".join("?" if b.loss is None else _g(b.loss) for b in win)
            return [Finding(
                "double-backward", common_module(shared), f"backward ran {len(win)} times into one "
                f"{step.label}.step(), twice on {how}: the step used {ratio:.2f}x the loss's gradient",
                f"at step {rec.index}, backward {later.index + 1}{_at(later.line)} repeated backward "
                f"{first.index + 1}{_at(first.line)} ({how}; "
                f"losses {losses}); |g| of one backward {_g(_norm(first.contrib[n] for n in shared))}, |g| the "
                f"step used {_g(_norm(step.grad[n] for n in shared))} over {len(shared)} parameters"
                + _update_text(step, shared, first.contrib),
                fix_for("double-backward"), rec.index)]
    return []


def _at(line: str) -> str:
    return f" at {line}" if line else ""


def check_unscaled_accumulation(obs: Observed) -> list[Finding]:
    """N backwards, one per micro-batch (each after its own forward of a different batch), into one optimizer
    step, with losses not divided by about N: the step's gradient is about N times the micro-batches' mean."""
    for rec in obs.records:
        for step in rec.events.optimizer_steps:
            win = _window(rec, step)
            k = len(win)
            if k < 2 or _repeats(win) or len({b.forward for b in win}) < k or win[0].forward == 0:
                continue
            if any(b.scale * k < SCALE_SLACK for b in win):
                continue  # divided (by about N or more): a correct accumulation
            shared = sorted(set.intersection(*(set(b.contrib) for b in win)) & set(step.grad))
            if not shared:
                continue
            each = [_norm(b.contrib[n] for n in shared) for b in win]
            used = _norm(step.grad[n] for n in shared)
            scale = win[0].scale
            times = k * scale  # the step's gradient over the mean micro-batch loss's gradient
            how = ("each loss reached backward() undivided (no multiplication or division by a number was seen "
                   "between it and backward())" if scale == 1 else
                   f"each loss was scaled by {_g(scale)} only ({', '.join(win[0].scale_lines) or 'line unknown'})")
            right = {n: step.grad[n] / times for n in shared}
            return [Finding(
                "unscaled-accumulation", common_module(shared), f"{k} micro-batches accumulated into one "
                f"{step.label}.step() without dividing the loss by {k}: the step used {times:.3g}x the mean "
                "micro-batch gradient", f"at step {rec.index}, {k} backwards, each after its own forward of a "
                f"different batch; {how}; |g| per backward {', '.join(_g(e) for e in each)}; the step used their "
                f"sum, |g| {_g(used)} over {len(shared)} parameters, where the mean micro-batch gradient is "
                f"|g| {_g(used / times)}" + _update_text(step, shared, right, "the mean micro-batch gradient"),
                f"divide each micro-batch's loss by {k} (the number of accumulation steps) before backward()",
                rec.index)]
    return []


def check_two_optimizers(obs: Observed) -> list[Finding]:
    """Parameters that two optimizers both stepped in one training step: their update is the sum of both."""
    out: list[Finding] = []
    seen: set[tuple[int, int]] = set()
    for rec in obs.records:
        steps = rec.events.optimizer_steps
        for i, a in enumerate(steps):
            for b in steps[i + 1:]:
                pair = (a.key, b.key)
                if a.key == b.key or pair in seen:
                    continue
                shared = sorted(set(a.update) & set(b.update))
                if not shared:
                    continue
                seen.add(pair)
                n = max(shared, key=lambda k: a.update[k] + b.update[k])
                total, one = a.update[n] + b.update[n], a.rule.get(n, float("nan"))
                versus = (f"; together {_g(total)}, {total / one:.2f}x what one {a.kind} step gives "
                          f"({'at most ' if a.rule_is_bound else ''}{_g(one)} per "
                          f"{'element' if a.rule_is_bound else 'step'})" if math.isfinite(one) and one > 0 else "")
                if a.rule_is_bound and math.isfinite(one):
                    total = a.update_max[n] + b.update_max[n]
                    versus = (f"; together up to {_g(total)} per element, {total / one:.2f}x the at most {_g(one)} "
                              f"one {a.kind} step moves an element")
                out.append(Finding(
                    "two-optimizers", common_module(shared), f"stepped by two optimizers: {a.label} and {b.label}",
                    f"at step {rec.index}, {a.label}.step(){_at(a.line)} and {b.label}.step(){_at(b.line)} both "
                    f"updated {len(shared)} "
                    f"parameters ({', '.join(shared[:4])}{', ...' if len(shared) > 4 else ''}): {n} moved "
                    f"{_g(a.update[n])} then {_g(b.update[n])}" + versus,
                    f"give each parameter to exactly one optimizer (build {b.label.split(' ')[0]} from the "
                    "parameters the other does not hold)", rec.index))
    return out


def check_zero_grad_before_step(obs: Observed) -> list[Finding]:
    """Gradients a backward of this step produced, gone (None or zero) when the optimizer stepped."""
    for rec in obs.records:
        ev = rec.events
        edited = {n for e in ev.edits if e.after == 0 and "zero_grad" not in e.api for n in e.names}
        for step in ev.optimizer_steps:
            names = sorted(set(step.zeroed) - edited)  # a recorded write's own check names what zeroed those
            if not names:
                continue
            fed = [b for b in ev.backwards if b.order < step.order and set(b.contrib) & set(names)]
            last = fed[-1] if fed else None
            zero = next((z for z in reversed(ev.zeros) if last is not None and last.order < z.order < step.order),
                        None)
            who = f"{zero.who}{f' at {zero.line}' if zero.line else ''}" if zero else "something other than " \
                "zero_grad() (p.grad = None)"
            n = names[0]
            got = _g(last.contrib[n]) if last is not None and n in last.contrib else "?"
            return [Finding(
                "zero-grad-before-step", common_module(names), f"{who} cleared the gradients between backward() "
                f"and {step.label}.step(): the step moved nothing", f"at step {rec.index}, backward gave "
                f"{len(names)} parameters a gradient (e.g. {n}: |g| {got}), then {who} ran; at "
                f"{step.label}.step() their .grad was {step.zeroed[n]}, so they did not move (not unused: "
                "the gradient reached them)",
                fix_for("zero-grad-before-step"), rec.index)]
    return []


def check_recreated(obs: Observed) -> list[Finding]:
    """A parameter made anew in forward: replaced on its module (``self.w = nn.Parameter(...)``) or a new local
    ``nn.Parameter`` each call. The new object gets the gradient; what the optimizer holds never moves."""
    out: list[Finding] = []
    done: set[str] = set()
    for rec in obs.records:
        ev = rec.events
        for n in ev.recreated:
            if n in done or ev.recreated_held.get(n):
                continue
            done.add(n)
            got = next((b.contrib[n] for b in ev.backwards if n in b.contrib), 0.0)
            holders = [s.label for s in ev.optimizer_steps if f"{n} (original)" in s.grad or
                       f"{n} (original)" in s.zeroed] or [ev.labels[k] for k in ev.optimizers]
            out.append(Finding(
                "recreated-parameter", n, "a new nn.Parameter object replaces it during forward, so the optimizer "
                "steps the old one", f"at step {rec.index}, model.{n} was a different object after the step ran "
                f"than before it; the new one got a gradient (|g| {_g(got)}), no optimizer holds it"
                f"{f' ({holders[0]} holds the original, which the step never updates)' if holders else ''}",
                fix_for("recreated-parameter"), rec.index))
    out += _recreated_locals(obs)
    return out


def _recreated_locals(obs: Observed) -> list[Finding]:
    prev: dict[tuple[tuple[int, ...], str], Foreign] = {}
    for rec in obs.records:
        now = {(f.shape, f.call): f for f in rec.events.foreign}
        for key, f in now.items():
            before = prev.get(key)
            if before is None:
                continue
            old = before.ref()
            if old is not None and old is f.ref():
                continue  # the same outside parameter every step (another model's): not re-created
            shape = "x".join(map(str, f.shape)) or "scalar"
            return [Finding(
                "recreated-parameter", f.call, f"a new nn.Parameter {shape} is made in forward at every call: "
                "no optimizer can hold it", f"the nn.Parameter {shape} that {f.call} used at step {rec.index} was a "
                f"different object than at step {rec.index - 1}; it got a gradient (|g| {_g(f.grad)}) that no "
                "optimizer.step() can use", fix_for("recreated-parameter"), rec.index)]
        prev.update(now)
    return []

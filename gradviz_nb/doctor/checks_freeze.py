"""``frozen`` by the step itself: a parameter the training step switches to ``requires_grad=False`` while an
optimizer steps it, so it never trains.

Judged on what the observed steps did, never on names: the step set the parameter's ``requires_grad`` to
False (a ``requires_grad_(False)`` or ``.requires_grad = False`` seen while the step ran, with its line), an
optimizer the step used held it with a learning rate above zero (the user meant to train it), no backward of
the observed steps gave it a gradient (it still had requires_grad=False when each of them started), and its
value never changed over the observed steps. A freeze that harms nothing (a discriminator frozen for the
generator's backward and unfrozen for its own, a backbone the optimizer does not hold) is no finding: a
backward could reach it, or nothing meant to move it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradviz_nb.doctor.findings import Finding
from gradviz_nb.doctor.nodes import call_node

if TYPE_CHECKING:
    from gradviz_nb.doctor.checks import Observed

__all__ = ["check_self_freeze", "self_frozen"]


def self_frozen(obs: Observed) -> dict[str, tuple[str, str, int]]:
    """Parameters the step froze, frozen at every backward, that never trained: name -> (the line that froze it,
    the optimizer holding it, the step it was first seen)."""
    switched: dict[str, tuple[str, int]] = {}
    for rec in obs.records:
        for n, line in rec.events.switched_off.items():
            switched.setdefault(n, (line, rec.index))
    if not switched:
        return {}
    backwards = [b for r in obs.records for b in r.events.backwards]
    if not backwards:
        return {}
    moved = set().union(*(r.moved for r in obs.records))
    fed = {n for b in backwards for n in b.contrib}
    frozen_throughout = frozenset.intersection(*(b.frozen for b in backwards))  # no backward could reach it
    held: dict[str, str] = {}
    for r in obs.records:
        for s in r.events.optimizer_steps:
            for n, lr in s.lr_all.items():
                if lr > 0:
                    held.setdefault(n, s.label)
    return {n: (line, held[n], step) for n, (line, step) in switched.items()
            if n in held and n in frozen_throughout and n not in moved and n not in fed}


def check_self_freeze(obs: Observed) -> list[Finding]:
    """``frozen``: parameters the step itself switched to requires_grad=False while an optimizer with a learning
    rate above zero holds them, measured never to get a gradient nor move (see the module docstring). One
    finding per module whose parameters are exactly the frozen ones, else per parameter."""
    frozen = self_frozen(obs)
    if not frozen:
        return []
    names = [n for n, _ in obs.model.named_parameters()]
    steps = len(obs.records)
    out: list[Finding] = []
    covered: set[str] = set()
    for path, module in obs.model.named_modules():
        under = [f"{path}.{n}" if path else n for n, _ in module.named_parameters()]
        if not path or not under or not set(under) <= set(frozen) or covered & set(under):
            continue
        covered |= set(under)
        out.append(_finding(path, under, frozen, steps, obs))
    for n in names:
        if n in frozen and n not in covered:
            out.append(_finding(n, [n], frozen, steps, obs))
    return out


def _finding(target: str, under: list[str], frozen: dict[str, tuple[str, str, int]], steps: int,
             obs: Observed) -> Finding:
    _, holder, step = frozen[under[0]]
    lines = sorted({frozen[n][0] for n in under if frozen[n][0]})
    at = f" at {', '.join(lines)}" if lines else ""
    what = f"its {len(under)} parameters" if len(under) > 1 else "it"
    first = next((r for r in obs.records if r.index == step), None)
    module = target if len(under) > 1 else target.rpartition(".")[0]
    return Finding("frozen", target, f"the step itself sets requires_grad=False{at} while {holder} trains {what}",
                   f"during step {step} requires_grad was switched to False{at}; {holder} holds {what} with a "
                   f"learning rate above 0, yet no backward of the {steps} observed steps gave {what} a gradient "
                   "and the values never changed",
                   "remove the requires_grad_(False) from the step (or leave the parameters out of the optimizer "
                   "if freezing them is meant)", step, call_node(first, module) if first is not None else "")

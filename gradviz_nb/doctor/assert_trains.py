"""``gv.assert_trains``: the doctor as a test assertion for users' CI (pytest, unittest, a plain ``assert``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gradviz_nb.doctor.findings import Diagnosis
from gradviz_nb.doctor.run import doctor

__all__ = ["assert_trains", "training_problems"]


def training_problems(dx: Diagnosis, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> list[str]:
    """One line per problem: every finding of ``dx``, then each trainable parameter the optimizer holds that no
    finding names and whose value never changed during the observed steps (an update below its dtype's
    resolution, an optimizer that does not move it)."""
    lines = [f"[{f.kind}] {f.target}: {f.message} (seen: {f.evidence}; fix: {f.fix})" for f in dx.findings]
    named = {f.target for f in dx.findings}
    held = {id(p) for g in optimizer.param_groups for p in g["params"]} if optimizer is not None else None
    for n, p in model.named_parameters():
        if not p.requires_grad or n in named or n in dx.moved or (held is not None and id(p) not in held):
            continue
        if not dx.moved and held is None:
            continue  # no optimizer given and nothing moved: the step has no optimizer step to judge
        lines.append(f"[not-moved] {n}: trainable, but its value never changed in {dx.steps} steps (check the "
                     "learning rate against the parameter's dtype, and that the optimizer steps it)")
    return lines


def assert_trains(step: Callable[[], Any], model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
                  steps: int = 2) -> Diagnosis:
    """Run ``step()`` ``steps`` times under :func:`gv.doctor` and raise ``AssertionError`` listing what is wrong:
    a trainable parameter without a gradient or that never moves, a NaN/Inf, wrong step arithmetic (stale
    gradients, backward twice, undivided accumulation, ...). Silent on a healthy step; the model, optimizer and
    RNG are put back afterwards. Returns the :class:`~gradviz_nb.doctor.Diagnosis`.

    Example (pytest)::

        def test_model_trains():
            model, opt = build()
            x, y = torch.randn(8, 4), torch.randn(8, 1)

            def step():
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()

            gv.assert_trains(step, model, opt)
    """
    dx = doctor(step, model, optimizer, steps=steps)
    problems = training_problems(dx, model, optimizer)
    if problems:
        head = f"the step does not train ({len(problems)} problem{'s' if len(problems) != 1 else ''}):"
        raise AssertionError("\n  ".join([head, *problems]))
    return dx

"""Gradients nobody clears (``stale-grad``) and parameters nobody steps (``not-in-optimizer``).

Stale: tensor hooks on the parameters compare, at the first backward after a step ended, each ``.grad``
with the identity and version it had when that step ended. Same object, same version means nobody zeroed
or replaced it, so backward is adding onto the previous step's gradient.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from gradviz_nb.probes.monitor.params import Emit, ParamIndex
from gradviz_nb.probes.monitor.verdicts import MonitorThresholds, steps_text
from gradviz_nb.tracing import typed_torch


def _held(opts: list[torch.optim.Optimizer]) -> set[int]:
    return {id(p) for o in opts for g in o.param_groups for p in g["params"]}


class StaleCheck:
    """Armed when a step ends (``arm``); the hooks collect parameters whose ``.grad`` was not cleared."""

    def __init__(self, index: ParamIndex, on: bool, emit: Emit) -> None:
        self.index, self._event = index, emit
        n = len(index.params)
        self.handles: list[Any] = [
            typed_torch.register_hook(p, self._hook(i))
            for i, p in enumerate(index.params) if p.requires_grad
        ] if on else []
        self.on = bool(self.handles)
        self.armed: list[tuple[weakref.ref[torch.Tensor], int] | None] = [None] * n
        self.armed_at = 0
        self.versions: list[int] = [0] * n
        self.had_grad: list[bool] = [False] * n
        self.stale: list[int] = []
        self.ever: set[int] = set()  # parameters found stale at least once

    def arm(self, step: int) -> None:
        """Remember each gradient's identity and version; the next backward checks it was zeroed."""
        if not self.on:
            return
        self.armed_at = step
        params = self.index.params
        self.armed = [(weakref.ref(g), g._version) if (g := p.grad) is not None else None for p in params]
        self.versions = [p._version for p in params]
        self.had_grad = [p.grad is not None for p in params]

    def _hook(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(_: torch.Tensor) -> None:
            # Runs before the new gradient is added to .grad. If .grad is still the very tensor seen when the
            # last step ended, unchanged (zero_() or set_to_none would have bumped or replaced it), this
            # backward is about to add onto the previous step's gradient.
            armed = self.armed[i]
            if armed is None:
                return
            self.armed[i] = None
            grad = self.index.params[i].grad
            if grad is not None and armed[0]() is grad and grad._version == armed[1]:
                self.stale.append(i)

        return hook

    def report(self, opts: list[torch.optim.Optimizer], not_in_optimizer: set[int]) -> None:
        """A ``stale-grad`` verdict for the parameters the hooks found, unless a missing optimizer explains it."""
        stale, self.stale = self.stale, []
        self.ever |= set(stale)
        params = self.index.params
        if opts:  # parameters in no param group: optimizer.zero_grad() never clears them (not-in-optimizer)
            held = _held(opts)
            blamed = [i for i in stale if id(params[i]) in held]
        else:  # stood still (same version) while others moved: no optimizer holds it, zero_grad() skips it too
            moved = [params[j]._version != v and had for j, (v, had) in enumerate(zip(self.versions, self.had_grad,
                                                                                          strict=True))]
            blamed = [i for i in stale if (moved[i] or not any(moved)) and i not in not_in_optimizer]
        if not blamed:
            return
        names = [self.index.names[i] for i in blamed]
        layers = sorted({n.rpartition(".")[0] for n in names}, key=self.index.layers.index)
        hooked = len(self.handles)
        self._event("stale-grad", "" if len(names) == hooked else layers[0],
                    f"backward added onto .grad left from step {self.armed_at}: for {len(names)} of {hooked} "
                    f"trainable parameters the .grad tensor was the same object, with the same version, as when step "
                    f"{self.armed_at} ended (neither zeroed nor replaced), so it now holds the sum of both steps' "
                    "gradients; call optimizer.zero_grad() once per step. Layers: "
                    + ", ".join(x or "(top)" for x in layers[:8]) + (" ..." if len(layers) > 8 else ""), tuple(names))

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.on = False
        self.armed = [None] * len(self.armed)


class NotInOptimizer:
    """``not-in-optimizer``: exact with the optimizer (param group membership), else inferred from parameters
    whose version and weight norm stay put between recorded steps while others move."""

    def __init__(self, index: ParamIndex, th: MonitorThresholds, emit: Emit) -> None:
        self.index, self.th, self._event = index, th, emit
        self.reported: set[int] = set()
        self.prev: dict[int, tuple[int, float]] = {}  # param -> (version, weight norm) at the last record
        self.still: list[list[int]] = [[] for _ in index.params]  # records it had a grad and stood still
        self.prev_step = 0

    def check(self, step: int, present: list[int], wnorms: list[float], opts: list[torch.optim.Optimizer],
              stale_ever: set[int]) -> None:
        if opts:
            self._exact(step, present, opts, stale_ever)
        else:
            self._inferred(step, present, wnorms, stale_ever)

    def _exact(self, step: int, present: list[int], opts: list[torch.optim.Optimizer], stale_ever: set[int]) -> None:
        held = _held(opts)
        new = [i for i in present if id(self.index.params[i]) not in held and i not in self.reported]
        names = ", ".join(type(o).__name__ for o in opts)
        for target, idx in self.index.by_layer(new):
            acc = any(i in stale_ever for i in idx)
            self._event("not-in-optimizer", target, f"has a gradient on step {step}, in no param group of {names}: the "
                      "optimizer never updates it"
                      + (", and optimizer.zero_grad() never clears its .grad, so backward keeps adding onto it"
                         if acc else ""), tuple(self.index.names[i] for i in idx))
            self.reported |= set(idx)

    def _inferred(self, step: int, present: list[int], wnorms: list[float], stale_ever: set[int]) -> None:
        # had a gradient at the last record, yet neither its version nor its norm changed since, while other
        # parameters' did (an optimizer step ran, and skipped it)
        params = self.index.params
        now = {i: (params[i]._version, w) for i, w in zip(present, wnorms, strict=True)}
        moved: dict[int, bool] = {}
        for i, (version, wnorm) in self.prev.items():
            if i in now:  # had a gradient at both records: judged by version and weight norm
                moved[i] = now[i] != (version, wnorm)
            elif params[i]._version != version:
                moved[i] = True
        n_moved = sum(moved.values())
        found: list[int] = []
        for i, m in moved.items():
            if m:
                self.still[i] = []
            elif n_moved:
                run = self.still[i]
                if not run:
                    run.append(self.prev_step)
                run.append(step)
                if len(run) > self.th.not_in_optimizer_records and i not in self.reported:
                    found.append(i)
        for target, idx in self.index.by_layer(found):
            accumulates = any(i in stale_ever for i in idx)
            self._event("not-in-optimizer", target, f"has a gradient on steps {steps_text(self.still[idx[0]])} but its "
                      f"value never changed between them (same version, same norm) while {n_moved} other parameters' "
                      "did: no optimizer updates it (pass optimizer= to GradientMonitor to confirm)"
                      + (", and its .grad is never zeroed either, so backward keeps adding onto it"
                         if accumulates else ""), tuple(self.index.names[i] for i in idx))
            self.reported |= set(idx)
        self.prev = now
        self.prev_step = step

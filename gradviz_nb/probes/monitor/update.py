"""Clipping counts (``step(grad_norm=, max_norm=)``) and the optimizer's real update per record.

Given the optimizer, step pre/post hooks measure ``||w_after - w_before|| / ||w_before||`` per layer on
recorded steps (one copy of the weights, freed by the post hook); :class:`UpdateRule` judges it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.monitor.buffer import UPDATE, Records
from gradviz_nb.probes.monitor.gather import reduce_update
from gradviz_nb.probes.monitor.params import Emit, ParamIndex
from gradviz_nb.probes.monitor.verdicts import MonitorThresholds, UpdateRule, steps_text
from gradviz_nb.validate import finite_number

CLIP_RTOL = 1e-3
"""clip_grad_norm_ leaves the total norm at max_norm * (1 - 1e-6 / total): a measured total this close to
max_norm means the gradients the monitor read were already clipped."""


class ClipCounter:
    """Steps on which clipping bit, counted on the device (no sync per step), and this step's pre-clip norm."""

    def __init__(self) -> None:
        self.steps = 0
        self.hits = 0
        self.acc: torch.Tensor | None = None
        self.max_norm: float | None = None
        self.last: float | torch.Tensor | None = None  # this step's pre-clip total norm (None: not reported)

    def count(self, grad_norm: float | torch.Tensor | None, max_norm: float | None) -> None:
        if grad_norm is None or max_norm is None:
            raise GradvizError("pass both grad_norm (what clip_grad_norm_ returned) and the max_norm given to it.")
        if not isinstance(grad_norm, torch.Tensor):
            finite_number("grad_norm", grad_norm, lo=0, hint="Pass what clip_grad_norm_ returned.")
        elif grad_norm.numel() != 1 or grad_norm.is_complex():
            raise GradvizError(f"grad_norm must be one number (what clip_grad_norm_ returned); got a tensor of "
                               f"shape {list(grad_norm.shape)}.")
        finite_number("max_norm", max_norm, lo=0, lo_open=True, hint="Pass the max_norm given to clip_grad_norm_.")
        self.max_norm = float(max_norm)
        self.steps += 1
        self.last = grad_norm.detach() if isinstance(grad_norm, torch.Tensor) else grad_norm
        if isinstance(grad_norm, torch.Tensor):
            hit = (grad_norm.detach() > max_norm).to(torch.int64)
            self.acc = hit if self.acc is None else self.acc + hit
        else:
            self.hits += bool(grad_norm > max_norm)

    @property
    def clipped(self) -> tuple[int, int]:
        """(steps on which clipping bit, steps that reported a pre-clip norm)."""
        acc = 0 if self.acc is None else int(self.acc.item())
        return self.hits + acc, self.steps

    def applied(self, layer_norms: torch.Tensor, world: int) -> str | None:
        """Under sharding, the clip as applied: the reason of a ``clip-norm`` flag, or None.

        A clip that bit (reported norm above ``max_norm``) and divided by the global norm leaves the full
        gradients' norm at ``max_norm``; ``layer_norms`` are full-tensor norms (reduced over every mesh
        dimension), so a total away from ``max_norm`` means the clip's norm was not the global one: per shard
        (the total comes out about √shards above ``max_norm``) or summed over replicas (√replicas below)."""
        if self.last is None or self.max_norm is None:
            return None
        used = float(self.last)
        finite = layer_norms[torch.isfinite(layer_norms)]
        if used <= self.max_norm or not finite.numel() or finite.numel() != layer_norms.numel():
            return None
        measured = float(finite.double().square().sum().sqrt())
        ratio = self.max_norm / measured if measured > 0 else math.inf
        if abs(ratio - 1) <= CLIP_RTOL:
            return None
        return (f"the clip reported total norm {used:.4g} > max_norm {self.max_norm:g}, but the full gradients' norm "
                f"after it is {measured:.4g}, {measured / self.max_norm:.4g}x max_norm (a global clip leaves exactly "
                f"max_norm): the norm it divided by was {_ratio_text(ratio, world)} the true global norm ("
                + ("a norm of this rank's shards only" if ratio < 1 else "replicas counted as more shards") + ")")

    def preclip(self, layer_norms: torch.Tensor) -> tuple[float, float]:
        """(this step's reported pre-clip total norm or NaN, the factor clipping divided the gradients the
        monitor reads by: 1 unless their measured total sits at ``max_norm`` while the reported one is above)."""
        last, self.last = self.last, None
        if last is None or self.max_norm is None:
            return math.nan, 1.0
        total = float(last)
        finite = layer_norms[torch.isfinite(layer_norms)]
        measured = float(finite.square().sum().sqrt()) if finite.numel() else math.nan
        if total > self.max_norm and measured > 0 and abs(measured - self.max_norm) <= CLIP_RTOL * self.max_norm:
            return total, total / measured
        return total, 1.0


def _ratio_text(ratio: float, world: int) -> str:
    """``"1/√2 (0.7071x)"``: the ratio, named as the square root of a rank count when it is one (within 2%)."""
    for k in range(2, world + 1):
        for value, text in ((math.sqrt(k), f"√{k}"), (1 / math.sqrt(k), f"1/√{k}")):
            if abs(ratio - value) <= 0.02 * value:
                return f"{text} ({ratio:.4g}x)"
    return f"{ratio:.4g}x"


class UpdateTracker:
    """Optimizer step hooks measuring the update/weight ratio of recorded steps, and its verdicts."""

    def __init__(self, index: ParamIndex, records: Records, th: MonitorThresholds, emit: Emit) -> None:
        self.index, self.records, self._event = index, records, emit
        self.rule = UpdateRule(index.owner.tolist(), len(index.layers), th)
        self.pending: tuple[int, int] | None = None  # (slot, step) of the record whose update is measured
        self.snap: dict[int, tuple[list[int], list[torch.Tensor], list[float]]] = {}
        self.sq = torch.zeros(len(index.layers))
        self.w = torch.zeros(len(index.layers))
        self.still: dict[int, str] = {}  # param -> "lr=... in param group k of Opt" (moved 0 this record)
        self.decayed: set[int] = set()  # params whose group lr is < 1e-3 of its peak this record
        self.peak_lr: dict[tuple[int, int], float] = {}
        self.nonzero: set[int] = set()  # parameters with a nonzero gradient at the record
        self.handles: list[Any] = []

    def attach(self, opts: list[torch.optim.Optimizer], measure: bool, after_step: Callable[[], None]) -> None:
        """Hook each optimizer's step: before (copy the weights) when ``measure``, after (measure, then
        ``after_step``: the end of an optimizer step arms the stale check)."""
        def post(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            self.post_step(opt)
            after_step()

        for o in opts:
            if measure:
                self.handles.append(o.register_step_pre_hook(self.pre_step))
            self.handles.append(o.register_step_post_hook(post))

    def pre_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.pending is None:
            return
        idx: list[int] = []
        lrs: list[float] = []
        for k, group in enumerate(opt.param_groups):
            lr = float(group.get("lr", math.nan))
            key = (id(opt), k)
            peak = self.peak_lr[key] = max(self.peak_lr.get(key, 0.0), lr)
            for p in group["params"]:
                i = self.index.index.get(id(p))
                if i is not None and p.grad is not None:
                    idx.append(i)
                    lrs.append(lr)
                    if lr < 1e-3 * peak:
                        self.decayed.add(i)
                    self.still[i] = f"lr={lr:g} in param group {k} of {type(opt).__name__}"
        if idx:
            weights = [self.index.weight(i) for i in idx]
            self.snap[id(opt)] = (idx, list(torch._foreach_mul(weights, 1.0)), lrs)

    def post_step(self, opt: torch.optim.Optimizer) -> None:
        snap = self.snap.pop(id(opt), None)
        if snap is None or self.pending is None:
            return
        idx, before, _ = snap
        wn = torch.stack(torch._foreach_norm(before, 2)).float().cpu()
        torch._foreach_sub_(before, [self.index.weight(i) for i in idx])  # in place: no second copy
        delta = torch.stack(torch._foreach_norm(before, 2)).float().cpu()
        if self.index.sharded:  # norms of this rank's shards -> of the full tensors (one all-reduce)
            wn, delta = reduce_update(self.index, idx, wn, delta)
        owner = self.index.owner[idx]
        self.sq.index_add_(0, owner, delta**2)
        self.w.index_add_(0, owner, wn**2)
        measured = torch.zeros(len(self.index.layers)).index_add_(0, owner, torch.ones(len(idx))) > 0
        ratio = self.sq.sqrt() / self.w.sqrt()
        self.records.hist[self.pending[0], measured, UPDATE] = ratio[measured]
        for i, d in zip(idx, delta.tolist(), strict=True):
            if d != 0:
                self.still.pop(i, None)

    def finish(self) -> None:
        """Judge the last record's update ratios (all optimizers have stepped by now)."""
        if self.pending is None:
            return
        (slot, step), self.pending = self.pending, None
        ratios = self.records.hist[slot, :, UPDATE].tolist()
        still = {i: why for i, why in self.still.items() if i in self.nonzero}
        decayed = self.decayed
        self.sq.zero_()
        self.w.zero_()
        self.still, self.decayed, self.snap = {}, set(), {}
        zero, layers = self.rule.feed(step, ratios, still, decayed)
        for target, idx in self.index.by_layer(zero):
            self._event("update-size", target, f"has a nonzero gradient on steps {steps_text(self.rule.zero[idx[0]])} "
                      f"but the optimizer step never moved it ({still[idx[0]]})",
                      tuple(self.index.names[i] for i in idx))
        for c, reason in layers:
            self._event("update-size", self.index.layers[c], reason, ())

    def close(self) -> None:
        self.finish()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.snap = {}

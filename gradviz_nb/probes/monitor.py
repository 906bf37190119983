"""``GradientMonitor``: per-layer gradient statistics across training steps, cheap and bounded, with verdicts.

Collection is explicit: call :meth:`GradientMonitor.step` after ``backward()`` (and gradient
clipping), before ``optimizer.step()``. Explicit beats hooks here: the monitor reads ``.grad`` once,
when the user says the gradients are final, with batched ``torch._foreach_norm`` calls and one
``index_add_``; nothing is read back to Python (no ``.item()``) except on recorded steps.

Every step (recorded or not) is checked for stale gradients: tensor hooks on the parameters compare,
at the first backward after a step ended, each ``.grad`` with the identity and version it had when that
step ended (``optimizer.step()`` done when the optimizer is given, else ``monitor.step()``). Same object,
same version means nobody zeroed or replaced it, so backward is adding onto the previous step's gradient.

Given the optimizer (``optimizer=``), step pre/post hooks measure the real update of every recorded step,
``||w_after - w_before|| / ||w_before||`` per layer (stat ``"update"``), and parameters in no param group
are named. Without it, a parameter whose value never changes between recorded steps while the others do
(same ``_version``, same norm) is inferred to be missing from the optimizer.

Memory is bounded: ``capacity`` records in preallocated tensors. When they are full, every other
record is dropped and the recording stride doubles, so the history always spans the whole run at a
resolution that halves as it grows. Verdicts are found online and kept as events, so compaction loses none.
"""

from __future__ import annotations

import math
import sys
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeAlias

import torch
from torch import nn

from gradviz_nb import files
from gradviz_nb.errors import GradvizError
from gradviz_nb.kinds import Kind, as_kind, kinds_of
from gradviz_nb.probes.flow import Flag, GradientFlow, gradient_flow
from gradviz_nb.probes.sharded import all_reduce_rows, is_dtensor, local_part
from gradviz_nb.tracing.compiled import real_name, unwrap_compiled
from gradviz_nb.tracing.distributed import engines
from gradviz_nb.validate import (
    boolean,
    choice,
    finite_number,
    function,
    instance,
    model_or_none,
    not_meta,
    positive_int,
)

__all__ = ["MONITOR_KINDS", "STATS", "GradientMonitor", "MonitorThresholds"]

STATS = ("norm", "max_abs", "ratio", "missing", "update")
"""Per layer and record: gradient L2 norm, max |g|, grad/weight norm ratio, parameters without ``.grad``,
and the optimizer's real update ``||Δw|| / ||w||`` (NaN unless the optimizer is given)."""
_NORM, _MAX, _RATIO, _MISSING, _UPDATE = range(len(STATS))

MONITOR_KINDS = kinds_of("monitor")
REPLICA_RTOL = 1e-5
"""DDP replicas' gradient norms must agree after the all-reduce; they are bit-identical in practice (every
rank averages the same buckets), so this only absorbs a reduction order differing across ranks."""
SAVE_VERSION = 2


@dataclass(frozen=True)
class MonitorThresholds:
    """When the monitor raises a verdict (defaults chosen for zero flags on healthy MLP/SGD, MLP/Adam,
    transformer/AdamW and LoRA/AdamW loops, see ``tests/unit/test_monitor.py``).

    - ``no_grad_records``: a layer without any gradient (``None`` or exactly zero) on this many recorded
      steps in a row is ``no-grad``. One or two can be deliberate (alternating GAN losses, a branch not
      taken); three in a row rarely are.
    - ``spike_factor``, ``spike_window``, ``spike_min_records``: a layer's norm above ``spike_factor`` x the
      median of its previous ``spike_window`` recorded norms (once it has ``spike_min_records``) is a spike.
    - ``update_high``, ``update_low``, ``update_records``, ``update_warmup``: the rule of thumb is an update of
      ~1e-3 of the weights per step; ``update-size`` needs ``update_records`` recorded steps in a row above
      ``update_high`` or below ``update_low`` (or a parameter with a gradient that never moves), after the first
      ``update_warmup`` steps (zero-initialised weights, e.g. LoRA B, start with ratios near 1 that fall like
      1/t; learning-rate warm-up starts small). A learning rate a schedule has decayed below 1e-3 of its peak
      is deliberate and not judged too small.
    - ``clip_fraction``, ``clip_min_steps``: clipping is a finding when it bit on more than this fraction of at
      least ``clip_min_steps`` steps (otherwise a summary line).
    - ``not_in_optimizer_records``: without the optimizer, recorded steps in a row in which a parameter with a
      gradient did not move while others did.
    """

    no_grad_records: int = 3
    spike_factor: float = 10.0
    spike_window: int = 20
    spike_min_records: int = 5
    update_high: float = 1e-1
    update_low: float = 1e-6
    update_records: int = 5
    update_warmup: int = 20
    clip_fraction: float = 0.5
    clip_min_steps: int = 10
    not_in_optimizer_records: int = 3


Optimizers: TypeAlias = torch.optim.Optimizer | Sequence[torch.optim.Optimizer]


class GradientMonitor:
    """Record per-layer gradient norms every ``every`` steps of a training loop, and name what looks wrong.

    Example::

        monitor = gv.GradientMonitor(model, every=10, optimizer=opt)
        for x, y in data:
            loss = criterion(model(x), y)
            loss.backward()
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            monitor.step(grad_norm=total, max_norm=1.0)   # after backward, before optimizer.step()
            opt.step(); opt.zero_grad()
        monitor.chart()             # heatmap layers x steps + norm lines; updates live while training
        print(monitor.summary())    # verdicts: stale-grad, not-in-optimizer, no-grad, spike, update-size, ...
        monitor.close()             # removes its hooks

    ``optimizer`` (one or a list) enables the update/weight ratio and exact ``not-in-optimizer`` verdicts.
    ``scaler`` (``torch.amp.GradScaler``): recorded norms are divided by its scale unless the optimizer's
    gradients were already unscaled (``scaler.unscale_``), so they are the true gradient norms.

    Verdicts (:meth:`flags`; thresholds in :class:`MonitorThresholds`):

    - ``stale-grad``: checked on every step, recorded or not. With ``optimizer`` the check is armed when
      ``optimizer.step()`` ends, so deliberate gradient accumulation between optimizer steps is never blamed.
      Without it, it is armed at :meth:`step`; a ``GradScaler`` unscaling in place after that hides it
      (pass ``optimizer``).
    - ``not-in-optimizer``: with ``optimizer``, a parameter with a gradient in no param group; without it, one
      whose version and norm stay put between recorded steps while others move. Its never-cleared ``.grad``
      is not blamed on a missing ``zero_grad``. A param group with ``lr=0`` is told apart: ``update-size``.
    - ``no-grad``, ``spike``, ``update-size`` (``optimizer`` needed; costs one copy of the weights, on recorded
      steps only; ``update_ratio=False`` turns it off), ``clipping`` (``step(grad_norm=, max_norm=)``), ``nan``
      (steps a ``GradScaler`` skipped for inf/NaN are dynamic loss scaling at work: listed, not flagged).

    Under ``torch.distributed`` every rank records; on recorded steps rank 0 gathers every rank's
    statistics (``per_rank``) and their reduction; other ranks never render. Under FSDP2 (``fully_shard``:
    ``DTensor`` parameters and gradients) each record's norms are those of the full tensors, from this
    rank's shards and one all-reduce (no gather): every rank records the same numbers, and ``per_rank``
    holds each rank's own shard statistics. Create the monitor before the first forward or after a
    backward, when the module holds its sharded parameters.

    Given a ``DistributedDataParallel`` model (the wrapper, or a model holding one), rank 0 also checks what
    DDP guarantees, on recorded steps:

    - ``replica-mismatch``: a rank whose layer gradient norm differs from rank 0's (relative
      :data:`REPLICA_RTOL`). After DDP's all-reduce every replica holds the same gradient; a difference means
      backward ran under ``no_sync()`` before this optimizer step, or gradients were changed on one rank
      after backward, and the replicas' weights will drift apart.
    - ``unused-on-rank``: parameters that backward reached on some ranks but not on others since the last
      :meth:`step` (a branch one rank skipped), the cause of DDP's "Expected to have finished reduction in
      the prior iteration" error (with ``find_unused_parameters=True`` DDP copes, at a cost). Seen by tensor
      hooks on the parameters; parameters no rank reached are ``no-grad`` instead.
    """

    def __init__(self, model: nn.Module | None, every: int = 1, capacity: int = 256, *,
                 optimizer: Optimizers | None = None, scaler: torch.amp.GradScaler | None = None,
                 thresholds: MonitorThresholds | None = None, stale_check: bool = True, update_ratio: bool = True,
                 live_interval: float = 0.5, max_events: int = 1000) -> None:
        every = positive_int("every", every, hint="It is the number of steps between records.")
        capacity = positive_int("capacity", capacity, lo=2, hi=MAX_CAPACITY, hint="It is the records kept in memory.")
        _check_monitor_args(model, optimizer, scaler, thresholds, stale_check, update_ratio, live_interval, max_events)
        not_meta("gv.GradientMonitor", model)
        self.every = every
        self.capacity = capacity
        self.live_interval = live_interval
        self.thresholds = thresholds or MonitorThresholds()
        self.stride = 1  # doubles each time the buffer is compacted
        self.steps_seen = 0
        self.events: deque[tuple[int, Flag]] = deque(maxlen=max_events)
        """(step, Flag) verdicts, found as they happen."""
        model = unwrap_compiled(model)  # torch.compile(model): same parameters, named without "_orig_mod."
        self._model_ref = weakref.ref(model) if model is not None else None
        self._params: list[nn.Parameter] = []
        self._names: list[str] = []
        self.layers: list[str] = []
        if model is not None:
            self._index_params(model)
        n, n_params = len(self.layers), len(self._params)
        self._sharded = any(is_dtensor(p) for p in self._params)  # FSDP2: DTensor shards, reduced per record
        self._hist = torch.full((capacity, n, len(STATS)), math.nan)
        self._steps = torch.zeros(capacity, dtype=torch.long)
        self._count = 0
        self._world = _world()
        self._rank_hist: torch.Tensor | None = None  # rank 0 under DDP: (capacity, world, layers, stats)
        if self._world[1] > 1 and self._world[0] == 0:
            self._rank_hist = torch.full((capacity, self._world[1], n, len(STATS)), math.nan)
        self._local_stats: torch.Tensor | None = None  # FSDP2: this rank's shard statistics of the record
        # DDP: replicas must agree (checked on rank 0), and backward must reach the same parameters everywhere
        self._ddp = self._world[1] > 1 and model is not None and "ddp" in engines(model)
        self._synced = [i for i, name in enumerate(self._names) if name not in _ddp_ignored(model)] \
            if self._ddp else []
        self._reached = [False] * n_params
        self._mismatch = [False] * n
        self._unused_reported: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        self._listeners: list[Callable[[GradientMonitor], None]] = []
        self._last_push = 0.0
        # optimizer(s) and scaler
        if optimizer is None:
            opts: list[torch.optim.Optimizer] = []
        elif isinstance(optimizer, torch.optim.Optimizer):
            opts = [optimizer]
        else:
            opts = list(optimizer)
        self._opt_refs = [weakref.ref(o) for o in opts]
        self._scaler = scaler
        self._index = {id(p): i for i, p in enumerate(self._params)}
        # stale check: (grad weakref, grad version) per parameter, armed when a step ends
        self._handles: list[Any] = []
        self._armed: list[tuple[weakref.ref[torch.Tensor], int] | None] = [None] * n_params
        self._armed_at = 0
        self._arm_versions: list[int] = [0] * n_params
        self._arm_had_grad: list[bool] = [False] * n_params
        self._stale: list[int] = []
        self._stale_ever: set[int] = set()
        if model is not None and stale_check:
            self._handles = [
                p.register_hook(self._stale_hook(i))  # type: ignore[no-untyped-call]
                for i, p in enumerate(self._params) if p.requires_grad
            ]
        self._stale_check = bool(self._handles)
        if self._ddp:  # which parameters backward reaches on this rank (DDP's reducer writes .grad for the rest)
            self._handles += [self._params[i].register_hook(self._reach_hook(i))  # type: ignore[no-untyped-call]
                              for i in self._synced if self._params[i].requires_grad]
        # not-in-optimizer
        self._nio_reported: set[int] = set()
        self._rec_prev: dict[int, tuple[int, float]] = {}  # param -> (version, weight norm) at the last record
        self._still: list[list[int]] = [[] for _ in range(n_params)]  # recorded steps it had a grad and stood still
        self._rec_step_prev = 0
        # no-grad and spikes, per layer
        self._nograd_run: list[list[int]] = [[] for _ in range(n)]
        self._model_nograd: list[int] = []
        self._recent = torch.full((self.thresholds.spike_window, n), math.nan)
        self._recent_i = 0
        self._spiking = [False] * n
        # update/weight ratio from the optimizer's real step
        self._pending: tuple[int, int] | None = None  # (slot, step) of the record whose update is measured
        self._snap: dict[int, tuple[list[int], list[torch.Tensor], list[float]]] = {}
        self._upd_sq = torch.zeros(n)
        self._upd_w = torch.zeros(n)
        self._still_params: dict[int, str] = {}  # param -> "lr=... in param group k of Opt" (moved 0 this record)
        self._decayed: set[int] = set()  # params whose group lr is < 1e-3 of its peak this record
        self._peak_lr: dict[tuple[int, int], float] = {}
        self._upd_hi: list[list[int]] = [[] for _ in range(n)]
        self._upd_lo: list[list[int]] = [[] for _ in range(n)]
        self._upd_zero: list[list[int]] = [[] for _ in range(n_params)]
        self._upd_reported: set[tuple[str, int]] = set()
        self._grad_nonzero: set[int] = set()
        self._opt_handles: list[Any] = []
        if model is not None:
            for o in opts:
                if update_ratio:
                    self._opt_handles.append(o.register_step_pre_hook(self._pre_step))
                self._opt_handles.append(o.register_step_post_hook(self._post_step))
        # clipping
        self._clip_steps = 0
        self._clip_hits = 0
        self._clip_acc: torch.Tensor | None = None  # device-side count (no sync per step)
        self.max_norm: float | None = None
        self.scale_used: float | None = None
        """The GradScaler scale the last recorded norms were divided by (None: not scaled)."""
        self.amp_skipped: list[int] = []
        """Recorded steps with inf/NaN gradients that the GradScaler then skipped (its scale backed off)."""
        self._amp_check: tuple[int, float] | None = None

    def _index_params(self, model: nn.Module) -> None:
        owner: list[int] = []
        for name, p in model.named_parameters():  # each tensor once; a tied weight under its first name
            if not p.requires_grad:
                continue  # frozen at attach time: nothing to learn, nothing to chart
            name = real_name(name)  # a compiled submodule's "_orig_mod" is no part of the name
            layer = name.rpartition(".")[0]
            if layer not in self.layers:
                self.layers.append(layer)
            owner.append(self.layers.index(layer))
            self._params.append(p)
            self._names.append(name)
        self._owner = torch.tensor(owner, dtype=torch.long)
        self._per_layer = torch.zeros(len(self.layers)).index_add_(0, self._owner, torch.ones(len(owner)))

    # -- recording ---------------------------------------------------------------------------------
    def step(self, *, grad_norm: float | torch.Tensor | None = None, max_norm: float | None = None) -> None:
        """Count one training step; every ``every`` x ``stride`` steps record the gradients' statistics.

        ``grad_norm`` and ``max_norm``: the pre-clip total norm returned by ``clip_grad_norm_`` and the
        ``max_norm`` given to it; the monitor counts the steps on which clipping bit.
        """
        if self._model_ref is None:
            raise GradvizError("this monitor was loaded from a file: it has a history but no model to record.")
        if getattr(self, "_closed", False):
            raise GradvizError("this monitor is closed: it keeps its history but no longer holds the model. "
                               "Start a new gv.GradientMonitor(model) to record more steps.")
        self.steps_seen += 1
        self._finish_update()
        self._finish_scaler()
        if grad_norm is not None or max_norm is not None:
            self._count_clip(grad_norm, max_norm)
        if self._stale:
            self._report_stale()
        if not (self.steps_seen - 1) % (self.every * self.stride):
            self._record()
        self._reached = [False] * len(self._params)
        if not self._opt_refs:
            self._arm()  # with an optimizer, the end of its step arms the check

    def _record(self) -> None:
        stats, present, wnorms = self._layer_stats()
        if self._count == self.capacity:
            self._compact()
        slot = self._count
        self._hist[slot] = stats
        self._steps[slot] = self.steps_seen
        if self._world[1] > 1:
            self._gather(slot, stats if self._local_stats is None else self._local_stats)
        self._count += 1
        self._check_record(stats, present, wnorms)
        scaler = self._scaler
        bad = ~torch.isfinite(stats[:, _NORM]) & (stats[:, _MISSING] == 0)  # what flags() would call a NaN
        if scaler is not None and scaler.is_enabled() and bool(bad.any()):
            self._amp_check = (self.steps_seen, scaler.get_scale())
        self._pending = (slot, self.steps_seen) if self._opt_refs else None
        if self._listeners and time.monotonic() - self._last_push >= self.live_interval:
            self.push()

    def _layer_stats(self) -> tuple[torch.Tensor, list[int], list[float]]:
        """(layers x STATS) of the current gradients, the parameters with a gradient, their weight norms."""
        n_layers = len(self.layers)
        out = torch.full((n_layers, len(STATS)), math.nan)
        present = [i for i, p in enumerate(self._params) if p.grad is not None]
        wlist: list[float] = []
        self._grad_nonzero = set()
        self.scale_used = None
        local: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        if present:
            idx = self._owner if len(present) == len(self._params) else self._owner[present]
            if self._sharded:
                norms, maxes, wnorms, local = self._sharded_norms(present)
            else:
                grads = [_values(g) for i in present if (g := self._params[i].grad) is not None]
                weights = [self._params[i].detach() for i in present]
                norms = torch.stack(torch._foreach_norm(grads, 2)).float().cpu()
                # aminmax per tensor is ~5x faster on CPU than _foreach_norm(ord=inf), which is not fused there
                extremes = [torch.aminmax(g) if g.numel() else (g.new_zeros(()), g.new_zeros(())) for g in grads]
                maxes = torch.maximum(torch.stack([e[1] for e in extremes]), -torch.stack([e[0] for e in extremes]))
                maxes = maxes.float().cpu()
                wnorms = torch.stack(torch._foreach_norm(weights, 2)).float().cpu()
            divisors = self._scale_divisors(present)
            if divisors is not None:
                norms, maxes = norms / divisors, maxes / divisors
                if local is not None:
                    local = (local[0] / divisors, local[1] / divisors, local[2])
            out = self._assemble(norms, maxes, wnorms, idx, len(present))
            wlist = wnorms.tolist()
            self._grad_nonzero = {i for i, v in zip(present, norms.tolist(), strict=True) if v != 0}
            if local is not None:  # what rank 0 gathers under FSDP2: this rank's own shards
                self._local_stats = self._assemble(*local, idx, len(present))
        else:
            out[:, _MISSING] = self._per_layer
            if self._sharded:
                self._local_stats = out.clone()
        return out, present, wlist

    def _assemble(self, norms: torch.Tensor, maxes: torch.Tensor, wnorms: torch.Tensor, idx: torch.Tensor,
                  n_present: int) -> torch.Tensor:
        """(layers x STATS) from the norms, max |g| and weight norms of the parameters with a gradient, whose
        layers are ``idx``."""
        n_layers = len(self.layers)
        out = torch.full((n_layers, len(STATS)), math.nan)
        with_grad = torch.zeros(n_layers).index_add_(0, idx, torch.ones(n_present))
        out[:, _NORM] = torch.zeros(n_layers).index_add_(0, idx, norms**2).sqrt()
        out[:, _MAX] = torch.full((n_layers,), -math.inf).scatter_reduce_(0, idx, maxes, "amax")
        out[:, _RATIO] = out[:, _NORM] / torch.zeros(n_layers).index_add_(0, idx, wnorms**2).sqrt()
        out[with_grad == 0, :_MISSING] = math.nan  # a layer without any gradient has no statistics
        out[:, _MISSING] = self._per_layer - with_grad
        return out

    def _sharded_norms(self, present: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                          tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Gradient norms, max |g| and weight norms of the ``present`` parameters when some are ``DTensor``
        shards (FSDP2): squared sums of this rank's shards, then one ``SUM`` and one ``MAX`` all-reduce over
        a buffer with a row per parameter (same size on every rank), so each is the full tensor's norm.
        The fourth value: the same three of this rank's own shards (before the all-reduce)."""
        n = len(self._params)
        sums = torch.zeros(2 * n, dtype=torch.float64)  # gradient squared sums, then weight squared sums
        maxes = torch.zeros(2 * n, dtype=torch.float64)
        meshes: list[Any] = [None] * (2 * n)
        own = torch.zeros(2 * n, dtype=torch.float64)  # the same sums, unweighted: this rank's pieces alone
        for i, p in enumerate(self._params):
            w, meshes[n + i], weight = local_part(p)
            own[n + i] = _values(w.detach()).double().square().sum()
            sums[n + i] = own[n + i] * weight
            g = p.grad
            if g is None:
                meshes[i] = meshes[n + i]
                continue
            local, meshes[i], weight = local_part(g)
            v = _values(local).double()
            own[i] = v.square().sum()
            sums[i] = own[i] * weight
            maxes[i] = v.abs().max() if v.numel() else 0.0
        rows = torch.tensor(present, dtype=torch.long)
        mine = (own[rows].sqrt().float(), maxes[rows].float(), own[n + rows].sqrt().float())
        all_reduce_rows(meshes, sums, maxes)
        return sums[rows].sqrt().float(), maxes[rows].float(), sums[n + rows].sqrt().float(), mine

    def _scale_divisors(self, present: list[int]) -> torch.Tensor | None:
        """Per present parameter, the GradScaler scale its ``.grad`` still carries (None: no scaler at work)."""
        scaler = self._scaler
        if scaler is None or not scaler.is_enabled() or scaler._scale is None:
            return None
        from torch.amp.grad_scaler import OptState

        scale = scaler.get_scale()
        states = scaler._per_optimizer_states
        done = (OptState.UNSCALED, OptState.STEPPED)
        opts = self._optimizers()
        if not opts:  # which optimizer holds what is unknown: unscaled if any optimizer's gradients are
            unscaled = any(s["stage"] in done for s in states.values())
            self.scale_used = None if unscaled else scale
            return None if unscaled else torch.full((len(present),), scale)
        unscaled_ids: set[int] = set()
        for o in opts:
            st = states.get(id(o))  # .get: a defaultdict, never add entries
            if st is not None and st["stage"] in done:
                unscaled_ids |= {id(p) for g in o.param_groups for p in g["params"]}
        div = [1.0 if id(self._params[i]) in unscaled_ids else scale for i in present]
        self.scale_used = scale if any(d != 1.0 for d in div) else None
        return torch.tensor(div)

    def _compact(self) -> None:
        keep = self.capacity // 2
        self._hist[:keep] = self._hist[0:self.capacity:2][:keep].clone()
        self._steps[:keep] = self._steps[0:self.capacity:2][:keep].clone()
        if self._rank_hist is not None:
            self._rank_hist[:keep] = self._rank_hist[0:self.capacity:2][:keep].clone()
        self._count = keep
        self.stride *= 2

    def _gather(self, slot: int, stats: torch.Tensor) -> None:
        """One gather to rank 0 per record: this rank's (layers x STATS) and, under DDP, which synced
        parameters backward reached here. Rank 0 then checks that the replicas agree."""
        import torch.distributed as dist

        rank, world = self._world
        reached = torch.tensor([self._reached[i] for i in self._synced], dtype=stats.dtype)
        mine = torch.cat([stats.flatten(), reached])
        gathered = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None
        dist.gather(mine, gathered, dst=0)
        if gathered is None or self._rank_hist is None:
            return
        every = torch.stack(gathered)
        self._rank_hist[slot] = every[:, : stats.numel()].reshape(world, *stats.shape)
        if self._ddp:
            self._check_replicas(self._rank_hist[slot])
            self._check_reached(every[:, stats.numel():] > 0)

    def _check_replicas(self, ranks: torch.Tensor) -> None:
        """Rank 0 under DDP: every rank's layer gradient norms must equal rank 0's (all-reduced gradients)."""
        synced = {int(self._owner[i]) for i in self._synced}
        for c in range(len(self.layers)):
            norms = ranks[:, c, _NORM].tolist()
            ref = norms[0]
            off = [(r, v) for r, v in enumerate(norms) if r and not math.isclose(v, ref, rel_tol=REPLICA_RTOL)
                   and not (math.isnan(v) and math.isnan(ref))] if c in synced else []
            if off and not self._mismatch[c]:
                r, v = off[0]
                others = f" (and ranks {', '.join(str(o) for o, _ in off[1:])})" if len(off) > 1 else ""
                self._event("replica-mismatch", self.layers[c],
                            f"rank {r}'s gradient norm {v:.4g} differs from rank 0's {ref:.4g}{others}; DDP "
                            "replicas must agree after its all-reduce, so this optimizer step moves the ranks' "
                            "weights apart. Was backward run under no_sync() before this step, or were the "
                            "gradients changed on one rank after backward (scaled, clipped or zeroed per rank)?",
                            tuple(self._names[i] for i in self._synced if int(self._owner[i]) == c))
            self._mismatch[c] = bool(off)

    def _check_reached(self, reached: torch.Tensor) -> None:
        """Rank 0 under DDP: ``reached`` (world x synced parameters) says which ranks' backward reached each
        parameter since the last step; one reached by some ranks only is named with the ranks."""
        some, every = reached.any(dim=0), reached.all(dim=0)
        partial = torch.nonzero(some & ~every).flatten().tolist()
        by_ranks: dict[tuple[int, ...], list[int]] = {}
        for j in partial:
            missing = tuple(torch.nonzero(~reached[:, j]).flatten().tolist())
            by_ranks.setdefault(missing, []).append(self._synced[j])
        for missing, idx in by_ranks.items():
            key = (missing, tuple(idx))
            if key in self._unused_reported:
                continue
            self._unused_reported.add(key)
            names = [self._names[i] for i in idx]
            who = "rank " + str(missing[0]) if len(missing) == 1 else "ranks " + ", ".join(map(str, missing))
            reached_by = [r for r in range(reached.shape[0]) if r not in missing]
            by = ("rank " if len(reached_by) == 1 else "ranks ") + ", ".join(map(str, reached_by))
            shown = ", ".join(names[:8]) + (f" ... ({len(names)} in all)" if len(names) > 8 else "")
            self._event("unused-on-rank", names[0] if len(names) == 1 else _common_prefix(names),
                        f"backward on {who} never reached {shown}, which {by} did reach since the last "
                        "step (a branch skipped on some ranks, or outputs left out of the loss there). DDP "
                        "without find_unused_parameters=True fails on this with 'Expected to have finished "
                        "reduction in the prior iteration'; with it, DDP averages in zeros for these parameters. "
                        "Make every rank use the same parameters, or keep find_unused_parameters=True.",
                        tuple(names))

    def _finish_scaler(self) -> None:
        """Non-finite gradients the GradScaler answered by skipping the step (its scale dropped) are normal
        dynamic loss scaling, not a NaN to report."""
        if self._amp_check is None or self._scaler is None:
            return
        (step, scale), self._amp_check = self._amp_check, None
        if self._scaler.get_scale() < scale:
            self.amp_skipped.append(step)

    # -- verdicts on each record -------------------------------------------------------------------
    def _check_record(self, stats: torch.Tensor, present: list[int], wnorms: list[float]) -> None:
        step = self.steps_seen
        self._check_not_in_optimizer(present, wnorms)
        norms = stats[:, _NORM]
        # no-grad: every trainable parameter of the layer without a gradient (or an exactly zero one)
        trainable = torch.zeros(len(self.layers))
        req = [i for i, p in enumerate(self._params) if p.requires_grad]
        if req:
            trainable.index_add_(0, self._owner[req], torch.ones(len(req)))
        none = ((stats[:, _MISSING] >= self._per_layer) | (norms == 0)) & (trainable > 0)
        n_rec = self.thresholds.no_grad_records
        if bool(none.all()) and len(self.layers):
            self._model_nograd.append(step)
            if len(self._model_nograd) == n_rec:
                self._event("no-grad", "", "no trainable parameter has a gradient on steps "
                            f"{_steps(self._model_nograd)} ({n_rec} recorded steps in a row): is monitor.step() "
                            "called after backward() and before optimizer.zero_grad()?")
        else:
            self._model_nograd = []
            for c, is_none in enumerate(none.tolist()):
                run = self._nograd_run[c]
                if not is_none:
                    run.clear()
                    continue
                run.append(step)
                if len(run) == n_rec:
                    k = int(trainable[c].item())
                    self._event("no-grad", self.layers[c], f"no gradient on steps {_steps(run)} ({n_rec} recorded "
                                f"steps in a row): .grad is None or exactly zero for all {k} trainable parameters; "
                                "backward does not reach this layer (detached, unused, or cut upstream?)",
                                tuple(self._names[i] for i in range(len(self._params))
                                      if int(self._owner[i]) == c))
        # spikes: against the median of this layer's previous recorded norms
        th = self.thresholds
        have = (~torch.isnan(self._recent)).sum(dim=0)
        median = self._recent.nanmedian(dim=0).values
        for c, (v, med, h) in enumerate(zip(norms.tolist(), median.tolist(), have.tolist(), strict=True)):
            spike = h >= th.spike_min_records and med > 0 and math.isfinite(v) and v > th.spike_factor * med
            if spike and not self._spiking[c]:
                self._event("spike", self.layers[c], f"gradient norm {v:.4g} is {v / med:.1f}x its running median "
                            f"{med:.4g} over the previous {h} recorded steps")
            self._spiking[c] = spike
        row = norms.clone()
        row[~(torch.isfinite(row) & (row > 0))] = math.nan
        self._recent[self._recent_i % th.spike_window] = row
        self._recent_i += 1

    def _check_not_in_optimizer(self, present: list[int], wnorms: list[float]) -> None:
        step = self.steps_seen
        opts = self._optimizers()
        if opts:  # exact: membership of the param groups
            held = {id(p) for o in opts for g in o.param_groups for p in g["params"]}
            new = [i for i in present if id(self._params[i]) not in held and i not in self._nio_reported]
            names = ", ".join(type(o).__name__ for o in opts)
            for target, idx in self._by_layer(new):
                acc = [i for i in idx if i in self._stale_ever]
                self._event("not-in-optimizer", target, f"has a gradient on step {step}, in no param group of "
                            f"{names}: the optimizer never updates it"
                            + (", and optimizer.zero_grad() never clears its .grad, so backward keeps adding onto it"
                               if acc else ""), tuple(self._names[i] for i in idx))
                self._nio_reported |= set(idx)
            return
        # inferred: had a gradient at the last record, yet neither its version nor its norm changed since,
        # while other parameters' did (an optimizer step ran, and skipped it)
        now = {i: (self._params[i]._version, w) for i, w in zip(present, wnorms, strict=True)}
        moved: dict[int, bool] = {}
        for i, (version, wnorm) in self._rec_prev.items():
            if i in now:  # had a gradient at both records: judged by version and weight norm
                moved[i] = now[i] != (version, wnorm)
            elif self._params[i]._version != version:
                moved[i] = True
        n_moved = sum(moved.values())
        found: list[int] = []
        for i, m in moved.items():
            if m:
                self._still[i] = []
            elif n_moved:
                run = self._still[i]
                if not run:
                    run.append(self._rec_step_prev)
                run.append(step)
                if len(run) > self.thresholds.not_in_optimizer_records and i not in self._nio_reported:
                    found.append(i)
        for target, idx in self._by_layer(found):
            steps = self._still[idx[0]]
            accumulates = any(i in self._stale_ever for i in idx)
            self._event("not-in-optimizer", target, f"has a gradient on steps {_steps(steps)} but its value never "
                        f"changed between them (same version, same norm) while {n_moved} other parameters' did: "
                        "no optimizer updates it (pass optimizer= to GradientMonitor to confirm)"
                        + (", and its .grad is never zeroed either, so backward keeps adding onto it"
                           if accumulates else ""), tuple(self._names[i] for i in idx))
            self._nio_reported |= set(idx)
        self._rec_prev = now
        self._rec_step_prev = step

    def _by_layer(self, idx: list[int]) -> list[tuple[str, list[int]]]:
        """Group parameters by layer: target is the layer when all its parameters are concerned, else the one."""
        out: list[tuple[str, list[int]]] = []
        for c, layer in enumerate(self.layers):
            mine = [i for i in idx if int(self._owner[i]) == c]
            if not mine:
                continue
            whole = len(mine) == int(self._per_layer[c].item())
            out.append((layer if whole or len(mine) > 1 else self._names[mine[0]], mine))
        return out

    def _event(self, kind: Kind, target: str, reason: str, params: tuple[str, ...] = ()) -> None:
        self.events.append((self.steps_seen, Flag(kind, target, reason, params)))

    # -- clipping ----------------------------------------------------------------------------------
    def _count_clip(self, grad_norm: float | torch.Tensor | None, max_norm: float | None) -> None:
        if grad_norm is None or max_norm is None:
            raise GradvizError("pass both grad_norm (what clip_grad_norm_ returned) and the max_norm given to it.")
        if not isinstance(grad_norm, torch.Tensor):
            finite_number("grad_norm", grad_norm, lo=0, hint="Pass what clip_grad_norm_ returned.")
        elif grad_norm.numel() != 1 or grad_norm.is_complex():
            raise GradvizError(f"grad_norm must be one number (what clip_grad_norm_ returned); got a tensor of "
                               f"shape {list(grad_norm.shape)}.")
        finite_number("max_norm", max_norm, lo=0, lo_open=True, hint="Pass the max_norm given to clip_grad_norm_.")
        self.max_norm = float(max_norm)
        self._clip_steps += 1
        if isinstance(grad_norm, torch.Tensor):
            hit = (grad_norm.detach() > max_norm).to(torch.int64)
            self._clip_acc = hit if self._clip_acc is None else self._clip_acc + hit
        else:
            self._clip_hits += bool(grad_norm > max_norm)

    @property
    def clipped(self) -> tuple[int, int]:
        """(steps on which clipping bit, steps that reported a pre-clip norm)."""
        acc = 0 if self._clip_acc is None else int(self._clip_acc.item())
        return self._clip_hits + acc, self._clip_steps

    def _clip_flags(self) -> list[tuple[int, Flag]]:
        k, n = self.clipped
        th = self.thresholds
        if n < th.clip_min_steps or k <= th.clip_fraction * n:
            return []
        return [(self.steps_seen, Flag("clipping", "", f"gradient clipping bit on {k} of {n} steps (pre-clip norm "
                                       f"> max_norm={self.max_norm:g}): the clipped direction, not the gradient's "
                                       "size, drives training; raise max_norm or lower the learning rate"))]

    # -- update/weight ratio (optimizer step hooks) ------------------------------------------------
    def _optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for r in self._opt_refs if (o := r()) is not None]

    def _pre_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._pending is None:
            return
        idx: list[int] = []
        lrs: list[float] = []
        for k, group in enumerate(opt.param_groups):
            lr = float(group.get("lr", math.nan))
            key = (id(opt), k)
            peak = self._peak_lr[key] = max(self._peak_lr.get(key, 0.0), lr)
            for p in group["params"]:
                i = self._index.get(id(p))
                if i is not None and p.grad is not None:
                    idx.append(i)
                    lrs.append(lr)
                    if lr < 1e-3 * peak:
                        self._decayed.add(i)
                    self._still_params[i] = f"lr={lr:g} in param group {k} of {type(opt).__name__}"
        if idx:
            weights = [self._weight(i) for i in idx]
            self._snap[id(opt)] = (idx, list(torch._foreach_mul(weights, 1.0)), lrs)

    def _weight(self, i: int) -> torch.Tensor:
        """Parameter ``i``'s values on this rank: a ``DTensor``'s local shard (FSDP2), else the tensor."""
        p = self._params[i].detach()
        return local_part(p)[0] if self._sharded else p

    def _post_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        snap = self._snap.pop(id(opt), None)
        if snap is not None and self._pending is not None:
            idx, before, _ = snap
            wn = torch.stack(torch._foreach_norm(before, 2)).float().cpu()
            torch._foreach_sub_(before, [self._weight(i) for i in idx])  # in place: no second copy
            delta = torch.stack(torch._foreach_norm(before, 2)).float().cpu()
            if self._sharded:  # norms of this rank's shards -> of the full tensors (one all-reduce)
                wn, delta = self._reduce_update(idx, wn, delta)
            owner = self._owner[idx]
            self._upd_sq.index_add_(0, owner, delta**2)
            self._upd_w.index_add_(0, owner, wn**2)
            measured = torch.zeros(len(self.layers)).index_add_(0, owner, torch.ones(len(idx))) > 0
            ratio = self._upd_sq.sqrt() / self._upd_w.sqrt()
            self._hist[self._pending[0], measured, _UPDATE] = ratio[measured]
            for i, d in zip(idx, delta.tolist(), strict=True):
                if d != 0:
                    self._still_params.pop(i, None)
        if self._stale_check:
            self._arm()

    def _reduce_update(self, idx: list[int], wn: torch.Tensor,
                       delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-tensor weight and update norms from shard norms: squared, weighted, one ``SUM`` all-reduce
        over a buffer with a row per parameter (the same size on every rank)."""
        n = len(self._params)
        sums = torch.zeros(2 * n, dtype=torch.float64)
        meshes: list[Any] = [None] * (2 * n)
        for i in range(n):
            _, meshes[i], _ = local_part(self._params[i].detach())
            meshes[n + i] = meshes[i]
        rows = torch.tensor(idx, dtype=torch.long)
        weights = torch.tensor([local_part(self._params[i].detach())[2] for i in idx], dtype=torch.float64)
        sums[rows] = wn.double() ** 2 * weights
        sums[n + rows] = delta.double() ** 2 * weights
        all_reduce_rows(meshes, sums)
        return sums[rows].sqrt().float(), sums[n + rows].sqrt().float()

    def _finish_update(self) -> None:
        """Judge the last record's update ratios (all optimizers have stepped by now)."""
        if self._pending is None:
            return
        (slot, step), self._pending = self._pending, None
        ratios = self._hist[slot, :, _UPDATE].tolist()
        still = {i: why for i, why in self._still_params.items() if i in self._grad_nonzero}
        decayed = self._decayed
        self._upd_sq.zero_()
        self._upd_w.zero_()
        self._still_params, self._decayed, self._snap = {}, set(), {}
        th = self.thresholds
        if step <= th.update_warmup:
            return
        n_rec = th.update_records
        # parameters with a gradient that the optimizer step did not move at all
        for i in range(len(self._params)):
            run = self._upd_zero[i]
            if i in still and i not in decayed:
                run.append(step)
            elif not math.isnan(ratios[int(self._owner[i])]):
                run.clear()
        zero = [i for i in range(len(self._params)) if len(self._upd_zero[i]) == n_rec]
        for target, idx in self._by_layer(zero):
            self._event("update-size", target, f"has a nonzero gradient on steps {_steps(self._upd_zero[idx[0]])} "
                        f"but the optimizer step never moved it ({still[idx[0]]})", tuple(self._names[i] for i in idx))
        zero_layers = {int(self._owner[i]) for i in range(len(self._params)) if self._upd_zero[i]}
        for c, r in enumerate(ratios):
            if math.isnan(r):
                continue
            mine = [i for i in range(len(self._params)) if int(self._owner[i]) == c]
            hi, lo = self._upd_hi[c], self._upd_lo[c]
            if r > th.update_high:
                hi.append(step)
            else:
                hi.clear()
            if r < th.update_low and c not in zero_layers and not all(i in decayed for i in mine):
                lo.append(step)
            else:
                lo.clear()
            if len(hi) == n_rec:
                self._event("update-size", self.layers[c], f"optimizer updates are {r:.3g} of the weights' norm "
                            f"(||Δw||/||w|| > {th.update_high:g} on steps {_steps(hi)}; ~1e-3 is typical): the "
                            "learning rate is likely too large for this layer")
            if len(lo) == n_rec:
                self._event("update-size", self.layers[c], f"optimizer updates are {r:.3g} of the weights' norm "
                            f"(||Δw||/||w|| < {th.update_low:g} on steps {_steps(lo)}; ~1e-3 is typical): this "
                            "layer barely learns; the learning rate is likely too small for it")

    # -- stale gradients ---------------------------------------------------------------------------
    def _arm(self) -> None:
        """Remember each gradient's identity and version; the next backward checks it was zeroed."""
        if not self._stale_check:
            return
        self._armed_at = self.steps_seen
        params = self._params
        self._armed = [(weakref.ref(g), g._version) if (g := p.grad) is not None else None for p in params]
        self._arm_versions = [p._version for p in params]
        self._arm_had_grad = [p.grad is not None for p in params]

    def _report_stale(self) -> None:
        stale, self._stale = self._stale, []
        self._stale_ever |= set(stale)
        opts = self._optimizers()
        if opts:  # parameters in no param group: optimizer.zero_grad() never clears them (not-in-optimizer)
            held = {id(p) for o in opts for g in o.param_groups for p in g["params"]}
            blamed = [i for i in stale if id(self._params[i]) in held]
        else:  # stood still (same version) while others moved: no optimizer holds it, zero_grad() skips it too
            moved = [self._params[j]._version != v and had
                     for j, (v, had) in enumerate(zip(self._arm_versions, self._arm_had_grad, strict=True))]
            blamed = [i for i in stale if moved[i] or not any(moved)]
            blamed = [i for i in blamed if i not in self._nio_reported]
        if not blamed:
            return
        names = [self._names[i] for i in blamed]
        layers = sorted({n.rpartition(".")[0] for n in names}, key=self.layers.index)
        target = "" if len(names) == len(self._handles) else layers[0]
        self._event("stale-grad", target,
                    f"backward added onto .grad left from step {self._armed_at}: for {len(names)} of "
                    f"{len(self._handles)} trainable parameters the .grad tensor was the same object, with the same "
                    f"version, as when step {self._armed_at} ended (neither zeroed nor replaced), so it now holds the "
                    "sum of both steps' gradients; call optimizer.zero_grad() once per step. Layers: "
                    + ", ".join(x or "(top)" for x in layers[:8]) + (" ..." if len(layers) > 8 else ""),
                    tuple(names))

    def _reach_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(_: torch.Tensor) -> None:  # backward computed a gradient for parameter i on this rank
            self._reached[i] = True

        return hook

    def _stale_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(_: torch.Tensor) -> None:
            # Runs before the new gradient is added to .grad. If .grad is still the very tensor seen when the
            # last step ended, unchanged (zero_() or set_to_none would have bumped or replaced it), this
            # backward is about to add onto the previous step's gradient.
            armed = self._armed[i]
            if armed is None:
                return
            self._armed[i] = None
            grad = self._params[i].grad
            if grad is not None and armed[0]() is grad and grad._version == armed[1]:
                self._stale.append(i)

        return hook

    # -- results -----------------------------------------------------------------------------------
    @property
    def steps(self) -> list[int]:
        """Training step (1-based) of each record, oldest first."""
        return list(self._steps[: self._count].tolist())

    def history(self, stat: str = "norm") -> torch.Tensor:
        """``(records, layers)`` tensor of one statistic of :data:`STATS` (on rank 0 under DDP: this rank's)."""
        choice("stat", stat, STATS)
        return self._hist[: self._count, :, STATS.index(stat)].clone()

    def per_rank(self, stat: str = "norm") -> torch.Tensor | None:
        """Rank 0 under torch.distributed: ``(records, world, layers)``, each rank's statistics; None elsewhere.
        Under DDP each rank's gradients; under FSDP2 each rank's own shards (the full tensors' norms, in
        :meth:`history`, are the root of the sum of the ranks' squares). (``"update"`` is measured after the
        gather: it is NaN here; DDP ranks hold the same weights, so :meth:`history` has it.)"""
        choice("stat", stat, STATS)
        if self._rank_hist is None:
            return None
        return self._rank_hist[: self._count, :, :, STATS.index(stat)].clone()

    def reduced(self, stat: str = "norm") -> torch.Tensor:
        """Across ranks (rank 0 under DDP): mean of norms and ratios, max of max-abs, sum of missing."""
        ranks = self.per_rank(stat)
        if ranks is None or stat == "update":
            return self.history(stat)
        if stat == "max_abs":
            return ranks.amax(dim=1)
        return ranks.sum(dim=1) if stat == "missing" else ranks.mean(dim=1)

    def flags(self) -> list[tuple[int, Flag]]:
        """Verdicts found while recording, plus NaN/Inf norms in the history and a clipping finding."""
        out = list(self.events)
        norms, missing, steps = self.history("norm"), self.history("missing"), self.steps
        skipped = set(self.amp_skipped)
        for r, c in zip(*torch.nonzero(~torch.isfinite(norms) & (missing == 0), as_tuple=True), strict=True):
            if steps[r] in skipped:
                continue
            out.append((steps[r], Flag("nan", self.layers[c], "gradient norm is NaN or Inf")))
        out += self._clip_flags()
        return sorted(out, key=lambda e: e[0])

    def flow(self, **kwargs: Any) -> GradientFlow:
        """Full statistics and flags of the current gradients (:func:`gv.gradient_flow`)."""
        return gradient_flow(self._model(), **kwargs)

    def summary(self) -> str:
        rank = f", rank {self._world[0]} of {self._world[1]}" if self._world[1] > 1 else ""
        lines = [f"GradientMonitor: {self._count} records over {self.steps_seen} steps (every {self.every}, "
                 f"stride {self.stride}, capacity {self.capacity}), {len(self.layers)} layers{rank}"]
        k, n = self.clipped
        if n:
            lines.append(f"  clipping bit on {k} of {n} steps (max_norm={self.max_norm:g})")
        upd = self.history("update")
        if upd.numel() and not bool(upd.isnan().all()):
            last = upd[~upd.isnan().all(dim=1)][-1]
            lines.append(f"  update/weight ratio at the last measured step: median {last.nanmedian().item():.3g}, "
                         f"max {last.nan_to_num(-1).max().item():.3g} over layers (~1e-3 is typical)")
        if self.amp_skipped:
            lines.append(f"  GradScaler skipped {len(self.amp_skipped)} recorded steps with inf/NaN gradients (steps "
                         f"{_steps(self.amp_skipped)}): normal dynamic loss scaling, not flagged")
        if self.scale_used is not None:
            lines.append(f"  norms divided by the GradScaler scale {self.scale_used:g} (gradients not yet unscaled)")
        flags = self.flags()
        lines += [f"  step {s} [{f.kind}] {f.target or '(model)'}: {f.reason}" for s, f in flags[:20]]
        if len(flags) > 20:
            lines.append(f"  ... {len(flags) - 20} more")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary().splitlines()[0]

    def _model(self) -> nn.Module:
        model = self._model_ref() if self._model_ref is not None else None
        if model is None:
            raise GradvizError("the monitored model is gone (or this monitor was loaded from a file).")
        return model

    # -- charts ------------------------------------------------------------------------------------
    def chart(self, **kwargs: Any) -> Any:
        """Heatmap (layers x steps) and norm lines, updated live while :meth:`step` runs; None off rank 0."""
        if self._world[0] != 0:
            return None
        from gradviz_nb.widgets.flow_charts import monitor_chart

        return monitor_chart(self, **kwargs)

    def to_tensorboard(self, writer_or_logdir: Any, *, histograms: bool = True, live: bool = False) -> Any:
        """Write per-layer norms, ratios, updates and verdicts as TensorBoard scalars and, while the model holds
        gradients, per-layer ``log10 |g|`` histograms (extra ``tensorboard``). ``live=True`` keeps writing after
        each record (then call ``.close()`` on the returned
        :class:`gradviz_nb.integrations.tensorboard.TensorBoardLog` at the end)."""
        from gradviz_nb.integrations.tensorboard import TensorBoardLog  # declared facade: optional extra, on use

        log = TensorBoardLog(self, writer_or_logdir, histograms=histograms, live=live)
        log.write()
        if not live:
            log.close()  # closes only a writer it made from a directory
        return log

    def on_record(self, listener: Callable[[GradientMonitor], None]) -> None:
        """Call ``listener(monitor)`` after records, at most every ``live_interval`` seconds."""
        function("listener", listener, "lambda monitor: print(monitor.summary())")
        self._listeners.append(listener)

    def push(self) -> None:
        """Send the current history to every listener (charts) now."""
        self._last_push = time.monotonic()
        for listener in list(self._listeners):
            listener(self)

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Remove every hook (parameters' and optimizers') and let go of everything the monitor held: the
        parameters, the weights copied for the update ratio, the scaler, the listeners. The recorded history
        stays readable (``history``, ``flags``, ``summary``, ``save``); :meth:`step` is refused after it."""
        self._finish_update()
        self._finish_scaler()
        for handle in [*self._handles, *self._opt_handles]:
            handle.remove()
        self._handles.clear()
        self._opt_handles.clear()
        self._stale_check = False
        self._armed = [None] * len(self._params)
        self._closed = True
        self._params = []
        self._index = {}
        self._snap = {}
        self._scaler = None
        self._listeners = []

    def __enter__(self) -> GradientMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def save(self, path: str | Path) -> None:
        """Write the history (records, layers, per-rank data, events, clipping counts) to ``path`` (``.pt``).

        The path is checked first and the file written atomically (``gradviz_nb.files``): a failure leaves an
        existing file as it was."""
        out = files.target("path", path, (".pt", ".pth"), "GradientMonitor.save")
        k, n = self.clipped
        saved = {
            "version": SAVE_VERSION, "stats": list(STATS), "layers": self.layers, "every": self.every,
            "capacity": self.capacity, "stride": self.stride, "steps_seen": self.steps_seen, "count": self._count,
            "hist": self._hist[: self._count].clone(), "steps": self._steps[: self._count].clone(),
            "rank_hist": None if self._rank_hist is None else self._rank_hist[: self._count].clone(),
            "events": [(s, f.kind, f.target, f.reason, list(f.params)) for s, f in self.events],
            "clip": [k, n, self.max_norm], "scale_used": self.scale_used, "amp_skipped": self.amp_skipped,
            "thresholds": asdict(self.thresholds),
        }
        files.write_atomic(out, lambda f: torch.save(saved, f), "GradientMonitor.save")

    @classmethod
    def load(cls, path: str | Path) -> GradientMonitor:
        """A read-only monitor holding the history saved by :meth:`save` (charts and summary work).

        Reads files of every version: version 1 (before the ``update`` stat, with ``stale`` events) too.
        The whole file is checked before anything is allocated (:func:`_checked_save`); a file that is not
        one :meth:`save` wrote raises one :class:`GradvizError`. A loaded monitor records nothing more, so its
        buffers hold the saved records only (``capacity`` is kept as a number).
        """
        data = _checked_save(files.load_torch(path, "GradientMonitor.load", "a GradientMonitor.save file"), path)
        saved_stats = data.get("stats", ["norm", "max_abs", "ratio", "missing"])
        th = MonitorThresholds(**data["thresholds"]) if "thresholds" in data else None
        mon = cls(None, every=data["every"], capacity=max(data["count"], 2), thresholds=th)
        mon.capacity = data["capacity"]
        mon.layers = list(data["layers"])
        mon.stride, mon.steps_seen, mon._count = data["stride"], data["steps_seen"], data["count"]
        cols = [STATS.index(s) for s in saved_stats]
        rows = max(mon._count, 2)
        mon._hist = torch.full((rows, len(mon.layers), len(STATS)), math.nan)
        mon._hist[: mon._count, :, cols] = data["hist"]
        mon._steps[: mon._count] = data["steps"]
        if data["rank_hist"] is not None:
            rh = data["rank_hist"]
            mon._rank_hist = torch.full((rows, *rh.shape[1:-1], len(STATS)), math.nan)
            mon._rank_hist[: mon._count, :, :, cols] = rh
        for s, kind, target, reason, params in data["events"]:
            kind = as_kind("stale-grad" if kind == "stale" else kind)  # "stale": files of version 1
            mon.events.append((s, Flag(kind, target, reason, tuple(params))))
        if "clip" in data:
            mon._clip_hits, mon._clip_steps, mon.max_norm = data["clip"]
        mon.scale_used = data.get("scale_used")
        mon.amp_skipped = list(data.get("amp_skipped", []))
        return mon


_SAVED_KEYS = {"version", "stats", "layers", "every", "capacity", "stride", "steps_seen", "count", "hist", "steps",
               "rank_hist", "events", "clip", "scale_used", "amp_skipped", "thresholds"}
_SAVED_REQUIRED = {"layers", "every", "capacity", "stride", "steps_seen", "count", "hist", "steps", "rank_hist",
                   "events"}
_MAX_SAVED_CAPACITY = 2**40


def _checked_save(data: Any, path: object) -> dict[str, Any]:
    """``data`` (what ``torch.load`` read from a :meth:`GradientMonitor.save` file) if every field has the type,
    shape and range :meth:`GradientMonitor.load` relies on; else one :class:`GradvizError` naming the field."""

    def bad(what: str) -> GradvizError:
        return GradvizError(f"GradientMonitor.load: {str(path)!r} is not a GradientMonitor.save file ({what}).")

    def whole(key: str, lo: int, hi: int = 2**62) -> int:
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise bad(f"{key!r} must be a whole number from {lo} to {hi}, got {_short(value)}")
        return value

    def strings(value: Any, key: str) -> list[str]:
        if not isinstance(value, list | tuple) or not all(isinstance(s, str) for s in value):
            raise bad(f"{key!r} must be a list of strings")
        return list(value)

    def number(value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, int | float)

    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise bad(f"it holds a {type(data).__name__}, not the saved history")
    if set(data) - _SAVED_KEYS or _SAVED_REQUIRED - set(data):
        raise bad(f"unknown fields {sorted(set(data) - _SAVED_KEYS)}, missing {sorted(_SAVED_REQUIRED - set(data))}")
    version = whole("version", 1, 2**31) if "version" in data else 1
    if version > SAVE_VERSION:
        raise GradvizError(f"{path} was saved by a newer gradviz_nb (format {version}); upgrade to read it.")
    stats = strings(data.get("stats", ["norm", "max_abs", "ratio", "missing"]), "stats")
    if not stats or len(set(stats)) != len(stats) or not set(stats) <= set(STATS):
        raise bad(f"'stats' must be distinct names from {STATS}")
    layers = strings(data["layers"], "layers")
    whole("every", 1)
    capacity = whole("capacity", 2, _MAX_SAVED_CAPACITY)
    whole("stride", 1)
    whole("steps_seen", 0)
    count = whole("count", 0, capacity)
    for key, dims in (("hist", (count, len(layers), len(stats))), ("steps", (count,))):
        value = data[key]
        floating = key == "hist"
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided or \
                value.is_floating_point() != floating or value.is_complex() or value.dtype == torch.bool or \
                tuple(value.shape) != dims:
            raise bad(f"{key!r} must be a {'float' if floating else 'integer'} tensor of shape {list(dims)}")
    rank_hist = data["rank_hist"]
    if rank_hist is not None and not (
            isinstance(rank_hist, torch.Tensor) and rank_hist.layout == torch.strided
            and rank_hist.is_floating_point() and rank_hist.dim() == 4 and rank_hist.shape[0] == count
            and rank_hist.shape[1] >= 1 and tuple(rank_hist.shape[2:]) == (len(layers), len(stats))):
        raise bad(f"'rank_hist' must be None or a float tensor of shape [{count}, ranks, {len(layers)}, {len(stats)}]")
    events = data["events"]
    kinds = {*MONITOR_KINDS, "stale"}
    if not isinstance(events, list | tuple) or not all(
            isinstance(e, list | tuple) and len(e) == 5 and isinstance(e[0], int) and not isinstance(e[0], bool)
            and e[1] in kinds and isinstance(e[2], str) and isinstance(e[3], str)
            and isinstance(e[4], list | tuple) and all(isinstance(p, str) for p in e[4]) for e in events):
        raise bad("'events' must be a list of (step, kind, target, reason, parameters)")
    if "clip" in data:
        clip = data["clip"]
        if not (isinstance(clip, list | tuple) and len(clip) == 3 and all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in clip[:2])
                and (clip[2] is None or number(clip[2]))):
            raise bad("'clip' must be [hits, steps, max_norm]")
    if data.get("scale_used") is not None and not number(data["scale_used"]):
        raise bad("'scale_used' must be a number or None")
    skipped = data.get("amp_skipped", [])
    if not isinstance(skipped, list | tuple) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                        for s in skipped):
        raise bad("'amp_skipped' must be a list of step numbers")
    if "thresholds" in data:
        th, fields = data["thresholds"], MonitorThresholds.__dataclass_fields__
        if not isinstance(th, dict) or not set(th) <= set(fields) or not all(
                (isinstance(v, int) if fields[k].type in ("int", int) else number(v) and math.isfinite(v))
                and not isinstance(v, bool) for k, v in th.items()):
            raise bad(f"'thresholds' must hold numbers for {sorted(fields)}")
    return data


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


MAX_CAPACITY = 1 << 20  # records kept; the history is capacity x layers x stats floats


def _check_monitor_args(model: object, optimizer: object, scaler: object, thresholds: object, stale_check: object,
                        update_ratio: object, live_interval: object, max_events: object) -> None:
    """GradientMonitor's keyword arguments, each refused by name when it cannot mean anything."""
    model_or_none("model", model)
    opts = optimizer if isinstance(optimizer, (list, tuple)) else [] if optimizer is None else [optimizer]
    for o in opts:
        instance("optimizer", o, torch.optim.Optimizer, "a torch.optim.Optimizer, a list of them, or None")
    if scaler is not None and not (hasattr(scaler, "get_scale") and hasattr(scaler, "is_enabled")):
        raise GradvizError(f"scaler must be a torch.amp.GradScaler or None; got {type(scaler).__name__}.")
    if thresholds is not None:
        instance("thresholds", thresholds, MonitorThresholds, "a MonitorThresholds or None")
    boolean("stale_check", stale_check)
    boolean("update_ratio", update_ratio)
    finite_number("live_interval", live_interval, lo=0, hint="It is the seconds between live chart updates.")
    positive_int("max_events", max_events)


def _values(g: torch.Tensor) -> torch.Tensor:
    """The stored values of a gradient: itself when dense; a sparse one's (coalesced) non-zero values. A
    complex gradient as its magnitudes ``|g|``: the same norm and max |g| (never its real part's)."""
    if g.layout == torch.sparse_coo:
        g = g.coalesce().values()
    elif g.layout != torch.strided:
        g = g.values()
    return g.abs() if g.is_complex() else g


def _ddp_ignored(model: nn.Module | None) -> set[str]:
    """Parameter names DDP was told not to synchronise (``_set_params_and_buffers_to_ignore_for_model``)."""
    ddp = getattr(sys.modules.get("torch.nn.parallel.distributed"), "DistributedDataParallel", None)
    if model is None or ddp is None:
        return set()
    out: set[str] = set()
    for prefix, m in model.named_modules():
        if isinstance(m, ddp):
            out |= {f"{prefix}.module.{n}" if prefix else f"module.{n}" for n in m.parameters_to_ignore}
    return out


def _common_prefix(names: list[str]) -> str:
    """The longest dotted prefix shared by ``names`` (the module holding them), or "" (the model)."""
    parts = [n.split(".") for n in names]
    common: list[str] = []
    for column in zip(*parts, strict=False):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    return ".".join(common)


def _steps(steps: Sequence[int]) -> str:
    return ", ".join(map(str, steps[:6])) + (f", ... {steps[-1]}" if len(steps) > 6 else "")


def _world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1

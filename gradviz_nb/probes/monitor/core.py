"""``GradientMonitor``, the facade: per-layer gradient statistics across training steps, cheap and bounded.

Collection is explicit: call :meth:`GradientMonitor.step` after ``backward()`` (and gradient clipping),
before ``optimizer.step()``. The monitor reads ``.grad`` once, when the user says the gradients are final
(:mod:`.stats`), into a fixed buffer (:mod:`.buffer`); verdicts are rules over the records
(:mod:`.verdicts`), stale gradients and missing optimizers are seen by hooks (:mod:`.stale`), the update
ratio and clipping by :mod:`.update`, ranks by :mod:`.gather`; charts and TensorBoard in :mod:`.glue`.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import torch
from torch import nn

from gradviz_nb import files
from gradviz_nb.errors import GradvizError
from gradviz_nb.kinds import Kind
from gradviz_nb.probes.flow import Flag, GradientFlow, gradient_flow
from gradviz_nb.probes.monitor import glue
from gradviz_nb.probes.monitor.buffer import (
    MAX_CAPACITY,
    MISSING,
    NORM,
    STATS,
    Records,
    checked_save,
    restore,
    saved_file,
)
from gradviz_nb.probes.monitor.gather import RankGather
from gradviz_nb.probes.monitor.params import ParamIndex
from gradviz_nb.probes.monitor.stale import NotInOptimizer, StaleCheck
from gradviz_nb.probes.monitor.stats import AmpWatch, Reading, read
from gradviz_nb.probes.monitor.update import ClipCounter, UpdateTracker
from gradviz_nb.probes.monitor.verdicts import (
    MonitorThresholds,
    RecordRules,
    clip_flag,
    nan_flags,
    steps_text,
    without_grad,
)
from gradviz_nb.tracing.compiled import unwrap_compiled
from gradviz_nb.validate import boolean, choice, finite_number, instance, model_or_none, not_meta, positive_int

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
    gradients were already unscaled (``scaler.unscale_``), so they are the true gradient norms. Memory is
    bounded: ``capacity`` records; when full, every other one is dropped and the stride doubles.

    Verdicts (:meth:`flags`; thresholds in :class:`MonitorThresholds`):

    - ``stale-grad``: checked on every step, recorded or not. With ``optimizer`` the check is armed when
      ``optimizer.step()`` ends, so deliberate gradient accumulation between optimizer steps is never blamed.
      Without it, it is armed at :meth:`step`; a ``GradScaler`` unscaling in place after that hides it
      (pass ``optimizer``).
    - ``not-in-optimizer``: with ``optimizer``, a parameter with a gradient in no param group; without it, one
      whose version and norm stay put between recorded steps while others move. Its never-cleared ``.grad``
      is not blamed on a missing ``zero_grad``. A param group with ``lr=0`` is told apart: ``update-size``.
    - ``clip-norm`` (under sharding, given ``step(grad_norm=, max_norm=)``): a clip that bit must leave the full
      gradients' norm at ``max_norm``; away from it, the clip divided by a norm that was not the global one (per
      shard: about √shards above; replicas counted as shards: √replicas below), named with the ratio.
    - ``no-grad``, ``spike`` (on pre-clip norms: a step that ``clip_grad_norm_`` clipped, reported with
      ``step(grad_norm=, max_norm=)``, is judged by its norms before clipping), ``update-size``
      (``optimizer`` needed; costs one copy of the weights, on recorded steps only; ``update_ratio=False``
      turns it off), ``clipping``, ``nan`` (steps a ``GradScaler`` skipped for inf/NaN are dynamic loss
      scaling at work: listed, not flagged).

    Under ``torch.distributed`` every rank records and rank 0 gathers every rank's statistics on recorded
    steps (``per_rank``). Under FSDP2 (``DTensor`` shards) each record holds the full tensors' norms, from this
    rank's shards and one all-reduce; create the monitor before the first forward or after a backward. Given a
    ``DistributedDataParallel`` model, rank 0 also checks what DDP guarantees: ``replica-mismatch`` (a rank's
    layer norm differs from rank 0's after the all-reduce: backward under ``no_sync()``, or gradients changed
    on one rank; the replicas drift apart) and ``unused-on-rank`` (parameters backward reached on some ranks
    only: the cause of DDP's "Expected to have finished reduction in the prior iteration").
    """

    def __init__(self, model: nn.Module | None, every: int = 1, capacity: int = 256, *,
                 optimizer: Optimizers | None = None, scaler: torch.amp.GradScaler | None = None,
                 thresholds: MonitorThresholds | None = None, stale_check: bool = True, update_ratio: bool = True,
                 live_interval: float = 0.5, max_events: int = 1000) -> None:
        every = positive_int("every", every, hint="It is the number of steps between records.")
        capacity = positive_int("capacity", capacity, lo=2, hi=MAX_CAPACITY, hint="It is the records kept in memory.")
        _check_monitor_args(model, optimizer, scaler, thresholds, stale_check, update_ratio, live_interval, max_events)
        not_meta("gv.GradientMonitor", model)
        self.every, self.capacity, self.live_interval = every, capacity, live_interval
        self.thresholds = th = thresholds or MonitorThresholds()
        self.steps_seen = 0
        self.events: deque[tuple[int, Flag]] = deque(maxlen=max_events)
        """(step, Flag) verdicts, found as they happen."""
        model = unwrap_compiled(model)  # torch.compile(model): same parameters, named without "_orig_mod."
        self._model_ref = weakref.ref(model) if model is not None else None
        self._closed = False
        self._index = index = ParamIndex(model)
        self._gather = RankGather(index, model, self._event)
        rank, world = self._gather.rank, self._gather.size
        self._rec = Records(capacity, len(index.layers), world if world > 1 and rank == 0 else None)
        self._local_stats: torch.Tensor | None = None  # FSDP2: this rank's shard statistics of the record
        opts = [] if optimizer is None else [optimizer] if isinstance(optimizer, torch.optim.Optimizer) \
            else list(optimizer)
        self._opt_refs = [weakref.ref(o) for o in opts]
        self._scaler = scaler
        self._stale = StaleCheck(index, model is not None and stale_check, self._event)
        self._handles = self._gather.hooks()
        self._nio = NotInOptimizer(index, th, self._event)
        self._rules = RecordRules(index.layers, [tuple(index.names[i] for i in index.in_layer(c))
                                                 for c in range(len(index.layers))], th)
        self._updates = UpdateTracker(index, self._rec, th, self._event)
        if model is not None:
            self._updates.attach(opts, update_ratio, lambda: self._stale.arm(self.steps_seen))
        self._clip = ClipCounter()
        self._listeners = glue.Listeners(live_interval)
        self.scale_used: float | None = None
        """The GradScaler scale the last recorded norms were divided by (None: not scaled)."""
        self._amp = AmpWatch()

    @property
    def layers(self) -> list[str]:
        """The layers (modules owning trainable parameters), in model order: the history's columns."""
        return self._index.layers

    @property
    def stride(self) -> int:
        """Records are ``every * stride`` steps apart; doubles each time the buffer is compacted."""
        return self._rec.stride

    @property
    def max_norm(self) -> float | None:
        """The ``max_norm`` last given to :meth:`step`."""
        return self._clip.max_norm

    @property
    def clipped(self) -> tuple[int, int]:
        """(steps on which clipping bit, steps that reported a pre-clip norm)."""
        return self._clip.clipped

    @property
    def amp_skipped(self) -> list[int]:
        """Recorded steps with inf/NaN gradients that the GradScaler then skipped (its scale backed off)."""
        return self._amp.skipped

    @property
    def _names(self) -> list[str]:
        return self._index.names

    # -- recording ---------------------------------------------------------------------------------
    def step(self, *, grad_norm: float | torch.Tensor | None = None, max_norm: float | None = None) -> None:
        """Count one training step; every ``every`` x ``stride`` steps record the gradients' statistics.

        ``grad_norm`` and ``max_norm``: the pre-clip total norm returned by ``clip_grad_norm_`` and the
        ``max_norm`` given to it; the monitor counts the steps on which clipping bit, records the pre-clip
        norm, and judges spikes on the norms before clipping (the gradients it reads sit at ``max_norm``).
        """
        if self._model_ref is None:
            raise GradvizError("this monitor was loaded from a file: it has a history but no model to record.")
        if self._closed:
            raise GradvizError("this monitor is closed: it keeps its history but no longer holds the model. "
                               "Start a new gv.GradientMonitor(model) to record more steps.")
        self.steps_seen += 1
        self._updates.finish()
        self._amp.finish(self._scaler)
        if grad_norm is not None or max_norm is not None:
            self._clip.count(grad_norm, max_norm)
        if self._stale.stale:
            self._stale.report(self._optimizers(), self._nio.reported)
        if not (self.steps_seen - 1) % (self.every * self.stride):
            self._record()
        self._clip.last = None
        self._gather.reached = [False] * len(self._index.params)
        if not self._opt_refs:
            self._stale.arm(self.steps_seen)  # with an optimizer, the end of its step arms the check

    def _record(self) -> None:
        reading = read(self._index, self._scaler, self._optimizers())
        self.scale_used = reading.scale_used
        if reading.local is not None:
            self._local_stats = reading.local
        if self._index.sharded:  # the clip as applied: the full gradients' norm must sit at max_norm
            misapplied = self._clip.applied(reading.stats[:, NORM], self._gather.size)
            if misapplied is not None:
                self._event("clip-norm", "", misapplied)
        total, preclip = self._clip.preclip(reading.stats[:, NORM])
        slot = self._rec.add(reading.stats, self.steps_seen, total)
        if self._gather.size > 1:
            stats = reading.stats if self._local_stats is None else self._local_stats
            self._gather.gather(stats, self._rec.rank_hist, slot)
        self._check_record(reading, preclip)
        self._amp.note(self._scaler, reading.stats, self.steps_seen)
        self._updates.pending = (slot, self.steps_seen) if self._opt_refs else None
        self._updates.nonzero = reading.nonzero
        if self._listeners.due():
            self.push()

    def _check_record(self, reading: Reading, preclip: float) -> None:
        index, stats = self._index, reading.stats
        self._nio.check(self.steps_seen, reading.present, reading.wnorms, self._optimizers(), self._stale.ever)
        req = [i for i, p in enumerate(index.params) if p.requires_grad]
        trainable = torch.zeros(len(index.layers)).index_add_(0, index.owner[req], torch.ones(len(req)))
        none = without_grad(stats[:, MISSING], stats[:, NORM], index.per_layer, trainable)
        for verdict in self._rules.feed(self.steps_seen, none.tolist(), [int(t) for t in trainable.tolist()],
                                        stats[:, NORM], preclip):
            self._event(*verdict)

    def _event(self, kind: Kind, target: str, reason: str, params: tuple[str, ...] = ()) -> None:
        self.events.append((self.steps_seen, Flag(kind, target, reason, params)))

    def _optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for r in self._opt_refs if (o := r()) is not None]

    # -- results -----------------------------------------------------------------------------------
    @property
    def steps(self) -> list[int]:
        """Training step (1-based) of each record, oldest first."""
        return list(self._rec.steps[: self._rec.count].tolist())

    def history(self, stat: str = "norm") -> torch.Tensor:
        """``(records, layers)`` tensor of one statistic of :data:`STATS` (on rank 0 under DDP: this rank's)."""
        return self._rec.column(choice("stat", stat, STATS))

    def preclip(self) -> torch.Tensor:
        """``(records,)``: the total norm ``clip_grad_norm_`` reported before clipping (NaN where not given)."""
        return self._rec.preclip[: self._rec.count].clone()

    def per_rank(self, stat: str = "norm") -> torch.Tensor | None:
        """Rank 0 under torch.distributed: ``(records, world, layers)``, each rank's statistics; None elsewhere.
        Under DDP each rank's gradients; under FSDP2 each rank's own shards (the full tensors' norms, in
        :meth:`history`, are the root of the sum of the ranks' squares). (``"update"`` is measured after the
        gather: it is NaN here; DDP ranks hold the same weights, so :meth:`history` has it.)"""
        return self._rec.ranks(choice("stat", stat, STATS))

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
        out += nan_flags(self.history("norm"), self.history("missing"), self.steps, self.layers,
                         set(self.amp_skipped))
        k, n = self.clipped
        out += clip_flag(k, n, self.max_norm, self.steps_seen, self.thresholds)
        return sorted(out, key=lambda e: e[0])

    def flow(self, **kwargs: Any) -> GradientFlow:
        """Full statistics and flags of the current gradients (:func:`gv.gradient_flow`)."""
        return gradient_flow(self._model(), **kwargs)

    def summary(self) -> str:
        """The monitor as text: records, steps and layers, then each flag with its step, kind, target and reason."""
        rank = f", rank {self._gather.rank} of {self._gather.size}" if self._gather.size > 1 else ""
        lines = [f"GradientMonitor: {self._rec.count} records over {self.steps_seen} steps (every {self.every}, "
                 f"stride {self.stride}, capacity {self.capacity}), {len(self.layers)} layers{rank}"]
        lines += _summary_lines(self)
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

    # -- charts and listeners ----------------------------------------------------------------------
    def chart(self, **kwargs: Any) -> Any:
        """Heatmap (layers x steps) and norm lines, updated live while :meth:`step` runs; None off rank 0."""
        return glue.chart(self, **kwargs) if self._gather.rank == 0 else None

    def to_tensorboard(self, writer_or_logdir: Any, *, histograms: bool = True, live: bool = False) -> Any:
        """Write per-layer norms, ratios, updates and verdicts as TensorBoard scalars and, while the model holds
        gradients, per-layer ``log10 |g|`` histograms (extra ``tensorboard``). ``live=True`` keeps writing after
        each record (then call ``.close()`` on the returned
        :class:`gradviz_nb.integrations.tensorboard.TensorBoardLog` at the end)."""
        return glue.to_tensorboard(self, writer_or_logdir, histograms, live)

    def on_record(self, listener: Callable[[GradientMonitor], None]) -> None:
        """Call ``listener(monitor)`` after records, at most every ``live_interval`` seconds."""
        self._listeners.add(listener)

    def push(self) -> None:
        """Send the current history to every listener (charts) now."""
        self._listeners.push(self)

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Remove every hook (parameters' and optimizers') and let go of everything the monitor held: the
        parameters, the weights copied for the update ratio, the scaler, the listeners. The recorded history
        stays readable (``history``, ``flags``, ``summary``, ``save``); :meth:`step` is refused after it."""
        self._updates.close()
        self._amp.finish(self._scaler)
        self._stale.close()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._closed = True
        self._index.release()
        self._scaler = None
        self._listeners.calls = []

    def __enter__(self) -> GradientMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def save(self, path: str | Path) -> None:
        """Write the history (records, layers, per-rank data, events, clipping counts) to ``path`` (``.pt``).

        The path is checked first and the file written atomically (``gradviz_nb.files``): a failure leaves an
        existing file as it was."""
        out = files.target("path", path, (".pt", ".pth"), "GradientMonitor.save")
        saved = saved_file(self)
        files.write_atomic(out, lambda f: torch.save(saved, f), "GradientMonitor.save")

    @classmethod
    def load(cls, path: str | Path) -> GradientMonitor:
        """A read-only monitor holding the history saved by :meth:`save` (charts and summary work).

        Reads files of every version: version 1 (before the ``update`` stat, with ``stale`` events) too.
        The whole file is checked before anything is allocated; a file that is not one :meth:`save` wrote
        raises one :class:`GradvizError`. A loaded monitor records nothing more, so its buffers hold the
        saved records only (``capacity`` is kept as a number).
        """
        data = checked_save(files.load_torch(path, "GradientMonitor.load", "a GradientMonitor.save file"), path)
        th = MonitorThresholds(**data["thresholds"]) if "thresholds" in data else None
        mon = cls(None, every=data["every"], capacity=max(data["count"], 2), thresholds=th)
        restore(mon, data)
        return mon


def _summary_lines(mon: GradientMonitor) -> list[str]:
    """The summary's lines on clipping, updates and the GradScaler."""
    lines = []
    k, n = mon.clipped
    if n:
        lines.append(f"  clipping bit on {k} of {n} steps (max_norm={mon.max_norm:g})")
    pre = mon.preclip()
    if bool(torch.isfinite(pre).any()):
        r = int(pre.nan_to_num(-1).argmax())
        lines.append(f"  largest pre-clip total norm {pre[r].item():.4g} at step {mon.steps[r]}")
    upd = mon.history("update")
    if upd.numel() and not bool(upd.isnan().all()):
        last = upd[~upd.isnan().all(dim=1)][-1]
        lines.append(f"  update/weight ratio at the last measured step: median {last.nanmedian().item():.3g}, "
                     f"max {last.nan_to_num(-1).max().item():.3g} over layers (~1e-3 is typical)")
    if mon.amp_skipped:
        lines.append(f"  GradScaler skipped {len(mon.amp_skipped)} recorded steps with inf/NaN gradients (steps "
                     f"{steps_text(mon.amp_skipped)}): normal dynamic loss scaling, not flagged")
    if mon.scale_used is not None:
        lines.append(f"  norms divided by the GradScaler scale {mon.scale_used:g} (gradients not yet unscaled)")
    return lines


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


__all__ = ["GradientMonitor", "MonitorThresholds"]

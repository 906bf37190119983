"""The record buffer: ``capacity`` records of (layers x STATS) in preallocated tensors, and its save file.

When the buffer is full every other record is dropped and the recording stride doubles, so the history
always spans the whole run at a resolution that halves as it grows. The save file is checked field by
field before anything is allocated (:func:`checked_save`).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from gradviz_nb.errors import GradvizError
from gradviz_nb.kinds import as_kind, kinds_of
from gradviz_nb.probes.flow import Flag
from gradviz_nb.probes.monitor.verdicts import MonitorThresholds

if TYPE_CHECKING:
    from gradviz_nb.probes.monitor.core import GradientMonitor

STATS = ("norm", "max_abs", "ratio", "missing", "update")
"""Per layer and record: gradient L2 norm, max |g|, grad/weight norm ratio, parameters without ``.grad``,
and the optimizer's real update ``||Δw|| / ||w||`` (NaN unless the optimizer is given)."""
NORM, MAX, RATIO, MISSING, UPDATE = range(len(STATS))
SAVE_VERSION = 3  # 3: the pre-clip total norm of each record ("preclip")
MAX_CAPACITY = 1 << 20  # records kept; the history is capacity x layers x stats floats
MONITOR_KINDS = kinds_of("monitor")


class Records:
    """``rows`` preallocated records (``capacity`` before compaction); ``ranks``: rank 0's per-rank copy."""

    def __init__(self, capacity: int, n_layers: int, ranks: int | None = None, rows: int | None = None) -> None:
        rows = capacity if rows is None else rows
        self.capacity = capacity
        self.stride = 1  # doubles each time the buffer is compacted
        self.count = 0
        self.hist = torch.full((rows, n_layers, len(STATS)), math.nan)
        self.steps = torch.zeros(rows, dtype=torch.long)
        self.preclip = torch.full((rows,), math.nan)  # total norm before clip_grad_norm_ (NaN: not reported)
        self.rank_hist = None if ranks is None else torch.full((rows, ranks, n_layers, len(STATS)), math.nan)

    def add(self, stats: torch.Tensor, step: int, preclip: float) -> int:
        """Store one record (compacting first when full); its slot."""
        if self.count == self.capacity:
            self.compact()
        slot = self.count
        self.hist[slot] = stats
        self.steps[slot] = step
        self.preclip[slot] = preclip
        self.count += 1
        return slot

    def compact(self) -> None:
        """Halve the resolution when the buffer is full: keep every other record."""
        keep = self.capacity // 2
        for buf in (self.hist, self.steps, self.preclip, self.rank_hist):
            if buf is not None:
                buf[:keep] = buf[0:self.capacity:2][:keep].clone()
        self.count = keep
        self.stride *= 2

    def column(self, stat: str) -> torch.Tensor:
        """One statistic of every record, as a ``(records, layers)`` tensor (a copy)."""
        return self.hist[: self.count, :, STATS.index(stat)].clone()

    def ranks(self, stat: str) -> torch.Tensor | None:
        """One statistic per rank of every record, when the monitor gathers ranks (None otherwise)."""
        if self.rank_hist is None:
            return None
        return self.rank_hist[: self.count, :, :, STATS.index(stat)].clone()

    def saved(self) -> dict[str, Any]:
        """The buffer's fields of a save file."""
        n = self.count
        return {"stats": list(STATS), "capacity": self.capacity, "stride": self.stride, "count": n,
                "hist": self.hist[:n].clone(), "steps": self.steps[:n].clone(), "preclip": self.preclip[:n].clone(),
                "rank_hist": None if self.rank_hist is None else self.rank_hist[:n].clone()}

    @classmethod
    def from_saved(cls, data: dict[str, Any]) -> Records:
        """The records of a checked save file, with files of version 1 (before ``update``) widened to STATS."""
        count = data["count"]
        rows = max(count, 2)
        rec = cls(data["capacity"], len(data["layers"]), rows=rows)
        cols = [STATS.index(s) for s in data.get("stats", ["norm", "max_abs", "ratio", "missing"])]
        rec.stride, rec.count = data["stride"], count
        rec.hist[:count, :, cols] = data["hist"]
        rec.steps[:count] = data["steps"]
        if data.get("preclip") is not None:
            rec.preclip[:count] = data["preclip"]
        if data["rank_hist"] is not None:
            rh = data["rank_hist"]
            rec.rank_hist = torch.full((rows, *rh.shape[1:-1], len(STATS)), math.nan)
            rec.rank_hist[:count, :, :, cols] = rh
        return rec


def saved_file(mon: GradientMonitor) -> dict[str, Any]:
    """What ``GradientMonitor.save`` writes: the records, layers, per-rank data, events, clipping counts."""
    k, n = mon.clipped
    return {"version": SAVE_VERSION, "layers": mon.layers, "every": mon.every, "steps_seen": mon.steps_seen,
            **mon._rec.saved(), "events": [(s, f.kind, f.target, f.reason, list(f.params)) for s, f in mon.events],
            "clip": [k, n, mon.max_norm], "scale_used": mon.scale_used, "amp_skipped": mon.amp_skipped,
            "thresholds": asdict(mon.thresholds)}


def restore(mon: GradientMonitor, data: dict[str, Any]) -> None:
    """Fill a model-less monitor with a checked save file's history (:func:`checked_save`)."""
    mon.capacity = data["capacity"]
    mon._index.layers = list(data["layers"])
    mon._rec = mon._updates.records = Records.from_saved(data)
    mon.steps_seen = data["steps_seen"]
    for s, kind, target, reason, params in data["events"]:
        kind = as_kind("stale-grad" if kind == "stale" else kind)  # "stale": files of version 1
        mon.events.append((s, Flag(kind, target, reason, tuple(params))))
    if "clip" in data:
        mon._clip.hits, mon._clip.steps, mon._clip.max_norm = data["clip"]
    mon.scale_used = data.get("scale_used")
    mon._amp.skipped = list(data.get("amp_skipped", []))


_SAVED_KEYS = {"version", "stats", "layers", "every", "capacity", "stride", "steps_seen", "count", "hist", "steps",
               "rank_hist", "events", "clip", "scale_used", "amp_skipped", "thresholds", "preclip"}
_SAVED_REQUIRED = {"layers", "every", "capacity", "stride", "steps_seen", "count", "hist", "steps", "rank_hist",
                   "events"}
_MAX_SAVED_CAPACITY = 2**40


class _Checker:
    """Field checks of a save file; each failure is one :class:`GradvizError` naming the field."""

    def __init__(self, data: Any, path: object) -> None:
        self.data, self.path = data, path

    def bad(self, what: str) -> GradvizError:
        return GradvizError(f"GradientMonitor.load: {str(self.path)!r} is not a GradientMonitor.save file ({what}).")

    def whole(self, key: str, lo: int, hi: int = 2**62) -> int:
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise self.bad(f"{key!r} must be a whole number from {lo} to {hi}, got {_short(value)}")
        return value

    def strings(self, value: Any, key: str) -> list[str]:
        if not isinstance(value, list | tuple) or not all(isinstance(s, str) for s in value):
            raise self.bad(f"{key!r} must be a list of strings")
        return list(value)

    def tensor(self, key: str, dims: tuple[int, ...], floating: bool) -> None:
        value = self.data[key]
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided or \
                value.is_floating_point() != floating or value.is_complex() or value.dtype == torch.bool or \
                tuple(value.shape) != dims:
            raise self.bad(f"{key!r} must be a {'float' if floating else 'integer'} tensor of shape {list(dims)}")


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def checked_save(data: Any, path: object) -> dict[str, Any]:
    """``data`` (what ``torch.load`` read from a ``GradientMonitor.save`` file) if every field has the type,
    shape and range ``GradientMonitor.load`` relies on; else one :class:`GradvizError` naming the field."""
    c = _Checker(data, path)
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise c.bad(f"it holds a {type(data).__name__}, not the saved history")
    if set(data) - _SAVED_KEYS or _SAVED_REQUIRED - set(data):
        raise c.bad(f"unknown fields {sorted(set(data) - _SAVED_KEYS)}, missing {sorted(_SAVED_REQUIRED - set(data))}")
    version = c.whole("version", 1, 2**31) if "version" in data else 1
    if version > SAVE_VERSION:
        raise GradvizError(f"{path} was saved by a newer gradviz_nb (format {version}); upgrade to read it.")
    stats = c.strings(data.get("stats", ["norm", "max_abs", "ratio", "missing"]), "stats")
    if not stats or len(set(stats)) != len(stats) or not set(stats) <= set(STATS):
        raise c.bad(f"'stats' must be distinct names from {STATS}")
    layers = c.strings(data["layers"], "layers")
    c.whole("every", 1)
    capacity = c.whole("capacity", 2, _MAX_SAVED_CAPACITY)
    c.whole("stride", 1)
    c.whole("steps_seen", 0)
    count = c.whole("count", 0, capacity)
    c.tensor("hist", (count, len(layers), len(stats)), True)
    c.tensor("steps", (count,), False)
    if data.get("preclip") is not None:
        c.tensor("preclip", (count,), True)
    rank_hist = data["rank_hist"]
    if rank_hist is not None and not (
            isinstance(rank_hist, torch.Tensor) and rank_hist.layout == torch.strided
            and rank_hist.is_floating_point() and rank_hist.dim() == 4 and rank_hist.shape[0] == count
            and rank_hist.shape[1] >= 1 and tuple(rank_hist.shape[2:]) == (len(layers), len(stats))):
        raise c.bad(f"'rank_hist' must be None or a float tensor of shape [{count}, ranks, {len(layers)}, "
                    f"{len(stats)}]")
    _check_extras(c, data)
    return data


def _check_extras(c: _Checker, data: dict[str, Any]) -> None:
    """The save file's events, clipping counts, scaler fields and thresholds."""
    events = data["events"]
    kinds = {*MONITOR_KINDS, "stale"}
    if not isinstance(events, list | tuple) or not all(
            isinstance(e, list | tuple) and len(e) == 5 and isinstance(e[0], int) and not isinstance(e[0], bool)
            and e[1] in kinds and isinstance(e[2], str) and isinstance(e[3], str)
            and isinstance(e[4], list | tuple) and all(isinstance(p, str) for p in e[4]) for e in events):
        raise c.bad("'events' must be a list of (step, kind, target, reason, parameters)")
    if "clip" in data:
        clip = data["clip"]
        if not (isinstance(clip, list | tuple) and len(clip) == 3 and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in clip[:2])
                and (clip[2] is None or _number(clip[2]))):
            raise c.bad("'clip' must be [hits, steps, max_norm]")
    if data.get("scale_used") is not None and not _number(data["scale_used"]):
        raise c.bad("'scale_used' must be a number or None")
    skipped = data.get("amp_skipped", [])
    if not isinstance(skipped, list | tuple) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                        for s in skipped):
        raise c.bad("'amp_skipped' must be a list of step numbers")
    if "thresholds" in data:
        th, fields = data["thresholds"], MonitorThresholds.__dataclass_fields__
        if not isinstance(th, dict) or not set(th) <= set(fields) or not all(
                (isinstance(v, int) if fields[k].type in ("int", int) else _number(v) and math.isfinite(v))
                and not isinstance(v, bool) for k, v in th.items()):
            raise c.bad(f"'thresholds' must hold numbers for {sorted(fields)}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

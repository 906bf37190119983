"""``gv.GradientMonitor``: per-layer gradient statistics across training steps, cheap and bounded, with verdicts.

The package, by what each part does:

- :mod:`.core`: :class:`GradientMonitor`, the facade the user holds (``step``, results, save/load).
- :mod:`.params`: the monitored parameters and their layers.
- :mod:`.buffer`: the record buffer (preallocated, halved in resolution when full) and the save file.
- :mod:`.stats`: one record's per-layer statistics from ``.grad``.
- :mod:`.verdicts`: ``no-grad``, ``spike``, ``update-size``, ``nan``, ``clipping`` as rules over record arrays.
- :mod:`.update`: clipping counts, pre-clip norms, and the optimizer's real update per record.
- :mod:`.stale`: ``stale-grad`` (tensor hooks) and ``not-in-optimizer``.
- :mod:`.gather`: ``torch.distributed``: the gather to rank 0, DDP's checks, FSDP2 shard reductions.
- :mod:`.glue`: listeners, the chart, TensorBoard.
"""

from gradviz_nb.probes.monitor.buffer import MAX_CAPACITY, MONITOR_KINDS, SAVE_VERSION, STATS
from gradviz_nb.probes.monitor.core import GradientMonitor
from gradviz_nb.probes.monitor.gather import REPLICA_RTOL
from gradviz_nb.probes.monitor.verdicts import MonitorThresholds

__all__ = ["MAX_CAPACITY", "MONITOR_KINDS", "REPLICA_RTOL", "SAVE_VERSION", "STATS", "GradientMonitor",
           "MonitorThresholds"]

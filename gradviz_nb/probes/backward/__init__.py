"""The backward family: ``gv.record_backward``, its statistics, the armed pass and breakpoints.

- :mod:`.recording`: :func:`record_backward` and :class:`BackwardRecording` (hooks on every node, steps in the
  engine's order, deliveries into leaves).
- :mod:`.stats`: :class:`GradStats`, a gradient's statistics read once after the pass.
- :mod:`.armed`: ``until="nonfinite"``, one cheap check per gradient, a full record only when it fires.
- :mod:`.breakpoints`: ``rec.find(...)``, the stepper's rules (mirrored by the page).

Other families import the names below, never a module's private names.
"""

from gradviz_nb.probes.backward.armed import UNTIL
from gradviz_nb.probes.backward.breakpoints import RULES, Stop
from gradviz_nb.probes.backward.recording import BackwardRecording, as_list, record_backward
from gradviz_nb.probes.backward.stats import GradStats, reductions
from gradviz_nb.probes.backward.steps import Delivery, Step
from gradviz_nb.tracing.summary import SMALL

__all__ = ["RULES", "SMALL", "UNTIL", "BackwardRecording", "Delivery", "GradStats", "Step", "Stop", "as_list",
           "record_backward", "reductions"]

"""The causes family: why a parameter's gradient is missing, zero, tiny or scaled (read by ``gv.why``).

- :mod:`.walk`: from the parameter towards the loss, the first cut or zero with its op, line and module.
- :mod:`.zeros`: where the recorded backward lost a zero or shrunk gradient (the node or edge, and the
  factor), and zeros that are expected (a factor on every path is exactly zero).
- :mod:`.no_grad`: parameters used under ``no_grad``, in an inactive adapter, or in a module never called.

Other families import the names below, never a module's private names.
"""

from gradviz_nb.probes.causes.no_grad import adapter_switch_reasons, module_seen, no_grad_reason
from gradviz_nb.probes.causes.walk import (
    CUT_KINDS,
    TINY,
    Cause,
    cut_cause,
    events_from_ghosts,
    explain,
    first_cut,
    grad_status,
    lost_cause,
)
from gradviz_nb.probes.causes.zeros import Lost, expected_zero, where_lost

__all__ = ["CUT_KINDS", "TINY", "Cause", "Lost", "adapter_switch_reasons", "cut_cause", "events_from_ghosts",
           "expected_zero", "explain", "first_cut", "grad_status", "lost_cause", "module_seen", "no_grad_reason",
           "where_lost"]

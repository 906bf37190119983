"""The causes family: why a parameter's gradient is missing, zero, tiny or scaled (read by ``gv.why``).

- :mod:`.cause`: the answer (:class:`Cause`) and the wording the others share.
- :mod:`.walk`: from the parameter towards the loss, the first cut or zero with its op, line and module.
- :mod:`.lost`: the cause of a zero or shrunk gradient where the recorded backward lost it.
- :mod:`.zeros`: where the recorded backward lost a zero or shrunk gradient (the node or edge, and the
  factor), and zeros that are expected (a factor on every path is exactly zero).
- :mod:`.factors`: what a node that sent zero multiplied by, read from the tensors it saved (a parameter that is
  exactly zero, or another node's all-zero output).
- :mod:`.no_grad`: parameters used under ``no_grad``, in an inactive adapter, or in a module never called.

Other families import the names below, never a module's private names.
"""

from gradviz_nb.probes.causes.cause import Cause
from gradviz_nb.probes.causes.factors import ZeroFactor, zero_factors
from gradviz_nb.probes.causes.lost import lost_cause
from gradviz_nb.probes.causes.no_grad import adapter_switch_reasons, module_seen, no_grad_reason
from gradviz_nb.probes.causes.walk import (
    CUT_KINDS,
    TINY,
    cut_cause,
    events_from_ghosts,
    explain,
    first_cut,
    grad_status,
)
from gradviz_nb.probes.causes.zeros import Lost, expected_zero, where_lost, zero_maker, zero_param_upstream

__all__ = ["CUT_KINDS", "TINY", "Cause", "Lost", "ZeroFactor", "adapter_switch_reasons", "cut_cause",
           "events_from_ghosts", "expected_zero", "explain", "first_cut", "grad_status", "lost_cause", "module_seen",
           "no_grad_reason", "where_lost", "zero_factors", "zero_maker", "zero_param_upstream"]

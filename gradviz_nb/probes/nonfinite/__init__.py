"""The non-finite family: ``gv.find_nonfinite``, where the NaN/Inf that mattered was born.

- :mod:`.find`: :func:`find_nonfinite`, run in the sandbox.
- :mod:`.watch`: the dispatch mode that checks every op, forward and backward, and its wrappers;
  :func:`name_by` gives a running search the names of a model its ``fn`` built (``gradviz nan``).
- :mod:`.found`: the answer (:class:`NonFinite`, its sites and inputs) and how a birth is classified.
- :mod:`.origin`: :func:`forward_origin`, the same answer for a loss already NaN/Inf, read from the tensors its
  graph saved (``gv.record_backward``'s stop names it).

Other families import the names below, never a module's private names.
"""

from gradviz_nb.probes.nonfinite.find import CAUSES, InputInfo, NonFinite, Site, find_nonfinite
from gradviz_nb.probes.nonfinite.origin import forward_origin
from gradviz_nb.probes.nonfinite.watch import BareDispatchMode, name_by

__all__ = ["CAUSES", "BareDispatchMode", "InputInfo", "NonFinite", "Site", "find_nonfinite", "forward_origin",
           "name_by"]

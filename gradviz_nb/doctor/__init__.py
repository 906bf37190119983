"""``gv.doctor``: run the user's own training step under observation and name the classic bugs.

The step runs for real, ``steps`` times in a row (stale gradients only show on the second), watched by
``gv.capture`` (module calls, detaches, in-place writes) and by a wrapper around
``torch.autograd.backward`` (the loss's graph, ``.grad`` before and after). The findings come from
:mod:`gradviz_nb.doctor.checks`, each naming what was observed. Afterwards everything the steps changed
is put back (:class:`~gradviz_nb.doctor.state.TrainingState`), also when the step raises.
"""

from gradviz_nb.doctor.assert_trains import assert_trains
from gradviz_nb.doctor.findings import Diagnosis, Finding
from gradviz_nb.doctor.run import doctor

__all__ = ["Diagnosis", "Finding", "assert_trains", "doctor"]

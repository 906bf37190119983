"""The re-run family: what-if and the checkpointing what-if verified by re-running the user's code.

- :mod:`.whatif`: :class:`Rerunnable`, a forward and backward re-run with detaches and freezes applied.
- :mod:`.checkpoint`: :func:`verify_checkpoint`, the same re-run with ``torch.utils.checkpoint`` applied.

Both run inside the sandbox (:mod:`gradviz_nb.probes.sandbox`). Other families import the names below,
never a module's private names.
"""

from gradviz_nb.probes.rerun.checkpoint import verify_checkpoint
from gradviz_nb.probes.rerun.whatif import Rerunnable

__all__ = ["Rerunnable", "verify_checkpoint"]

"""Training-framework integrations, each an optional extra imported only when asked for.

``import gradviz_nb`` never imports transformers, lightning or tensorboard: the names below are resolved on
first access (PEP 562), and a missing package raises a :class:`gv.GradvizError` naming the extra to install.

- :class:`GradvizCallback` (``gradviz_nb.integrations.transformers``, extra ``hf``): a
  ``transformers.TrainerCallback`` (TRL trainers subclass ``Trainer``, so it works there too).
- :class:`GradvizLightningCallback` (``gradviz_nb.integrations.lightning``, extra ``lightning``).
- :func:`write_tensorboard` / :class:`TensorBoardLog` (``gradviz_nb.integrations.tensorboard``, extra
  ``tensorboard``); also ``GradientMonitor.to_tensorboard``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["GradvizCallback", "GradvizLightningCallback", "TensorBoardLog", "write_tensorboard"]

_WHERE = {
    "GradvizCallback": ("gradviz_nb.integrations.transformers", "GradvizCallback"),
    "GradvizLightningCallback": ("gradviz_nb.integrations.lightning", "GradvizCallback"),
    "TensorBoardLog": ("gradviz_nb.integrations.tensorboard", "TensorBoardLog"),
    "write_tensorboard": ("gradviz_nb.integrations.tensorboard", "write_tensorboard"),
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'gradviz_nb.integrations' has no attribute {name!r}")
    module, attr = _WHERE[name]
    return getattr(importlib.import_module(module), attr)

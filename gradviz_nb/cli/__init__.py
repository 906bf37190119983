"""The ``gradviz`` command (:mod:`gradviz_nb.cli.main`): gradviz_nb over an unmodified training script."""

from gradviz_nb.cli.main import main

__all__ = ["main"]

"""Running the user's unmodified training script, and stopping it when the command has what it needs.

The script runs in this process (``runpy``, with ``sys.argv`` and ``sys.path[0]`` as ``python train.py args``
would set them). Its own errors pass through: the traceback printed is the script's (the command's frames
left out) and the exit code is what Python would give. :class:`StopScript` (a ``BaseException``, so a
script's ``except Exception`` does not swallow it) ends the script early once the command has its answer.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from dataclasses import dataclass
from types import TracebackType

from gradviz_nb.errors import GradvizError

__all__ = ["Outcome", "StopScript", "rank", "run_script"]


class StopScript(BaseException):
    """Raised from inside the script (after an optimizer step) to end it: the command has its answer."""


@dataclass
class Outcome:
    """How the script ended: ``stopped`` by the command, ``finished``, or with the script's ``exit_code``
    (its ``SystemExit`` or 1 for an uncaught error, already printed)."""

    stopped: bool = False
    finished: bool = False
    exit_code: int = 0


def rank() -> int:
    """This process's rank under torchrun (0 when not distributed)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _script_traceback(tb: TracebackType | None, path: str) -> TracebackType | None:
    """The traceback from the script's own first frame on (runpy's and the command's frames dropped)."""
    t = tb
    while t is not None and os.path.abspath(t.tb_frame.f_code.co_filename) != path:
        t = t.tb_next
    return t if t is not None else tb


def run_script(script: str, args: list[str]) -> Outcome:
    """Run ``script`` as ``__main__`` with ``args``; see the module docstring."""
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        raise GradvizError(f"no such script: {script!r}. Give the training script's path: gradviz doctor train.py")
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else ""
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        runpy.run_path(path, run_name="__main__")
    except StopScript:
        return Outcome(stopped=True)
    except SystemExit as done:
        code = done.code
        if code is None or isinstance(code, int):
            return Outcome(finished=True, exit_code=int(code or 0))
        print(code, file=sys.stderr)
        return Outcome(finished=True, exit_code=1)
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # the script's own error: printed as Python would print it
        traceback.print_exception(type(err), err, _script_traceback(err.__traceback__, path), file=sys.stderr)
        return Outcome(finished=True, exit_code=1)
    finally:
        sys.argv = saved_argv
        if sys.path and sys.path[0] == os.path.dirname(path):
            sys.path.pop(0)
        elif saved_path0 and saved_path0 not in sys.path:
            sys.path.insert(0, saved_path0)
    return Outcome(finished=True)

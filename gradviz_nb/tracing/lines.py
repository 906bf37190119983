"""Where in the user's code an op ran: the one rule both ``gv.find_nonfinite`` and the capture follow.

:func:`op_line` is the ``file:line`` of the innermost frame outside torch and gradviz_nb's library layers
(the bug zoo, the demo models, the benchmarks and the command line count as user code: a model's forward is
written there). ``gv.find_nonfinite``'s watch calls it at every op; the capture's torch function mode keeps
it for every op that made an autograd node (:class:`OpLines`), so a recording of a loss that is already
NaN/Inf names the same line ``find_nonfinite`` names, without running anything again.

Cost: one frame walk per node-making op, each frame's verdict cached by its code object (a few frames:
``nn.Linear.forward`` and ``Module._call_impl`` lie between an op and the line that called the module).
"""

from __future__ import annotations

import bisect
import os
import sys
from types import CodeType, FrameType
from typing import Any

import torch

from gradviz_nb.tracing.places import source_line

__all__ = ["LIBRARY_DIRS", "OpLines", "op_line"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the gradviz_nb package
LIBRARY_DIRS = (os.path.dirname(torch.__file__) + os.sep, "<frozen ",
                *(os.path.join(_PACKAGE, d) + os.sep
                  for d in ("analysis", "probes", "tracing", "doctor", "widgets", "export", "integrations")))
"""Path prefixes of library code between an op and the user's line."""


def _innermost_user_frame(cache: dict[CodeType, bool]) -> tuple[CodeType, int] | None:
    frame: Any = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        lib = cache.get(code)
        if lib is None:
            lib = cache[code] = code.co_filename.startswith(LIBRARY_DIRS)
        if not lib:
            return code, frame.f_lineno
        frame = frame.f_back
    return None


def op_line(cache: dict[CodeType, bool]) -> str:
    """Where the innermost frame of user code around the caller is (``train.py:13`` or ``cell [3], line 13``,
    :func:`~gradviz_nb.tracing.places.source_line`; "" when there is none); ``cache``
    keeps each code object's verdict (library or not) across calls."""
    found = _innermost_user_frame(cache)
    return source_line(found[0].co_filename, found[1]) if found is not None else ""


class OpLines:
    """The user's line of every op that made autograd nodes, by the nodes' sequence numbers.

    :meth:`note` is called by a torch function mode's handler after each op, with the counter's values before
    and after it (the walk starts at the handler's caller); :meth:`line_at` answers
    for a node's sequence number. Lines are kept as code objects and numbers, and worded only when asked."""

    def __init__(self) -> None:
        # (first, end, code, line) per op that made the nodes numbered first .. end - 1, in order
        self._ops: list[tuple[int, int, CodeType | None, int]] = []
        self._cache: dict[CodeType, bool] = {}

    def note(self, before: int, after: int) -> None:
        """An op made the nodes numbered ``before`` .. ``after - 1`` (nothing when ``after == before``)."""
        if after <= before or (self._ops and before < self._ops[-1][1]):  # nothing made, or out of order
            return
        # The hot path of every captured op: the walk inlined, from the caller of the mode's handler that calls this.
        cache = self._cache
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            lib = cache.get(code)
            if lib is None:
                lib = cache[code] = code.co_filename.startswith(LIBRARY_DIRS)
            if not lib:
                self._ops.append((before, after, code, frame.f_lineno))
                return
            frame = frame.f_back
        self._ops.append((before, after, None, 0))

    def line_at(self, seq: int) -> str:
        """Where the op that made the node numbered ``seq`` was called, as :func:`op_line` words it ("" when no
        noted op made it)."""
        i = bisect.bisect_right(self._ops, seq, key=lambda op: op[0]) - 1
        if i < 0 or seq >= self._ops[i][1]:
            return ""
        code, line = self._ops[i][2], self._ops[i][3]
        return source_line(code.co_filename, line) if code is not None else ""

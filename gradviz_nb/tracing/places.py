"""Where the user's code is, in the user's words: ``cell [3], line 13`` for a notebook cell, a path relative
to the working directory for a file under it, the file's own path otherwise.

IPython (and ipykernel) compile each cell into a file named after a hash of its code (for example
``/tmp/ipykernel_21035/2955437752.py``): a path the user never saw. The shell's compiler keeps the execution
count of each such file (``get_ipython().compile.format_code_name``, what IPython's own tracebacks print as
``Cell In[3], line 13``); :func:`source_line` reads it when IPython is already imported (it never imports it).
Every source location in evidence, findings, flags and answers is written by :func:`source_line`, and read
back by :func:`split_line`.
"""

from __future__ import annotations

import os
import re
import sys

__all__ = ["cell_number", "source_file", "source_line", "split_line"]

_IN = re.compile(r"In\s*\[\s*(\d+)\s*\]")
_OLD_INPUT = re.compile(r"^<ipython-input-(\d+)-[0-9a-f]+>$")  # IPython < 8 named cells this way
_KERNEL_TEMP = re.compile(r"(^|[/\\])ipykernel_\d+[/\\]\d+\.py$")
_CELL = re.compile(r"^cell \[(\d+|\?)\], line (\d+)$")
_FILE = re.compile(r"^(.+):(\d+)$")


def cell_number(filename: str) -> int | None:
    """The execution count of the notebook cell compiled as ``filename``, or ``None`` when it is no cell
    this kernel ran (or IPython is not running)."""
    old = _OLD_INPUT.match(filename)
    if old:
        return int(old.group(1))
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    shell = get() if callable(get) else None
    compiler = getattr(shell, "compile", None)
    if compiler is None:
        return None
    name = None
    fmt = getattr(compiler, "format_code_name", None)
    if callable(fmt):
        try:
            name = fmt(filename)
        except Exception:  # a third-party compiler: no number rather than an error
            name = None
    if isinstance(name, tuple) and len(name) == 2:
        found = _IN.search(str(name[1]))
        if found:
            return int(found.group(1))
    number = getattr(compiler, "_filename_map", {}).get(filename)  # IPython's own map, if format changed
    return number if isinstance(number, int) else None


def source_file(filename: str) -> str:
    """``cell [3]`` for a notebook cell, ``train.py`` (relative to the working directory) for a file under
    it, the path as given otherwise."""
    number = cell_number(filename)
    if number is not None:
        return f"cell [{number}]"
    if _KERNEL_TEMP.search(filename):
        return "cell [?]"  # a kernel's cell whose number this kernel no longer knows: never its temp path
    if os.path.isabs(filename):
        try:
            rel = os.path.relpath(filename)
        except ValueError:  # another drive (Windows)
            return filename
        return filename if rel.startswith(os.pardir) else rel
    return filename


def source_line(filename: str, lineno: int) -> str:
    """One source location as the user reads it: ``cell [3], line 13`` or ``train.py:13``."""
    place = source_file(filename)
    return f"{place}, line {lineno}" if place.startswith("cell [") else f"{place}:{lineno}"


def split_line(text: str) -> tuple[str, int] | None:
    """``(source_file, line)`` of a location :func:`source_line` wrote, or ``None``."""
    cell = _CELL.match(text)
    if cell:
        return f"cell [{cell.group(1)}]", int(cell.group(2))
    found = _FILE.match(text)
    return (found.group(1), int(found.group(2))) if found else None

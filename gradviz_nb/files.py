"""Writing a file safely, in one place: check the path first, write a temp file beside it, then rename.

Every writer of gradviz_nb (``save_html``/``export_html``, ``save_png``, ``save_svg``, ``to_graphml``,
``GradientMonitor.save``) goes through :func:`target` and :func:`write_atomic`:

- :func:`target` checks the path before anything is rendered: a string or ``os.PathLike``, an existing
  directory to hold it, not itself a directory, and a suffix of the format written. It raises
  :class:`GradvizError` naming the argument and what it accepts.
- :func:`write_atomic` writes the content to a temp file in the target's directory and ``os.replace``-s it
  over the target, so a reader sees the old file or the new one, never a truncated one. If producing the
  content fails midway (a rendering error, a full disk), the temp file is removed and an existing file is
  left exactly as it was.

Reading goes the other way round, in :func:`load_torch`: a file ``torch.save`` wrote is checked to be what
it claims (a zip archive of stored, uncompressed records no larger than the file) before ``torch.load``
(``weights_only``) reads it. ``torch.load`` allocates the records' bytes (so no more than the file holds) and
builds each tensor as a view on them, with the shape and strides the file declares: a tensor declaring more
elements than its bytes hold (an expanded zero tensor of 30M rows takes 4 bytes in the file) is refused
before any reader makes a copy of it, and so is a file larger than :data:`LOAD_CAP_BYTES`. Any failure is
one :class:`GradvizError`.

Example::

    out = target("path", path, (".png",), "save_png")      # before the browser starts
    data = render()                                          # may raise: nothing written yet
    write_atomic(out, data)
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import stat
import zipfile
from collections.abc import Callable, Sequence
from typing import IO, Any

from gradviz_nb.errors import GradvizError

__all__ = ["load_torch", "target", "write_atomic"]

Content = bytes | str | Callable[[IO[bytes]], None]
"""What :func:`write_atomic` writes: bytes, text (UTF-8), or a function writing to a binary file object."""


def _shown(path: object) -> str:
    text = repr(os.fspath(path)) if isinstance(path, str | os.PathLike) else repr(path)
    return text if len(text) <= 120 else text[:117] + "..."


def target(name: str, path: object, suffixes: Sequence[str], who: str) -> pathlib.Path:
    """``path`` checked for writing one file of a format whose names end in one of ``suffixes``.

    ``name`` is the argument's name and ``who`` the function's, both used in the message. Nothing is created
    or opened: this runs before any rendering, so a bad path costs nothing and changes nothing.
    """
    accepted = " or ".join(repr(s) for s in suffixes)
    want = f"a file path ending in {accepted}, in an existing directory"
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        raise GradvizError(f"{who}: {name} must be {want}; got {_shown(path)} ({type(path).__name__}).")
    raw = os.fspath(path)
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        raise GradvizError(f"{who}: {name} must be {want}; got {_shown(path)}.")
    out = pathlib.Path(raw).expanduser()
    if out.is_dir():
        raise GradvizError(f"{who}: {name} {_shown(raw)} is a directory; {name} must be {want}, "
                           f"e.g. {str(out / ('out' + suffixes[0]))!r}.")
    if out.suffix.lower() not in {s.lower() for s in suffixes}:
        raise GradvizError(f"{who}: {name} must be {want}; {_shown(raw)} ends in "
                           f"{out.suffix or '(no suffix)'!r}.")
    parent = out.parent
    if not parent.exists():
        raise GradvizError(f"{who}: {name} {_shown(raw)}: the directory {str(parent)!r} does not exist; "
                           f"create it first (pathlib.Path({str(parent)!r}).mkdir(parents=True)).")
    if not parent.is_dir():
        raise GradvizError(f"{who}: {name} {_shown(raw)}: {str(parent)!r} is a file, not a directory; "
                           f"{name} must be {want}.")
    return out


def write_atomic(path: pathlib.Path, content: Content, who: str) -> pathlib.Path:
    """Write ``content`` to ``path`` through a temp file in the same directory and ``os.replace``.

    ``path`` should come from :func:`target`. A symlink is written through (the link stays, its target
    changes). The new file gets the old file's permission bits, or the usual ones (0o666 less the umask).
    Any failure (``content`` raising, an ``OSError``) removes the temp file and leaves ``path`` untouched;
    an ``OSError`` is raised as :class:`GradvizError`. Returns ``path``.
    """
    final = pathlib.Path(os.path.realpath(path)) if path.is_symlink() else path
    tmp = final.parent / f".{final.name}.{secrets.token_hex(6)}.tmp"
    try:
        # os.open with 0o666 lets the umask decide the bits, as a plain open(path, "w") would
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as err:
        raise GradvizError(f"{who}: cannot write in {str(final.parent)!r}: {err.strerror or err}. "
                           "Choose a directory you can write to.") from err
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(content, bytes):
                f.write(content)
            elif isinstance(content, str):
                f.write(content.encode("utf-8"))
            else:
                content(f)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            if final.exists():
                os.chmod(tmp, stat.S_IMODE(final.stat().st_mode))
        os.replace(tmp, final)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise GradvizError(f"{who}: writing {str(final)!r} failed ({err.strerror or err}); "
                               "nothing was changed.") from err
        raise
    return path


LOAD_CAP_BYTES = 2 * 1024**3
"""The largest file :func:`load_torch` reads (2 GiB): a monitor history of a million steps of 1,000 layers
takes a few hundred MB."""


def _dense_tensors(obj: Any, not_it: str, depth: int = 0) -> None:
    """Every tensor in ``obj`` (dicts, lists, tuples) holds the bytes of every element it declares."""
    import torch

    if depth > 32:
        raise GradvizError(f"{not_it} (nested deeper than 32 levels).")
    if isinstance(obj, torch.Tensor):
        declared = obj.numel() * obj.element_size()
        held = obj.untyped_storage().nbytes() if obj.layout == torch.strided else -1
        if held < declared:
            raise GradvizError(f"{not_it} (a tensor of shape {list(obj.shape)[:6]} declares {declared:,} bytes "
                               f"but the file holds {max(held, 0):,} for it).")
    elif isinstance(obj, dict):
        for v in obj.values():
            _dense_tensors(v, not_it, depth + 1)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _dense_tensors(v, not_it, depth + 1)


def load_torch(path: object, who: str, what: str) -> Any:
    """What ``torch.save`` wrote to ``path``, read with ``torch.load(weights_only=True)`` after checking the file.

    The archive must be a zip of stored records (what ``torch.save`` writes) whose sizes add up to no more
    than the file's own size: a compressed or legacy-format file, whose records could unpack to far more
    memory than the file takes, is refused before anything is read. Every failure, a missing file included,
    is one :class:`GradvizError` saying that ``path`` is not ``what`` (e.g. "a GradientMonitor.save file").
    """
    import torch

    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise GradvizError(f"{who}: path must be the path of {what}; got {_shown(path)} ({type(path).__name__}).")
    file = pathlib.Path(os.fspath(path)).expanduser()
    if not file.is_file():
        state = "is a directory" if file.is_dir() else "does not exist"
        raise GradvizError(f"{who}: {str(file)!r} {state}; path must be the path of {what}.")
    not_it = f"{who}: {str(file)!r} is not {what}"
    try:
        size = file.stat().st_size
        if size > LOAD_CAP_BYTES:
            raise GradvizError(f"{not_it} ({size:,} bytes, more than the {LOAD_CAP_BYTES:,} this reader takes).")
        with zipfile.ZipFile(file) as archive:
            records = archive.infolist()
        if any(r.compress_type != zipfile.ZIP_STORED for r in records) or \
                sum(r.file_size for r in records) > size:
            raise GradvizError(f"{not_it} (its records are compressed or larger than the file).")
        data = torch.load(file, weights_only=True, map_location="cpu")
        _dense_tensors(data, not_it)  # views only so far: nothing was allocated by a declared shape
        return data
    except GradvizError:
        raise
    except Exception as err:  # a foreign file can fail anywhere in the readers: zip, pickle, storage
        raise GradvizError(f"{not_it} ({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''})."
                           ) from err

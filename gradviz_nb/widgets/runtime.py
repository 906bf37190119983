"""The canvas code once per notebook: one hidden ``GradvizRuntime`` model per kernel, referenced by every
``GraphWidget``.

Why
---
anywidget syncs a widget's ``_esm`` as a trait, so a saved notebook (its widget state: nbclient
``store_widget_state=True``, JupyterLab's "save widget state") holds the whole module once per widget.
The canvas (``gradviz_nb/static/widget.js``: Cytoscape.js, the layered layout, the features) is 0.67 MB, so four
graphs made a 9 MB notebook. Now:

- ``GraphWidget._esm`` is ``static/loader.js`` (2 kB, ``js/src/loader.ts``);
- one ``GradvizRuntime`` per kernel holds ``widget.js`` gzip-compressed and base64-encoded (0.3 MB);
  it is a plain ipywidgets model (``@jupyter-widgets/base`` ``WidgetModel``, no view), so every widget
  manager knows it: JupyterLab, Notebook 7, nbconvert's html manager, marimo;
- each ``GraphWidget``'s ``_runtime`` trait references it (``"IPY_MODEL_<id>"``, ipywidgets'
  ``widget_serialization``); the loader finds it with ``model.widget_manager.get_model(id)``, decodes
  it with the browser's ``DecompressionStream``, imports it once per page from a Blob URL and keeps it
  on ``globalThis`` (keyed by :attr:`GradvizRuntime.digest`), then hands ``render`` to it.

Saved widget state holds every live model (nbclient: every model the kernel opened; JupyterLab:
``get_state_sync`` of every model with a live comm), so the runtime is saved exactly once, and a notebook
reopened without a kernel restores it with the widgets that reference it.

Hot reload: with ``ANYWIDGET_HMR=1`` (``CONTRIBUTING.md``, "Front-end watch loop") each widget carries
the whole ``widget.js`` as its ``_esm`` again, the file anywidget watches, and no runtime is made: the
watch loop works as before, and a notebook saved in that mode is big.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import os
import pathlib
from typing import Any

import ipywidgets
import traitlets

STATIC = pathlib.Path(__file__).parent.parent / "static"
BUNDLE = STATIC / "widget.js"
"""The canvas: exported pages embed it, the runtime model carries it."""
LOADER = STATIC / "loader.js"
"""Each widget's ``_esm`` (built from ``js/src/loader.ts``)."""
ENCODING = "gzip+base64"


def hot_reload() -> bool:
    """True when anywidget's hot reload is on (``ANYWIDGET_HMR=1``): widgets then carry the full bundle."""
    return os.environ.get("ANYWIDGET_HMR") == "1"


def widget_esm() -> pathlib.Path:
    """What ``GraphWidget._esm`` names: the loader, or with hot reload the bundle itself (watched)."""
    return BUNDLE if hot_reload() else LOADER


@functools.cache
def _encoded(path: pathlib.Path, mtime_ns: int, size: int) -> tuple[str, str]:
    data = path.read_bytes()
    # mtime=0: the same bundle gives the same bytes, so re-saved notebooks do not change for nothing.
    packed = base64.b64encode(gzip.compress(data, compresslevel=9, mtime=0)).decode("ascii")
    return packed, hashlib.sha256(data).hexdigest()[:16]


def encoded_bundle(path: pathlib.Path = BUNDLE) -> tuple[str, str]:
    """``(code, digest)``: the bundle gzip-compressed and base64-encoded, and the first 16 hex digits of
    its SHA-256. Computed once per bundle version (about 0.1 s for 2.2 MB)."""
    stat = path.stat()
    return _encoded(path, stat.st_mtime_ns, stat.st_size)


class GradvizRuntime(ipywidgets.Widget):  # type: ignore[misc]
    """The canvas code for every ``GraphWidget`` of a kernel: a model without a view (see the module
    docstring). Use :func:`shared_runtime`, not the constructor."""

    code = traitlets.Unicode("").tag(sync=True)
    """str: ``widget.js``, encoded as :attr:`encoding` says."""

    encoding = traitlets.Unicode(ENCODING).tag(sync=True)
    """str: ``"gzip+base64"`` (or ``"text"``: the JavaScript as it is)."""

    digest = traitlets.Unicode("").tag(sync=True)
    """str: SHA-256 of the bundle (16 hex digits); the page keeps one decoded module per digest."""

    def __init__(self, **kwargs: Any) -> None:
        code, digest = encoded_bundle()
        super().__init__(code=code, digest=digest, **kwargs)

    def __repr__(self) -> str:
        return f"<GradvizRuntime {self.digest}: {len(self.code):,} characters of {self.encoding}>"


_runtime: GradvizRuntime | None = None


def _live(widget: ipywidgets.Widget) -> bool:
    comm = getattr(widget, "comm", None)
    return comm is not None and not getattr(comm, "_closed", False)


def shared_runtime() -> GradvizRuntime:
    """The kernel's runtime model, made on first use; a new one if it was closed (``Widget.close_all()``,
    or marimo closing the comms of a re-run cell) or the bundle changed on disk since."""
    global _runtime
    if _runtime is None or not _live(_runtime) or _runtime.digest != encoded_bundle()[1]:
        _runtime = GradvizRuntime()
    return _runtime


class RuntimeReference(traitlets.Instance[GradvizRuntime | None]):
    """``GraphWidget._runtime``: a widget reference (synced as ``"IPY_MODEL_<id>"``) whose default is
    :func:`shared_runtime`, made when the widget's state is first read; ``None`` with hot reload."""

    def __init__(self) -> None:
        # args=(): a default to make per instance (else traitlets stores None once for the class)
        super().__init__(GradvizRuntime, args=(), allow_none=True)
        self.tag(sync=True, **ipywidgets.widget_serialization)

    def make_dynamic_default(self) -> GradvizRuntime | None:
        return None if hot_reload() else shared_runtime()

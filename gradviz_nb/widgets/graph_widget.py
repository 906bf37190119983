"""``GraphWidget``: the autograd graph on an anywidget canvas, modules expandable by click."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import anywidget
import torch
import traitlets
from torch import nn

from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing import AutogradGraph, Capture, trace
from gradviz_nb.widgets.payload import initial_expanded, to_payload

_STATIC = pathlib.Path(__file__).parent.parent / "static"


class GraphWidget(anywidget.AnyWidget):
    """Interactive view of the autograd graph behind ``roots``.

    Displays when it is the last expression of a cell. Click a module box to expand it, its header
    to collapse it, a node to see its details.

    Example::

        with gv.capture(model) as cap:
            loss = criterion(model(x), y)
        gv.GraphWidget(loss, model=model, capture=cap)

    ``roots`` may also be an already traced :class:`AutogradGraph`.
    """

    _esm = _STATIC / "widget.js"

    graph_data = traitlets.Dict().tag(sync=True)
    """dict: the graph as plain JSON (``js/src/payload.ts``); the page draws only from traits."""

    expanded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """list[str]: ids of the module calls shown open (e.g. ``["blocks.0"]``); set it to open boxes."""

    selected = traitlets.Unicode("").tag(sync=True)
    """str: id of the node or module call the user clicked last (``""`` for none)."""

    height = traitlets.Int(600).tag(sync=True)
    """int: height of the canvas in pixels."""

    def __init__(
        self,
        roots: torch.Tensor | Sequence[torch.Tensor] | AutogradGraph,
        model: nn.Module | None = None,
        capture: Capture | None = None,
        names: Mapping[str, torch.Tensor] | None = None,
        height: int = 600,
        **kwargs: Any,
    ) -> None:
        if not _STATIC.joinpath("widget.js").exists():
            raise GradvizError(
                "the widget's front-end bundle is missing (gradviz_nb/static/widget.js): "
                "run `npm --prefix js ci && npm --prefix js run build` in the repository."
            )
        graph = roots if isinstance(roots, AutogradGraph) else trace(roots, model, capture, names)
        self.graph = graph
        """AutogradGraph: the traced graph this widget shows."""
        super().__init__(
            graph_data=to_payload(graph), expanded=initial_expanded(graph), height=height, **kwargs
        )

    def __repr__(self) -> str:
        return f"<GraphWidget: {self.graph!r}>"

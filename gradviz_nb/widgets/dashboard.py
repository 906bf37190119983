"""``gv.Dashboard``: the autograd graph above the gradient-flow charts, full width, selections linked.

Linking works through synced state on both sides, no custom messages:

* chart -> graph: a tap on a bar sets the Bokeh ``ColumnDataSource.selected.indices`` in the page;
  jupyter_bokeh's ``BokehModel`` syncs that change to the Python document, whose ``on_change``
  callback sets ``GraphWidget.selected`` to the layer's module call id (the page selects that box);
* graph -> chart: a click on a node sets ``GraphWidget.selected``; an observer maps it to the layers
  under that module and sets ``selected.indices``, which BokehModel patches into the page.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets
import torch
from torch import nn

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.flow import GradientFlow, gradient_flow, layer_histograms
from gradviz_nb.tracing import AutogradGraph, Capture
from gradviz_nb.validate import boolean, module, not_meta
from gradviz_nb.widgets.flow_charts import as_widget, chart_layers, flow_charts, layer_numbers
from gradviz_nb.widgets.graph_widget import GraphWidget
from gradviz_nb.widgets.page.traits import convert_trait
from gradviz_nb.widgets.page.why import PARAM_PREFIX, unreached

__all__ = ["Dashboard"]


class Dashboard(ipywidgets.VBox):  # type: ignore[misc]
    """Graph coloured by gradient norm (leaves without gradient marked) above per-layer charts.

    ``source`` is the loss (traced here), an :class:`AutogradGraph` or a :class:`GraphWidget`; run
    ``loss.backward()`` first: the statistics come from ``.grad`` (or ``grads``), which stay untouched.
    Click a bar to select its module in the graph; click a node in the graph to highlight its layers.

    Example::

        with gv.capture(model) as cap:
            loss = criterion(model(x), y)
        loss.backward()
        gv.Dashboard(model, loss, capture=cap)
    """

    def __init__(
        self,
        model: nn.Module,
        source: torch.Tensor | AutogradGraph | GraphWidget,
        *,
        capture: Capture | None = None,
        grads: Mapping[str, torch.Tensor | None] | None = None,
        histograms: bool = True,
        height: int = 600,
        **flow_options: Any,
    ) -> None:
        module("model", model)
        boolean("histograms", histograms)
        convert_trait("height", height, None)  # the graph's canvas height, checked as the trait checks it
        not_meta("gv.Dashboard", model)
        if isinstance(source, GraphWidget):
            graph_widget = source
        elif isinstance(source, (AutogradGraph, torch.Tensor)):
            graph_widget = GraphWidget(source, model=model, capture=capture, height=height)
        else:
            raise GradvizError(f"Dashboard needs a loss tensor, an AutogradGraph or a GraphWidget, "
                               f"got {type(source).__name__}.")
        self.graph: GraphWidget = graph_widget
        """GraphWidget: the graph, with :attr:`GraphWidget.overlay` set to gradient norms."""
        self.flow: GradientFlow = gradient_flow(model, grads, graph=graph_widget.graph, capture=capture,
                                                **flow_options)
        """GradientFlow: the statistics and flags shown."""
        self.graph.overlay = self.flow  # the validating trait draws it on the widget's graph
        hists = layer_histograms(model, scale=self.flow.grad_scale) if histograms else None
        layout, self.source = flow_charts(self.flow, hists)
        self.charts = as_widget(layout)
        """jupyter_bokeh BokehModel holding the charts."""
        self.layers: list[str] = [m.path for m in chart_layers(self.flow)]
        self.info = ipywidgets.HTML(self._info_html([]))
        self._syncing = False
        self.source.selected.on_change("indices", self._on_chart_select)
        self.graph.observe(self._on_graph_select, names="selected")
        # Graph on top at the cell's full width, charts below it stretching to the same width: measured at
        # 1000, 1400 and 1920 px, side by side left the graph (and its toolbar) under 450 px at 1400 px and
        # the charts too narrow for their layer names; stacked, both get the whole width.
        self.graph.layout = ipywidgets.Layout(width="100%")
        self.charts.layout = ipywidgets.Layout(width="100%")
        self.info.layout = ipywidgets.Layout(width="100%")
        super().__init__([self.graph, self.charts, self.info], layout=ipywidgets.Layout(width="100%"))

    # -- selection ----------------------------------------------------------------------------------
    def select(self, layer: str) -> None:
        """Select ``layer`` (a module path: a charted layer, or a module holding charted layers, such as a
        LoRA-wrapped projection flagged as a dead adapter) in the charts and its module in the graph."""
        under = [i for i, name in enumerate(self.layers) if name == layer or name.startswith(f"{layer}.")]
        if not under:
            raise GradvizError(f"no layer {layer!r} or under it; layers: {self.layers[:8]}...")
        self.source.selected.indices = under

    @property
    def selected_layers(self) -> list[str]:
        """The layers selected in the chart (their module paths)."""
        return [self.layers[i] for i in self.source.selected.indices]

    def graph_target(self, layer: str) -> str:
        """The graph id to select for ``layer``: its module call, else a leaf of it, else a parameter of it a cut
        left outside the graph (``"p:<name>"``: the page shows the cut and answers "Why?" for it), else an
        ancestor's call."""
        g = self.graph.graph
        calls: dict[str, str] = {c["path"]: c["id"] for c in reversed(g.calls)}  # first call of a path wins
        if layer in calls:
            return calls[layer]
        leaves = g.leaves()
        inside = [p for p in self.flow.params if p.module == layer or p.module.startswith(layer + ".")]
        for p in inside:
            if p.module == layer:
                for name in p.names:
                    if name in leaves:
                        return str(leaves[name])
        outside = set(unreached(g))
        for p in inside:
            for name in p.names:
                if name in outside:
                    return PARAM_PREFIX + name
        path = layer
        while path:
            path = path.rpartition(".")[0]
            if path in calls:
                return calls[path]
        return ""

    def layers_of(self, graph_id: str) -> list[str]:
        """Layers a graph selection stands for: a leaf's layer, or every layer under a node's module / call."""
        g = self.graph.graph
        if graph_id.startswith(PARAM_PREFIX):
            name = graph_id[len(PARAM_PREFIX):]
            return [x for x in self.layers if name.startswith(x + ".")][-1:]
        if graph_id in g.nx:
            attrs = g.nx.nodes[graph_id]
            if attrs["kind"] == "leaf":
                return [layer for layer in self.layers if any(n.rpartition(".")[0] == layer for n in attrs["names"])]
            path = attrs.get("module", "")
        else:
            path = next((c["path"] for c in g.calls if c["id"] == graph_id), None)
            if path is None:
                return []
        return [x for x in self.layers if path == "" or x == path or x.startswith(path + ".")] if path else []

    def _on_chart_select(self, attr: str, old: Sequence[int], new: Sequence[int]) -> None:
        self.info.value = self._info_html([self.layers[i] for i in new])
        if self._syncing or not new:
            return
        self._syncing = True
        try:
            self.graph.selected = self.graph_target(self.layers[new[0]])
        finally:
            self._syncing = False

    def _on_graph_select(self, change: dict[str, Any]) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            self.source.selected.indices = [self.layers.index(x) for x in self.layers_of(change["new"] or "")]
        finally:
            self._syncing = False

    def _info_html(self, layers: list[str]) -> str:
        # Names come from the user's model: escaped, never markup.
        if not layers:
            text = self.flow.summary()
        else:
            lines = []
            for layer in layers[:6]:
                m = self.flow.module(layer)
                lines.append(f"{layer or '(top level)'} ({m.type}): {layer_numbers(m)}, "
                             f"{m.n_with_grad}/{m.n_params} params with grad")
                lines += [f"  [{f.kind}] {f.target}: {f.reason}" for f in self.flow.flags_for(layer)]
            text = "\n".join(lines)
        return f"<pre style='white-space: pre-wrap; font-size: 11px; margin: 4px'>{html.escape(text)}</pre>"

    def __repr__(self) -> str:
        return f"<gv.Dashboard: {self.flow!r}>"

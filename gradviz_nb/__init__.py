"""gradviz_nb: see, click and question PyTorch's autograd graph in Jupyter.

Example::

    import gradviz_nb as gv
    with gv.capture(model) as cap:
        loss = criterion(model(x), y)
    gv.GraphWidget(loss, model=model, capture=cap)
"""

from gradviz_nb._version import __version__ as __version__
from gradviz_nb.analysis.diff import GraphDiff, diff
from gradviz_nb.analysis.memory import MemoryReport, memory_held
from gradviz_nb.doctor import Diagnosis, Finding, assert_trains, doctor
from gradviz_nb.doctor.why import why
from gradviz_nb.errors import GradvizError
from gradviz_nb.export.data import from_json, to_dot, to_graphml, to_json
from gradviz_nb.export.html import export_html
from gradviz_nb.probes.backward import BackwardRecording, record_backward
from gradviz_nb.probes.flow import gradient_flow
from gradviz_nb.probes.gradcheck import GradCheck, gradcheck
from gradviz_nb.probes.monitor import GradientMonitor
from gradviz_nb.probes.nonfinite import NonFinite, find_nonfinite
from gradviz_nb.tracing import AutogradGraph, Capture, capture, trace, unwatch, watch

__all__ = [
    "AutogradGraph",
    "BackwardRecording",
    "Capture",
    "Dashboard",
    "Diagnosis",
    "Finding",
    "GradCheck",
    "GradientMonitor",
    "GradvizError",
    "GraphDiff",
    "GraphWidget",
    "MemoryReport",
    "NonFinite",
    "assert_trains",
    "capture",
    "diff",
    "doctor",
    "export_html",
    "find_nonfinite",
    "from_json",
    "gradcheck",
    "gradient_flow",
    "memory_held",
    "record_backward",
    "to_dot",
    "to_graphml",
    "to_json",
    "trace",
    "unwatch",
    "watch",
    "why",
]


def __getattr__(name: str) -> object:
    # The widget pulls in anywidget/ipywidgets; import it only when asked so tracing stays light.
    if name == "GraphWidget":
        from gradviz_nb.widgets.graph_widget import GraphWidget

        return GraphWidget
    if name == "Dashboard":  # ipywidgets + Bokeh + jupyter_bokeh
        from gradviz_nb.widgets.dashboard import Dashboard

        return Dashboard
    raise AttributeError(f"module 'gradviz_nb' has no attribute {name!r}")

"""torch -> AutogradGraph. Knows torch; knows nothing of widgets."""

from gradviz_nb.tracing.capture import Capture, capture, unwatch, watch
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.tracing.trace import trace

__all__ = ["AutogradGraph", "Capture", "capture", "trace", "unwatch", "watch"]

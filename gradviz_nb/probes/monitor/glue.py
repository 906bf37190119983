"""What the monitor hands to others: live listeners (charts), the Bokeh chart, TensorBoard.

``chart`` and ``to_tensorboard`` are declared facades (``pyproject.toml`` ``[tool.importlinter]``): they
import the chart code and the optional TensorBoard writer lazily, on use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gradviz_nb.validate import function

if TYPE_CHECKING:
    from gradviz_nb.probes.monitor.core import GradientMonitor


class Listeners:
    """``listener(monitor)`` after records, at most every ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.calls: list[Callable[[GradientMonitor], None]] = []
        self.last = 0.0

    def add(self, listener: Callable[[GradientMonitor], None]) -> None:
        function("listener", listener, "lambda monitor: print(monitor.summary())")
        self.calls.append(listener)

    def due(self) -> bool:
        return bool(self.calls) and time.monotonic() - self.last >= self.interval

    def push(self, monitor: GradientMonitor) -> None:
        self.last = time.monotonic()
        for listener in list(self.calls):
            listener(monitor)


def chart(monitor: GradientMonitor, **kwargs: Any) -> Any:
    """The monitor's per-layer norms over steps as a Bokeh chart (``monitor.chart()``)."""
    from gradviz_nb.widgets.flow_charts import monitor_chart  # declared facade: charts sit above probes

    return monitor_chart(monitor, **kwargs)


def to_tensorboard(monitor: GradientMonitor, writer_or_logdir: Any, histograms: bool, live: bool) -> Any:
    """Write the monitor's per-layer statistics and verdicts to TensorBoard (``monitor.to_tensorboard(...)``; extra
    ``tensorboard``)."""
    from gradviz_nb.integrations.tensorboard import TensorBoardLog  # declared facade: optional extra, on use

    log = TensorBoardLog(monitor, writer_or_logdir, histograms=histograms, live=live)
    log.write()
    if not live:
        log.close()  # closes only a writer it made from a directory
    return log

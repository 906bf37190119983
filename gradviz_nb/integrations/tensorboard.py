"""A :class:`gv.GradientMonitor`'s history in TensorBoard (extra ``tensorboard``).

What is written, all at the training step each number belongs to:

- scalars ``gradviz/<stat>/<layer>`` for ``norm``, ``max_abs``, ``ratio`` and ``update`` (finite values
  only: a layer without a gradient on a record has no point there), exactly the monitor's numbers;
- scalars ``gradviz/flags/<kind>``: how many verdicts of that kind were raised at that step, and the verdicts
  themselves as text (``gradviz/flags``);
- histograms ``gradviz/log10_abs_grad/<layer>``: the distribution of ``log10 |g|`` over the layer's gradient
  elements (:func:`gv.probes.flow.layer_histograms`; exact zeros in the first bucket, at its lowest edge). They
  describe the gradients present when written, so they are written only while the model holds gradients: with
  ``live=True`` right after each record the monitor makes (at most every ``monitor.live_interval`` seconds).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradviz_nb.errors import GradvizError
from gradviz_nb.integrations._common import require

if TYPE_CHECKING:
    from gradviz_nb.probes.monitor import GradientMonitor

__all__ = ["TensorBoardLog", "write_tensorboard"]

SCALAR_STATS = ("norm", "max_abs", "ratio", "update")


class TensorBoardLog:
    """Writes a monitor's new records, verdicts and (while gradients exist) histograms to TensorBoard.

    ``writer_or_logdir``: a ``torch.utils.tensorboard.SummaryWriter`` (kept open: yours) or a directory (a
    writer is made there and closed by :meth:`close`). Each :meth:`write` adds only what is new since the last.

    Example::

        log = TensorBoardLog(monitor, "runs/exp1", live=True)   # writes after every record while training
        ...
        log.close()
    """

    def __init__(self, monitor: GradientMonitor, writer_or_logdir: Any, *, histograms: bool = True,
                 live: bool = False) -> None:
        if isinstance(writer_or_logdir, (str, Path)):
            tb = require("torch.utils.tensorboard", "tensorboard", "writing TensorBoard logs")
            self.writer = tb.SummaryWriter(log_dir=str(writer_or_logdir))
            self._owns = True
        elif hasattr(writer_or_logdir, "add_scalar") and hasattr(writer_or_logdir, "add_histogram_raw"):
            self.writer = writer_or_logdir
            self._owns = False
        else:
            raise GradvizError("writer_or_logdir must be a torch.utils.tensorboard.SummaryWriter or a directory, "
                               f"got {type(writer_or_logdir).__name__}.")
        self.monitor = monitor
        self.histograms = histograms
        self._written: set[tuple[str, int, int]] = set()
        self._written_flags: set[tuple[int, str, str, str]] = set()
        self._hist_steps: set[int] = set()
        if live:
            monitor.on_record(lambda _: self.write())

    def write(self) -> None:
        """Write what is new: records, verdicts, and histograms of the gradients the model holds now."""
        self._write_scalars()
        self._write_flags()
        if self.histograms:
            self._write_histograms()
        self.writer.flush()

    def _write_scalars(self) -> None:
        mon = self.monitor
        tables = {stat: mon.history(stat).tolist() for stat in SCALAR_STATS}
        for r, step in enumerate(mon.steps):
            for stat, rows in tables.items():
                for c, (layer, value) in enumerate(zip(mon.layers, rows[r], strict=True)):
                    # per point, not per record: a record's "update" is measured after the optimizer step,
                    # so it arrives one write later than the record's norms
                    if math.isfinite(value) and (stat, step, c) not in self._written:
                        self._written.add((stat, step, c))
                        self.writer.add_scalar(f"gradviz/{stat}/{_tag(layer)}", value, global_step=step)

    def _write_flags(self) -> None:
        new: dict[int, list[tuple[str, str, str]]] = {}
        for step, flag in self.monitor.flags():
            key = (step, flag.kind, flag.target, flag.reason)
            if key not in self._written_flags:
                self._written_flags.add(key)
                new.setdefault(step, []).append((flag.kind, flag.target, flag.reason))
        for step, flags in sorted(new.items()):
            kinds: dict[str, int] = {}
            for kind, _, _ in flags:
                kinds[kind] = kinds.get(kind, 0) + 1
            for kind, n in kinds.items():
                self.writer.add_scalar(f"gradviz/flags/{kind}", n, global_step=step)
            text = "\n\n".join(f"**{kind}** `{target or '(model)'}`: {reason}" for kind, target, reason in flags)
            self.writer.add_text("gradviz/flags", text, global_step=step)

    def _write_histograms(self) -> None:
        mon = self.monitor
        ref = mon._model_ref
        model = ref() if ref is not None else None
        step = mon.steps_seen
        if model is None or step in self._hist_steps:
            return
        params = [p for p in model.parameters() if p.requires_grad]
        if not any(p.grad is not None for p in params):
            return  # gradients already cleared: nothing true to show for this step
        from gradviz_nb.probes.flow import layer_histograms

        scale = mon.scale_used or 1.0  # a GradScaler's factor the gradients still carry
        edges, hists = layer_histograms(model, scale=scale)
        numel = _layer_numel(model)
        self._hist_steps.add(step)
        for layer, fractions in hists.items():
            n = numel.get(layer, 0)
            if n and any(fractions):
                self._add_histogram(f"gradviz/log10_abs_grad/{_tag(layer)}", edges, fractions, n, step)

    def _add_histogram(self, tag: str, edges: list[float], fractions: list[float], n: int, step: int) -> None:
        # Bucket i covers (limit[i-1], limit[i]]: the zeros bucket ends at the range's low edge, bin k at edges[k+1].
        counts = [f * n for f in fractions]
        width = edges[1] - edges[0]
        centers = [edges[0] - width / 2] + [(a + b) / 2 for a, b in itertools.pairwise(edges)]
        used = [i for i, c in enumerate(counts) if c > 0]
        low = edges[0] - width if used[0] == 0 else edges[used[0] - 1]
        self.writer.add_histogram_raw(
            tag, min=low, max=edges[used[-1]], num=sum(counts),
            sum=sum(c * x for c, x in zip(counts, centers, strict=True)),
            sum_squares=sum(c * x * x for c, x in zip(counts, centers, strict=True)),
            bucket_limits=list(edges), bucket_counts=counts, global_step=step)

    def close(self) -> None:
        """Write the last numbers (the last record's update ratio), flush; close the writer if this log made it
        (a writer you passed stays open)."""
        self._write_scalars()
        self._write_flags()
        self.writer.flush()
        if self._owns:
            self.writer.close()


def write_tensorboard(monitor: GradientMonitor, writer_or_logdir: Any, *, histograms: bool = True) -> TensorBoardLog:
    """Write ``monitor``'s per-layer statistics, verdicts and (if the model holds gradients now) per-layer
    histograms to TensorBoard; returns the :class:`TensorBoardLog` (call ``.write()`` again to add new records).

    Example::

        gv.integrations.write_tensorboard(monitor, "runs/exp1")   # or monitor.to_tensorboard("runs/exp1")
    """
    log = TensorBoardLog(monitor, writer_or_logdir, histograms=histograms)
    log.write()
    if log._owns:
        log.close()
    return log


def _tag(layer: str) -> str:
    return layer or "(top)"


def _layer_numel(model: Any) -> dict[str, int]:
    """Gradient elements per layer, as :func:`layer_histograms` groups them (each tensor once)."""
    out: dict[str, int] = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            layer = name.rpartition(".")[0]
            out[layer] = out.get(layer, 0) + p.numel()
    return out

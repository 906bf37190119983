"""``GradvizCallback`` for Lightning (``lightning.pytorch``; extra ``lightning``).

Lightning calls ``Callback.on_before_optimizer_step`` once per optimizer step, after the backward of the last
accumulated batch (and after a mixed-precision ``GradScaler`` unscaled the gradients) and before it clips them
(``precision._after_closure`` in Lightning 2.6): the moment the monitor wants. One record per optimizer step,
never per accumulated batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradviz_nb.integrations._common import (
    check_callback_args,
    inner_optimizer,
    last_record_numbers,
    require,
    total_grad_norm,
    unwrap_model,
)
from gradviz_nb.probes.flow import Flag, GradientFlow, gradient_flow
from gradviz_nb.probes.monitor import GradientMonitor, MonitorThresholds

_Callback: Any = require("lightning.pytorch", "lightning", "the Lightning GradvizCallback").Callback

__all__ = ["GradvizCallback"]

HISTORY_FILE = "gradviz_monitor.pt"


class GradvizCallback(_Callback):  # type: ignore[misc]  # lightning's Callback is untyped for mypy here
    """Record per-layer gradient statistics of a Lightning run, once per optimizer step, before clipping.

    Example::

        from gradviz_nb.integrations.lightning import GradvizCallback

        cb = GradvizCallback(every=10)
        L.Trainer(callbacks=[cb], accumulate_grad_batches=4).fit(module, data)
        print(cb.monitor.summary())   # also saved to <log_dir>/gradviz_monitor.pt on rank 0

    ``every``: record every ``every`` optimizer steps. ``flow_check``: run :func:`gv.gradient_flow` on the first
    recorded step (dead adapters, vanishing/exploding layers, parameters the optimizer misses; :meth:`flags`).
    ``save``: write the history to the trainer's ``log_dir`` (or ``default_root_dir``) at the end. ``log``: send
    ``gradviz/*`` numbers of each record to the trainer's loggers. ``tensorboard``: a directory (or True: under
    ``log_dir``) to write the monitor to live (extra ``tensorboard``). Other keyword arguments go to
    :class:`gv.GradientMonitor`. With several optimizers, the first one's steps are counted.
    """

    def __init__(self, every: int = 10, *, flow_check: bool = True, save: bool = True, log: bool = True,
                 tensorboard: bool | str | Path = False, thresholds: MonitorThresholds | None = None,
                 **monitor_kwargs: Any) -> None:
        every = check_callback_args(every, {"flow_check": flow_check, "save": save, "log": log}, tensorboard,
                                    thresholds, monitor_kwargs)
        self.every = every
        self.flow_check = flow_check
        self.save = save
        self.log = log
        self.tensorboard = tensorboard
        self.thresholds = thresholds
        self.monitor_kwargs = monitor_kwargs
        self.monitor: GradientMonitor | None = None
        """The run's monitor (made at ``on_train_start``)."""
        self.first_flow: GradientFlow | None = None
        """:func:`gv.gradient_flow` of the first recorded step's gradients."""
        self._model: nn.Module | None = None
        self._optimizers: list[torch.optim.Optimizer] = []
        self._scaler: Any = None
        self._tb: Any = None

    def on_train_start(self, trainer: Any, pl_module: nn.Module) -> None:
        """Start the monitor on the LightningModule (its optimizers and GradScaler), and a live TensorBoard
        writer when ``tensorboard`` is set."""
        self._model = unwrap_model(pl_module)
        self._optimizers = [o for o in map(inner_optimizer, trainer.optimizers) if o is not None]
        self._scaler = getattr(trainer.precision_plugin, "scaler", None)  # "16-mixed": gradients already unscaled
        self.monitor = GradientMonitor(self._model, every=self.every, optimizer=self._optimizers or None,
                                       scaler=self._scaler, thresholds=self.thresholds, **self.monitor_kwargs)
        if self.tensorboard:
            where = _out_dir(trainer) / "gradviz_tb" if self.tensorboard is True else Path(self.tensorboard)
            self._tb = self.monitor.to_tensorboard(where, live=True)

    def on_before_optimizer_step(self, trainer: Any, pl_module: nn.Module, optimizer: Any) -> None:
        """Count one training step (the first optimizer's), recorded every ``every`` steps: after unscaling,
        before clipping; the first recorded step's gradient flow, and the numbers to the trainer's loggers."""
        mon, model = self.monitor, self._model
        if mon is None or model is None:
            return
        if self._optimizers and inner_optimizer(optimizer) is not self._optimizers[0]:
            return  # several optimizers: one count per training step
        records = not mon.steps_seen % (mon.every * mon.stride)
        clip = trainer.gradient_clip_val
        by_norm = getattr(trainer.gradient_clip_algorithm, "value", trainer.gradient_clip_algorithm) in (None, "norm")
        total = total_grad_norm(model) if records and clip and by_norm else None  # None: Lightning's default, norm
        if total is not None:
            mon.step(grad_norm=total, max_norm=float(clip))
        else:
            mon.step()
        if not records:
            return
        if self.flow_check and self.first_flow is None:
            self.first_flow = gradient_flow(model, optimizer=self._optimizers[0] if self._optimizers else None)
        if self.log and trainer.loggers:
            numbers = last_record_numbers(mon, len(self.flags()))
            for logger in trainer.loggers:
                logger.log_metrics(numbers, step=trainer.global_step)

    def on_exception(self, trainer: Any, pl_module: nn.Module, exception: BaseException) -> None:
        """A failed ``fit`` (the model raised, or the user interrupted): ``on_train_end`` will not run, so the
        monitor's hooks are removed here (its history stays readable in :attr:`monitor`)."""
        self._release()

    def _release(self) -> None:
        if self.monitor is not None:
            self.monitor.close()
        if self._tb is not None:
            self._tb.write()
            self._tb.close()
            self._tb = None

    def on_train_end(self, trainer: Any, pl_module: nn.Module) -> None:
        """Close the monitor; write and close TensorBoard, save when ``save`` is set."""
        if self.monitor is None:
            return
        self._release()
        if self.save and trainer.is_global_zero:
            out = _out_dir(trainer)
            out.mkdir(parents=True, exist_ok=True)
            self.monitor.save(out / HISTORY_FILE)

    def flags(self) -> list[tuple[int, Flag]]:
        """The monitor's verdicts plus the first recorded step's gradient-flow flags, as ``(step, Flag)``."""
        out = list(self.monitor.flags()) if self.monitor is not None else []
        if self.first_flow is not None and self.monitor is not None and self.monitor.steps:
            out += [(self.monitor.steps[0], f) for f in self.first_flow.flags]
        return sorted(out, key=lambda e: e[0])


def _out_dir(trainer: Any) -> Path:
    return Path(trainer.log_dir or trainer.default_root_dir)

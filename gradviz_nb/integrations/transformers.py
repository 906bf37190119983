"""``GradvizCallback``: a :class:`gv.GradientMonitor` inside ``transformers.Trainer`` (and TRL's trainers, which
subclass it). Extra ``hf``.

Where it records (measured on transformers 5.23, ``Trainer._inner_training_loop``): on the micro-batch that ends
a gradient-accumulation cycle, the Trainer runs backward, then clips (``accelerator.clip_grad_norm_``), then calls
``on_pre_optimizer_step``, then ``optimizer.step()``. No callback event sits between backward and clipping, so
``on_pre_optimizer_step`` would see clipped gradients. The callback therefore records at the end of that last
backward itself: a post-accumulate-grad hook on the trainable parameters queues an autograd-engine callback, which
runs once the backward pass has finished, on the micro-batch for which accelerate's ``sync_gradients`` is True
(the Trainer sets it before each micro-batch). The norms are the pre-clip ones, one record per optimizer step.

A failed run. The Trainer has no exception event: when the model raises or the user interrupts, ``on_train_end``
never runs, and the hooks and the live monitor would stay on the model. The two calls a failure passes through
are looked up on the Trainer instance, so the callback puts a guard on both for its own Trainer (found on the
call stack at ``on_init_end`` and ``on_train_begin``): ``train`` (everything, from the next run on, or from
the first if the callback was given to the constructor) and ``training_step`` (forward and backward, where a
model error or an interrupt lands, from the current run on). Either guard, on an exception, removes the hooks
and closes the monitor (its history stays readable) before the exception goes on; ``on_train_end`` removes the
``training_step`` guard, so the instance ends as it began.

With reentrant activation checkpointing (``gradient_checkpointing_kwargs={"use_reentrant": True}``) gradients
arrive in nested backward passes, whose end is not the end of the step; the callback then records at
``on_pre_optimizer_step`` (after clipping) and says so in :attr:`GradvizCallback.notes`.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn

from gradviz_nb.errors import GradvizError
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

_TrainerCallback: Any = require("transformers", "hf", "GradvizCallback").TrainerCallback

__all__ = ["GradvizCallback"]

HISTORY_FILE = "gradviz_monitor.pt"


class GradvizCallback(_TrainerCallback):  # type: ignore[misc]  # transformers is untyped here
    """Record per-layer gradient statistics of a ``Trainer`` run, once per optimizer step, before clipping.

    Example::

        from gradviz_nb.integrations import GradvizCallback

        cb = GradvizCallback(every=10)
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[cb])
        trainer.train()
        print(cb.monitor.summary())   # also saved to <output_dir>/gradviz_monitor.pt: GradientMonitor.load(...)
        cb.flags()                    # monitor verdicts + the first recorded step's gradient-flow flags

    ``every``: record every ``every`` optimizer steps (the monitor counts optimizer steps, never micro-batches).
    ``flow_check``: on the first recorded step also run :func:`gv.gradient_flow` (dead adapters, vanishing and
    exploding layers, parameters the optimizer misses); its flags are in :attr:`first_flow` and :meth:`flags`.
    ``doctor``: before training, run :func:`gv.doctor` on one plain step (``model(**batch).loss.backward()``,
    ``optimizer.step()``) of the first training batch; everything is restored afterwards (:attr:`diagnosis`).
    ``save``: write the history to ``<output_dir>/gradviz_monitor.pt`` at each checkpoint and at the end
    (rank 0). ``log``: add ``gradviz/*`` numbers to the Trainer's log history. ``tensorboard``: True (under
    ``<output_dir>/gradviz_tb``) or a directory: write the monitor there live (extra ``tensorboard``).
    Other keyword arguments go to :class:`gv.GradientMonitor` (``capacity``, ``thresholds``, ...).
    """

    def __init__(self, every: int = 10, *, flow_check: bool = True, doctor: bool = False, save: bool = True,
                 log: bool = True, tensorboard: bool | str | Path = False,
                 thresholds: MonitorThresholds | None = None, **monitor_kwargs: Any) -> None:
        every = check_callback_args(every, {"flow_check": flow_check, "doctor": doctor, "save": save, "log": log},
                                    tensorboard, thresholds, monitor_kwargs)
        self.every = every
        self.flow_check = flow_check
        self.run_doctor = doctor
        self.save = save
        self.log = log
        self.tensorboard = tensorboard
        self.thresholds = thresholds
        self.monitor_kwargs = monitor_kwargs
        self.monitor: GradientMonitor | None = None
        """The run's monitor (made at ``on_train_begin``)."""
        self.first_flow: GradientFlow | None = None
        """:func:`gv.gradient_flow` of the first recorded step's gradients (``flow_check=True``)."""
        self.diagnosis: Any = None
        """The :class:`gv.Diagnosis` of ``doctor=True``."""
        self.notes: list[str] = []
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._scaler: Any = None
        self._max_norm = 0.0
        self._handles: list[Any] = []
        self._queued = False
        self._recorded = False  # the monitor has counted the current optimizer step
        self._at_backward_end = True
        self._tb: Any = None
        self._gradient_state: Any = None
        self._logged_record = 0
        self._trainer: weakref.ref[Any] | None = None

    # -- Trainer events ----------------------------------------------------------------------------
    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Guard the Trainer's ``train`` (see the module docstring: a failed run still releases the hooks)."""
        trainer = _calling_trainer()
        if trainer is not None:
            self._guard(trainer, "train")

    def on_train_begin(self, args: Any, state: Any, control: Any, model: nn.Module | None = None,
                       optimizer: Any = None, train_dataloader: Any = None, **kwargs: Any) -> None:
        """Start the monitor on the Trainer's model: the first-step doctor when asked, the end-of-backward hooks,
        and a live TensorBoard writer when ``tensorboard`` is set."""
        if model is None:
            raise GradvizError("GradvizCallback got no model from the Trainer.")
        self._close_hooks()
        trainer = _calling_trainer()
        if trainer is not None:
            self._guard(trainer, "train")
            self._guard(trainer, "training_step")
            self._trainer = weakref.ref(trainer)
        self._model = unwrap_model(model)
        self._optimizer = inner_optimizer(optimizer)
        self._scaler = getattr(optimizer, "scaler", None)  # accelerate's GradScaler under fp16, else None
        self._max_norm = float(args.max_grad_norm or 0.0)
        if self.run_doctor:
            self.diagnosis = self._doctor(args, train_dataloader)
        self.monitor = GradientMonitor(self._model, every=self.every, optimizer=self._optimizer,
                                       scaler=self._scaler, thresholds=self.thresholds, **self.monitor_kwargs)
        ckpt = dict(args.gradient_checkpointing_kwargs or {})
        self._at_backward_end = not (args.gradient_checkpointing and ckpt.get("use_reentrant", False))
        if self._at_backward_end:
            self._handles = [p.register_post_accumulate_grad_hook(self._grad_ready)  # type: ignore[no-untyped-call]
                             for p in self._model.parameters() if p.requires_grad]
        else:
            self.notes.append("reentrant activation checkpointing: gradients arrive in nested backward passes, so "
                              "the monitor records at on_pre_optimizer_step, after the Trainer clipped them")
        if self.tensorboard:
            where = Path(args.output_dir) / "gradviz_tb" if self.tensorboard is True else Path(self.tensorboard)
            self._tb = self.monitor.to_tensorboard(where, live=True)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Record the step here when the end-of-backward hook did not (reentrant checkpointing, or no trainable
        parameter reached): after the Trainer clipped."""
        if not self._recorded:  # fallback mode, or a step whose backward reached no trainable parameter
            self._step_monitor(pre_clip=False)
        self._recorded = False

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
               **kwargs: Any) -> None:
        """Add the monitor's latest statistics to the Trainer's logs."""
        if not self.log or self.monitor is None or logs is None or not self.monitor.steps:
            return
        if self.monitor.steps[-1] == self._logged_record:
            return  # nothing recorded since the last log (e.g. the end-of-training summary)
        self._logged_record = self.monitor.steps[-1]
        numbers = self.log_numbers()
        # Trainer.log appends {**logs, "step": ...} to log_history, then calls on_log: add the numbers there too
        last = state.log_history[-1] if state.log_history else None
        if last is not None and all(last.get(k) == v for k, v in logs.items()):
            last.update(numbers)
        logs.update(numbers)  # callbacks after this one see them

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Save the monitor's records when ``save`` is set (on the main process)."""
        if self.save and state.is_world_process_zero:
            self._save(args)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Remove the hooks and close the monitor; write and close TensorBoard, save when ``save`` is set."""
        self._release()
        trainer = self._trainer() if self._trainer is not None else None
        step = vars(trainer).get("training_step") if trainer is not None else None
        if trainer is not None and getattr(step, "__gradviz_guard__", None) is not None:
            del trainer.training_step  # the instance ends as it began (train's guard stays for the next run)
        if self.save and state.is_world_process_zero:
            self._save(args)

    def _release(self) -> None:
        """Remove every hook and close the monitor (its history stays readable): at the end of a run, also one
        that failed."""
        self._close_hooks()
        if self.monitor is not None:
            self.monitor.close()
        if self._tb is not None:
            self._tb.write()
            self._tb.close()
            self._tb = None

    def _guard(self, trainer: Any, name: str) -> None:
        """Put a guard on ``trainer.<name>`` (an instance attribute): an exception passing through it releases
        this callback's hooks and monitor first. Once per Trainer and name."""
        current = vars(trainer).get(name)
        if current is not None and getattr(current, "__gradviz_guard__", None) is not None:
            return
        original = getattr(trainer, name)
        me = weakref.ref(self)

        @functools.wraps(original)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except BaseException:
                cb = me()
                if cb is not None:
                    cb._release()
                raise

        guarded.__gradviz_guard__ = True  # type: ignore[attr-defined]
        setattr(trainer, name, guarded)

    # -- recording ---------------------------------------------------------------------------------
    def _sync_now(self) -> bool:
        """Whether this micro-batch ends the accumulation cycle (accelerate's shared GradientState, which the
        Trainer sets before each micro-batch)."""
        if self._gradient_state is None:
            from accelerate.state import GradientState

            self._gradient_state = GradientState()
        return bool(self._gradient_state.sync_gradients)

    def _grad_ready(self, param: torch.Tensor) -> None:
        if self._queued or self._recorded or not self._sync_now():
            return
        self._queued = True
        engine = torch.autograd.Variable._execution_engine
        engine.queue_callback(self._requeue)

    def _requeue(self) -> None:
        # Final callbacks run in the order queued, and a callback may queue more: queued again from here, the
        # record runs after every callback queued during this backward (DDP's reducer finishing its all-reduce).
        engine = torch.autograd.Variable._execution_engine
        engine.queue_callback(self._backward_done)

    def _backward_done(self) -> None:
        self._queued = False
        self._step_monitor(pre_clip=True)

    def _step_monitor(self, pre_clip: bool) -> None:
        mon = self.monitor
        if mon is None or self._model is None:
            return
        self._recorded = True
        records = not mon.steps_seen % (mon.every * mon.stride)  # the monitor records this step
        total = self._total_norm() if records and pre_clip and self._max_norm > 0 else None
        if total is not None:
            mon.step(grad_norm=total, max_norm=self._max_norm)
        else:
            mon.step()
        if records and self.flow_check and self.first_flow is None:
            scaler = self._scaler if pre_clip and self._scaler is not None and self._scaler.is_enabled() else None
            self.first_flow = gradient_flow(self._model, optimizer=self._optimizer, scaler=scaler)

    def _total_norm(self) -> torch.Tensor | None:
        """Pre-clip total norm (None while gradients still carry a GradScaler's factor: clipping unscales first)."""
        if self._model is None or (self._scaler is not None and self._scaler.is_enabled()):
            return None
        return total_grad_norm(self._model)

    # -- results -----------------------------------------------------------------------------------
    def flags(self) -> list[tuple[int, Flag]]:
        """The monitor's verdicts plus the first recorded step's gradient-flow flags, as ``(step, Flag)``."""
        out = list(self.monitor.flags()) if self.monitor is not None else []
        if self.first_flow is not None and self.monitor is not None and self.monitor.steps:
            first = self.monitor.steps[0]
            out += [(first, f) for f in self.first_flow.flags]
        return sorted(out, key=lambda e: e[0])

    def log_numbers(self) -> dict[str, float]:
        """Numbers of the latest record: total and largest layer gradient norm, verdicts so far."""
        mon = self.monitor
        if mon is None or not mon.steps:
            return {}
        return last_record_numbers(mon, len(self.flags()))

    # -- helpers -----------------------------------------------------------------------------------
    def _save(self, args: Any) -> None:
        if self.monitor is None:
            return
        os.makedirs(args.output_dir, exist_ok=True)
        self.monitor.save(Path(args.output_dir) / HISTORY_FILE)

    def _close_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _doctor(self, args: Any, dataloader: Any) -> Any:
        from gradviz_nb.doctor import doctor

        model, opt = self._model, self._optimizer
        dataset = getattr(dataloader, "dataset", None)
        collate = getattr(dataloader, "collate_fn", None)
        if model is None or dataset is None or collate is None or not hasattr(dataset, "__len__"):
            self.notes.append("doctor skipped: the training data has no length (an iterable dataset), so no batch "
                              "could be taken without consuming the Trainer's iterator")
            return None
        # The first examples through the Trainer's own collator: iterating the dataloader would move its sampler.
        n = min(args.per_device_train_batch_size, len(dataset))
        batch = _to_device(collate([dataset[i] for i in range(n)]), args.device)

        def step() -> None:
            assert model is not None
            model.train()
            if opt is not None:
                opt.zero_grad()
            out = model(**batch)
            loss = out["loss"] if isinstance(out, dict) or hasattr(out, "keys") else out[0]
            loss.backward()
            if opt is not None:
                opt.step()

        return doctor(step, model, opt)


def _calling_trainer() -> Any:
    """The ``transformers.Trainer`` whose event is being delivered: the ``self`` of the nearest calling frame
    that is one (None when the event was called by hand)."""
    from transformers import Trainer

    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        me = frame.f_locals.get("self") if "self" in frame.f_code.co_varnames else None
        if isinstance(me, Trainer):
            return me
        frame = frame.f_back
    return None


def _to_device(batch: Any, device: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if hasattr(batch, "items"):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch

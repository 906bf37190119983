"""The doctor over a whole script: its first N optimizer steps observed as ``gv.doctor`` observes a step function.

A script has no step function to hand over, so the steps are found from the optimizer. When the script builds
its first optimizer (``torch.optim.Optimizer.__init__`` is wrapped until then), the model is the outermost
``nn.Module`` holding most of the optimizer's parameters, and the first step's observation opens
(:func:`gradviz_nb.doctor.observe.observing`: the same capture, backward wrapper and :class:`StepWatch` the
doctor uses). That optimizer's ``step`` (as an instance attribute, so Lightning's, accelerate's, GradScaler's and
LR schedulers' calls all pass through it) closes the observation when it returns and opens the next. After N
steps the doctor's own checks run (:func:`gradviz_nb.doctor.run.diagnose`), and the script is stopped.
"""

from __future__ import annotations

import gc
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import nn

from gradviz_nb.cli.script import StopScript, rank
from gradviz_nb.doctor import Diagnosis
from gradviz_nb.doctor.observe import Sightings, StepRecord, observing
from gradviz_nb.doctor.registration import unregistered
from gradviz_nb.doctor.run import diagnose, grad_norms, moved_in
from gradviz_nb.probes.owned import for_this_thread

__all__ = ["ScriptObserver", "find_model", "first_optimizer", "progress"]


def find_model(opt: torch.optim.Optimizer) -> nn.Module | None:
    """The outermost module holding the most of ``opt``'s parameters (ties: the larger one)."""
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    with warnings.catch_warnings():  # isinstance on some objects touches deprecated module attributes
        warnings.simplefilter("ignore")
        modules = [o for o in gc.get_objects() if isinstance(o, nn.Module)]
    inner = {id(c) for m in modules for c in m.children()}
    best: tuple[int, int] = (0, 0)
    found: nn.Module | None = None
    for m in modules:
        if id(m) in inner:
            continue
        ids = [id(p) for p in m.parameters()]
        score = (len(held.intersection(ids)), len(ids))
        if score > best:
            best, found = score, m
    return found


@contextmanager
def first_optimizer(created: Callable[[torch.optim.Optimizer, nn.Module], None],
                    stepped: Callable[[], None]) -> Iterator[None]:
    """While the block runs, ``created(opt, model)`` is called when the script builds its first optimizer (with
    the model found by :func:`find_model`), and ``stepped()`` each time that optimizer's ``step()`` returns.
    ``step`` is wrapped as a bound method on the instance, so an LR scheduler's own wrapper still works."""
    taken: list[torch.optim.Optimizer] = []

    def init(original: Callable[..., None], opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        original(opt, *args, **kwargs)
        if taken:
            return
        model = find_model(opt)
        if model is None:
            return
        taken.append(opt)
        inner = opt.step

        def step(this: torch.optim.Optimizer, *a: Any, **k: Any) -> Any:
            out = inner(*a, **k)
            stepped()
            return out

        opt.step = types.MethodType(step, opt)  # type: ignore[method-assign]
        created(opt, model)

    # the script's thread only, and Optimizer's dict ends as it began (probes/owned.py)
    with for_this_thread(torch.optim.Optimizer, "__init__", init):
        yield


class ScriptObserver:
    """Observes ``steps`` optimizer steps of the script running meanwhile; ``done(dx)`` is called with the
    diagnosis, then the script is stopped unless ``keep_going``. ``say`` prints progress."""

    def __init__(self, steps: int, keep_going: bool, done: Callable[[Diagnosis], None],
                 say: Callable[[str], None]) -> None:
        self.steps, self.keep_going, self._done, self._say = steps, keep_going, done, say
        self.model: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.records: list[StepRecord] = []
        self.seen = Sightings()
        self.diagnosis: Diagnosis | None = None
        self._open: ExitStack | None = None
        self._current: StepRecord | None = None

    @contextmanager
    def installed(self) -> Iterator[ScriptObserver]:
        """Follow the script's first optimizer while the block runs; close any open observation at the end."""
        try:
            with first_optimizer(self._first_optimizer, self._after_step):
                yield self
        finally:
            self._close(keep=False)  # a step the script never finished (it ended or failed) is not judged
            if self.diagnosis is None and self.model is not None:
                self._finish(note=f"the script ended after {len(self.records)} of {self.steps} optimizer steps")

    def _first_optimizer(self, opt: torch.optim.Optimizer, model: nn.Module) -> None:
        self.optimizer, self.model = opt, model
        self.seen = Sightings({id(opt): "optimizer"}, {}, lambda _: None,
                              {n: t for u in unregistered(model) for n, t in u.tensors.items()})
        self._say(f"observing {type(model).__name__} ({sum(1 for _ in model.parameters())} parameters) and its "
                  f"{type(opt).__name__}")
        self._begin()

    def _begin(self) -> None:
        assert self.model is not None
        stack = ExitStack()
        previous = self.records[-1] if self.records else None
        self._current = stack.enter_context(observing(self.model, self.optimizer, len(self.records) + 1, previous,
                                                      self.seen))
        self._open = stack

    def _close(self, keep: bool = True) -> None:
        if self._open is None:
            return
        stack, self._open = self._open, None
        stack.close()
        if self._current is not None and keep:
            self.records.append(self._current)
        self._current = None

    def _after_step(self) -> None:
        if self._open is None:
            return
        self._close()
        rec = self.records[-1]
        loss = f", loss {rec.loss:.4g}" if rec.loss is not None else ""
        self._say(f"step {rec.index}/{self.steps} observed: {rec.backwards} backward{'s' * (rec.backwards != 1)}"
                  f"{loss}")
        if len(self.records) < self.steps:
            self._begin()
            return
        self._finish()
        if not self.keep_going:
            raise StopScript

    def _finish(self, note: str = "") -> None:
        assert self.model is not None
        findings = diagnose(self.records, self.model, self.optimizer, self.seen)
        notes = [note] if note else []
        if not any(r.backwards for r in self.records):
            notes.append("the steps ran no backward: only the model's structure was checked")
        first = next((r for r in self.records if r.graph is not None), None)
        self.diagnosis = Diagnosis(findings, len(self.records), False, first.graph if first else None, notes,
                                   moved_in(self.records), grad_norms(self.records))
        self._done(self.diagnosis)


def progress(quiet: bool) -> Callable[[str], None]:
    """Progress lines on stderr (rank 0 only under torchrun)."""
    def say(text: str) -> None:
        if not quiet and rank() == 0:
            print(f"gradviz: {text}", file=sys.stderr, flush=True)
    return say

"""Predict-and-verify questions: the one protocol behind the canvas's what-if modes.

A question reads the user's marks (a synced trait the page sets by clicks), **predicts** its answer from the
traced graph alone (pure, instant; the page computes the same prediction in TypeScript), and **verifies** it
by re-running the user's ``fn`` in the sandbox (:mod:`gradviz_nb.probes.sandbox`) with the marks really
applied. ``GraphWidget`` asks every question the same way: ``w.predict(name)``, ``w.verify(name)``, and one
page request ``{"kind": "verify", "body": {"question": name}}``; the result lands in the question's result
trait. The page's half is ``js/src/features/modes/`` (the shared mode button, bar, verify banner and clear).

Two questions are registered: ``"whatif"`` (detach tensors and freeze leaves: which leaves lose their
gradient; marks in ``toggles``, result in ``verified``) and ``"checkpoint"`` (checkpoint module calls: saved
bytes, recompute, lost leaves; marks in ``checkpoints``, result in ``checkpoint_verified``). A new question is
one :class:`Question` passed to :func:`register`, plus its page feature. Example::

    w = gv.GraphWidget.from_fn(lambda: loss_fn(model), model=model)
    w.checkpoints = {"blocks.0": "non_reentrant"}
    w.predict("checkpoint").after       # bytes saved for backward, predicted
    w.verify("checkpoint")["agree"]     # True: PyTorch measured the same
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gradviz_nb.analysis.checkpointing import checkpoint_what_if
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.rerun import Rerunnable, verify_checkpoint
from gradviz_nb.tracing import AutogradGraph
from gradviz_nb.widgets.page.toggles import toggle_args

__all__ = ["QUESTIONS", "Question", "ask", "register", "verify"]


@dataclass(frozen=True)
class Question:
    """One predict-and-verify question.

    Attributes:
        name: how the page's verify request and ``GraphWidget.verify(name)`` name it.
        marks: the synced trait holding the user's marks (``"toggles"``, ``"checkpoints"``).
        result: the synced trait the verification's record goes to (``"verified"``, ``"checkpoint_verified"``).
        predict: ``(graph, marks) -> prediction``, pure (the page computes the same).
        rerun: ``(rerunnable, graph, marks) -> record``: re-runs the user's ``fn`` in the sandbox with the
            marks applied and compares with the prediction (the record's ``agree``).
        failed: ``(marks, error) -> record`` for a re-run that raised (the page shows ``error``).
        refused: errors raised to the caller (bad marks) instead of recorded as a failed re-run.
    """

    name: str
    marks: str
    result: str
    predict: Callable[[AutogradGraph, Any], Any]
    rerun: Callable[[Rerunnable, AutogradGraph, Any], dict[str, Any]]
    failed: Callable[[Any, str], dict[str, Any]]
    refused: tuple[type[Exception], ...] = ()


QUESTIONS: dict[str, Question] = {}


def register(question: Question) -> Question:
    """Add ``question`` to :data:`QUESTIONS` (by its name; a second one of that name replaces it)."""
    QUESTIONS[question.name] = question
    return question


def ask(name: str) -> Question:
    """The registered question ``name``; a :class:`GradvizError` naming the registered ones otherwise."""
    question = QUESTIONS.get(name) if isinstance(name, str) else None
    if question is None:
        raise GradvizError(f"question: got {name!r}; registered: {', '.join(map(repr, QUESTIONS))}.")
    return question


def verify(question: Question, rerun: Rerunnable | None, graph: AutogradGraph, marks: Any) -> dict[str, Any]:
    """Verify ``question`` for ``marks`` by a sandboxed re-run: its result record (a failed re-run is a
    record with ``error``; the user's state is restored either way)."""
    if rerun is None:
        raise GradvizError(f"verifying {question.name!r} needs a re-runnable widget: build it with "
                           "GraphWidget.from_fn(fn, model=...).")
    try:
        return question.rerun(rerun, graph, marks)
    except question.refused:
        raise
    except Exception as err:  # shown in the page; the user's state was restored by the re-run
        return question.failed(marks, f"{type(err).__name__}: {err}")


# -- what-if: detach tensors, freeze leaves (analysis/what_if.py, probes/rerun/whatif.py) --------------------


def _toggles(marks: Any) -> dict[str, list[str]]:
    return {"detach": list(marks.get("detach", [])), "freeze": list(marks.get("freeze", []))}


def _whatif_rerun(rerun: Rerunnable, graph: AutogradGraph, marks: Any) -> dict[str, Any]:
    toggles = _toggles(marks)
    return {"toggles": toggles, **rerun.verify(*toggle_args(graph, toggles))}


def _whatif_failed(marks: Any, error: str) -> dict[str, Any]:
    return {"toggles": _toggles(marks), "predicted_lost": [], "actual_lost": [], "agree": False,
            "unverifiable": [], "error": error}


WHATIF = register(Question(
    "whatif", "toggles", "verified",
    predict=lambda graph, marks: graph.what_if(*toggle_args(graph, marks)),
    rerun=_whatif_rerun, failed=_whatif_failed,
))


# -- checkpointing: checkpoint module calls (analysis/checkpointing.py, probes/rerun/checkpoint.py) -----------

_NO_CHECKPOINT_RESULT: dict[str, Any] = {
    "predicted_bytes": 0, "measured_bytes": 0, "predicted_before": 0, "measured_before": 0, "rng_bytes": 0,
    "frames": 0, "predicted_recomputed": 0, "measured_recomputed": 0, "predicted_recomputed_flops": 0,
    "measured_recomputed_flops": 0, "predicted_lost": [], "actual_lost": [], "agree": False, "checked": [],
    "unchecked": [],
}

CHECKPOINT = register(Question(
    "checkpoint", "checkpoints", "checkpoint_verified",
    predict=lambda graph, marks: checkpoint_what_if(graph, marks),
    rerun=lambda rerun, graph, marks: verify_checkpoint(rerun, dict(marks)),
    failed=lambda marks, error: {**_NO_CHECKPOINT_RESULT, "marks": dict(marks), "error": error},
    refused=(GradvizError,),
))

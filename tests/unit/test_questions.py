"""One predict-and-verify protocol (gradviz_nb/widgets/questions.py): both what-if questions predict from their
marks and verify by a sandboxed re-run through it, and GraphWidget dispatches one verify request by name."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.errors import GradvizError
from gradviz_nb.widgets import questions
from gradviz_nb.widgets.questions import QUESTIONS, Question


def _widget() -> tuple[gv.GraphWidget, nn.Module]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    return gv.GraphWidget.from_fn(lambda: model(x).square().sum(), model=model), model


def test_both_questions_are_registered_with_their_traits() -> None:
    assert {"whatif", "checkpoint"} <= set(QUESTIONS)
    for q in QUESTIONS.values():
        assert q.marks in gv.GraphWidget.class_traits() and q.result in gv.GraphWidget.class_traits(), q.name


def test_one_verify_request_names_the_question_and_pytorch_agrees() -> None:
    w, model = _widget()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    w.toggles = {"detach": [], "freeze": [w.graph.find("0.weight")]}
    assert w.predict("whatif").lost == w.what_if().lost == ["0.weight"]
    reply = w.answer({"id": 1, "kind": "verify", "body": {"question": "whatif"}})
    assert reply is not None and reply["ok"] and w.verified["agree"] and w.verified["actual_lost"] == ["0.weight"]

    w.checkpoints = {"0": "non_reentrant"}
    plan = w.predict("checkpoint")
    assert repr(plan) == repr(w.checkpoint_what_if()) and plan.before > 0
    reply = w.answer({"id": 2, "kind": "verify", "body": {"question": "checkpoint"}})
    assert reply is not None and reply["ok"] and w.checkpoint_verified["agree"], w.checkpoint_verified
    assert w.checkpoint_verified["marks"] == {"0": "non_reentrant"}
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "the re-runs put the model back"

    reply = w.answer({"id": 3, "kind": "verify", "body": {"question": "offload"}})
    assert reply is not None and not reply["ok"] and "'whatif'" in reply.get("error", "")
    with pytest.raises(GradvizError, match="registered"):
        w.verify("offload")


def test_a_new_question_is_a_registration_and_the_widget_dispatches_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A third question needs no change to GraphWidget: registered, it is predicted and verified by name."""
    seen: list[Any] = []

    def rerun(rerunnable: Any, graph: Any, marks: Any) -> dict[str, Any]:
        seen.append(marks)
        loss = rerunnable.fn()  # the user's fn, as a question's re-run calls it
        return {"toggles": dict(marks), "predicted_lost": [], "actual_lost": [], "agree": bool(loss.isfinite()),
                "unverifiable": [], "error": ""}

    monkeypatch.setitem(QUESTIONS, "count", Question(
        "count", "toggles", "verified", predict=lambda graph, marks: len(marks["freeze"]), rerun=rerun,
        failed=lambda marks, error: {"error": error}))
    w, _ = _widget()
    w.toggles = {"detach": [], "freeze": [w.graph.find("2.bias")]}
    assert w.predict("count") == 1
    reply = w.answer({"id": 1, "kind": "verify", "body": {"question": "count"}})
    assert reply is not None and reply["ok"] and w.verified["agree"] and seen == [w.toggles]


def test_a_failed_rerun_is_a_record_and_nothing_to_rerun_is_refused() -> None:
    calls = {"n": 0}
    model = nn.Linear(2, 1)

    def fn() -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("boom")
        return model(torch.ones(1, 2)).sum()

    w = gv.GraphWidget.from_fn(fn, model=model)
    assert w.verify("whatif")["error"] == "RuntimeError: boom"
    plain = gv.GraphWidget(model(torch.ones(1, 2)).sum())
    with pytest.raises(GradvizError, match="from_fn"):
        questions.verify(QUESTIONS["checkpoint"], None, plain.graph, {})

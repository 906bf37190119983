"""Every verdict type's JSON validates against the packaged JSON Schema (with the ``jsonschema`` package), on
real outputs; the answers to "why no gradient" and "where was the NaN born" stay under 2,000 tokens."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb import schema
from gradviz_nb.analysis.checkpointing import checkpoint_what_if
from gradviz_nb.kinds import KINDS

TOKENS = 2000  # the bound of one answer, counted as characters / 4


def _valid(text: str, kind: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(text)
    jsonschema.validate(record, schema.load_schema(), cls=jsonschema.Draft202012Validator)
    jsonschema.validate(record, {"$ref": f"#/$defs/{kind}", "$defs": schema.load_schema()["$defs"]})
    assert record["schema_version"] == schema.SCHEMA_VERSION and record["type"] == kind
    return record


class DeadLoRA(nn.Module):
    """A frozen base and a LoRA adapter whose input was detached: lora_A gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.base = nn.Linear(8, 8)
        self.base.requires_grad_(False)
        self.lora_A = nn.Linear(8, 2, bias=False)
        self.lora_B = nn.Linear(2, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_B(self.lora_A(x).detach())


def test_schema_lists_exactly_the_registry_kinds_and_the_types() -> None:
    s = schema.load_schema()
    assert s["$defs"]["kind"]["enum"] == list(KINDS)
    assert [r["$ref"].rsplit("/", 1)[1] for r in s["oneOf"]] == list(schema.TYPES)
    jsonschema.Draft202012Validator.check_schema(s)


def test_a_record_of_the_wrong_shape_is_refused() -> None:
    bad = {"schema_version": 1, "type": "why", "name": "w", "status": "none", "kind": "not-a-kind", "cause": "",
           "evidence": "", "fix": "", "node": ""}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema.load_schema())


def test_doctor_why_and_proof_of_a_dead_lora_validate_and_fit() -> None:
    model = DeadLoRA()
    x = torch.randn(4, 8)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)

    def step() -> None:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    dx = gv.doctor(step, model, opt)
    rec = _valid(dx.to_json(), "diagnosis")
    assert not rec["ok"] and any(f["target"] == "lora_A.weight" for f in rec["findings"])
    for f in dx.findings:
        _valid(f.to_json(), "finding")
    w = gv.why(model, "lora_A.weight", fn=lambda: model(x).pow(2).mean())
    answer = _valid(w.to_json(), "why")
    assert model.lora_A.weight.grad is None  # the truth: PyTorch gives it no gradient
    assert answer["status"] == "none" and answer["kind"] == "detached" and "detach" in answer["cause"]
    assert answer["fix"] and answer["evidence"]
    assert len(w.to_json()) / 4 <= TOKENS
    proof = _valid(w.prove().to_json(), "proof")
    assert proof["proven"] and proof["before"] is None and proof["after"] > 0


def test_backward_born_nan_validates_and_fits() -> None:
    w = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)

    def step() -> None:
        torch.where(w > 0, torch.log(w), torch.zeros_like(w)).sum().backward()

    nf = gv.find_nonfinite(step)
    assert nf is not None
    rec = _valid(nf.to_json(), "nonfinite")
    assert (rec["phase"], rec["op"], rec["node"], rec["cause"]) == ("backward", "aten.div", "LogBackward0", "0/0")
    assert rec["fix"] and rec["line"] and len(nf.to_json()) / 4 <= TOKENS
    assert any(x["zeros"] for x in rec["inputs"])  # the evidence: log's input held the zero


def test_answers_at_their_largest_stay_bounded() -> None:
    """The largest answers the types can hold (an op with 300 inputs reaching 300 places, an evidence text of
    20,000 characters) keep the first items, the count of all of them, the evidence and the fix."""
    from gradviz_nb.doctor.why import Why
    from gradviz_nb.probes.nonfinite.found import InputInfo

    x = InputInfo((4, 4), "float32", 1, 0, 0, float("inf"), float("-inf"))
    nf = gv.NonFinite("backward", "aten.cat", "blocks.0." * 40, "Block", "train.py:12", "CatBackward0", "NaN",
                      "0/0", "x" * 20000, (x,) * 300, tuple(f"gradient of p{i}" for i in range(300)))
    assert len(json.dumps(nf.to_dict(), default=str)) / 4 > TOKENS  # unbounded, it would not fit
    rec = _valid(nf.to_json(), "nonfinite")
    assert (rec["inputs_total"], rec["reached_total"]) == (300, 300) and rec["fix"]
    assert rec["inputs"][0]["max_abs"] == "Infinity" and len(nf.to_json()) / 4 <= TOKENS
    w = Why("h." * 100 + "weight", "none", "detached", "c" * 20000, "e" * 20000, "f" * 20000)
    assert len(w.to_json()) / 4 <= TOKENS and _valid(w.to_json(), "why")["evidence"].startswith("eee")


def test_flags_stop_and_checkpoint_plan_validate() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(8, 4)
    with gv.capture(model) as cap:
        out = model(x)
        loss = (model[2](model[1](model[0](x).detach())) + 0 * out).sum()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    flow = gv.gradient_flow(model, graph=graph, capture=cap)
    assert flow.flags
    for f in flow.flags:
        rec = _valid(f.to_json(), "flag")
        assert rec["source"] == "flow" and rec["step"] is None
    mon = gv.GradientMonitor(model, stale_check=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model[2](model[1](model[0](x).detach())).sum().backward()
        mon.step()
        opt.step()
    flags = mon.flags()
    assert flags
    for s, f in flags:
        assert _valid(f.to_json(step=s, source="monitor"), "flag")["step"] == s
    w = torch.tensor([0.0, 1.0], requires_grad=True)
    nan_loss = torch.where(w > 0, torch.log(w), torch.zeros_like(w)).sum()
    stop = gv.record_backward(nan_loss).find("nonfinite")
    assert _valid(stop.to_json(), "stop")["hit"]
    plan = checkpoint_what_if(graph, {"0": "reentrant"})
    rec = _valid(plan.to_json(), "checkpoint_plan")
    assert rec["before"] == plan.before and rec["marks"] == {"0": "reentrant"}


def test_a_checkpoint_plan_carries_its_nested_marks_and_what_is_not_exact() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8)),
                          nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1)))
    model[0][0].requires_grad_(False)  # block 0's input requires no grad: what 0.0 computes is in no graph
    with gv.capture(model) as cap:
        loss = model(torch.randn(8, 4)).sum()
    graph = gv.trace(loss, model=model, capture=cap)
    plan = checkpoint_what_if(graph, {"0": "non_reentrant", "1": "non_reentrant", "1.0": "reentrant"})
    assert plan.nested == ["1.0"] and plan.inexact and plan.inexact[0].startswith("0 has no input")
    rec = _valid(plan.to_json(), "checkpoint_plan")
    assert (rec["nested"], rec["inexact"]) == (plan.nested, plan.inexact)
    for field in ("nested", "inexact"):  # both are part of the record, not extras a reader may miss
        with pytest.raises(jsonschema.ValidationError):
            _valid(json.dumps({k: v for k, v in rec.items() if k != field}), "checkpoint_plan")

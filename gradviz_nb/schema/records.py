"""The record of each verdict type (see the package docstring). Each function reads the result's public fields
by name, so this bottom layer imports none of the types it serializes."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

from gradviz_nb.kinds import fix_for

__all__ = ["MAX_ITEMS", "MAX_TEXT", "SCHEMA_PATH", "SCHEMA_VERSION", "TYPES", "checkpoint_plan", "diagnosis",
           "dumps", "finding", "flag", "load_schema", "nonfinite", "proof", "stop", "why"]

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("verdicts.schema.json")
TYPES = ("diagnosis", "finding", "why", "proof", "nonfinite", "flag", "stop", "checkpoint_plan")
MAX_TEXT = 1200  # characters of one text field
MAX_ITEMS = 12  # items of one list (inputs, places reached, parameters of a flag, findings' lists)
MAX_FINDINGS = 50  # findings of one diagnosis


@cache
def load_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) every record validates against."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def _text(s: object) -> str:
    t = str(s)
    return t if len(t) <= MAX_TEXT else t[: MAX_TEXT - 1] + "…"


def _num(x: float | None) -> float | str | None:
    if x is None:
        return None
    v = float(x)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _items(xs: Any, limit: int = MAX_ITEMS) -> list[Any]:
    return list(xs)[:limit]


def _head(kind: str) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "type": kind}


def dumps(record: dict[str, Any], indent: int | None = None) -> str:
    """A record as strict JSON text (no NaN literals: :func:`_num` already spelled them)."""
    return json.dumps(record, indent=indent, allow_nan=False, ensure_ascii=False)


def finding(f: Any) -> dict[str, Any]:
    """A :class:`gradviz_nb.doctor.Finding`."""
    return {**_head("finding"), "kind": f.kind, "target": _text(f.target), "message": _text(f.message),
            "evidence": _text(f.evidence), "fix": _text(f.fix), "step": int(f.step), "node": f.node}


def diagnosis(d: Any) -> dict[str, Any]:
    """A :class:`gradviz_nb.doctor.Diagnosis` (its findings worst first, at most ``MAX_FINDINGS``)."""
    return {**_head("diagnosis"), "ok": bool(d.ok), "steps": int(d.steps), "restored": bool(d.restored),
            "findings": [finding(f) for f in d.findings[:MAX_FINDINGS]], "findings_total": len(d.findings),
            "notes": [_text(n) for n in _items(d.notes)]}


def why(w: Any) -> dict[str, Any]:
    """A :class:`gradviz_nb.doctor.why.Why`: why one parameter's gradient is missing, zero, tiny or scaled."""
    return {**_head("why"), "name": w.name, "status": w.status, "kind": w.kind, "cause": _text(w.cause),
            "evidence": _text(w.evidence), "fix": _text(w.fix), "node": w.node}


def proof(p: Any) -> dict[str, Any]:
    """A :class:`gradviz_nb.doctor.why_prove.Proof`: the fix re-run, the gradient norm without and with it."""
    return {**_head("proof"), "name": p.name, "fix": _text(p.fix), "applied": bool(p.applied),
            "proven": bool(p.proven), "before": _num(p.before), "after": _num(p.after), "message": _text(p.message)}


def _site(s: Any) -> dict[str, Any]:
    return {"phase": s.phase, "op": s.op, "module": s.module, "module_type": s.module_type, "line": s.line,
            "node": s.node}


def _input(x: Any) -> dict[str, Any]:
    return {"shape": [int(v) for v in x.shape][:8], "dtype": x.dtype, "nan": int(x.nan), "inf": int(x.inf),
            "zeros": int(x.zeros), "max_abs": _num(x.max_abs), "min": _num(x.min), "scalar": bool(x.scalar),
            "nonfinite": bool(x.nonfinite)}


def nonfinite(n: Any) -> dict[str, Any]:
    """A :class:`gradviz_nb.NonFinite`: where the first NaN/Inf was born, its inputs, where it went, the fix."""
    return {**_head("nonfinite"), **_site(n.site), "kind": n.kind, "cause": n.cause, "detail": _text(n.detail),
            "inputs": [_input(x) for x in _items(n.inputs, 8)], "inputs_total": len(n.inputs),
            "reached": [_text(r) for r in _items(n.reached)], "reached_total": len(n.reached),
            "became_nan": _site(n.became_nan) if n.became_nan is not None else None, "others": int(n.others),
            "fix": fix_for("nan-origin")}


def flag(f: Any, step: int | None = None, source: str = "flow") -> dict[str, Any]:
    """A :class:`gradviz_nb.probes.flow.Flag` from ``gradient_flow`` (``source="flow"``) or a
    ``GradientMonitor`` (``source="monitor"``, with the record's ``step``)."""
    return {**_head("flag"), "source": source, "kind": f.kind, "target": _text(f.target), "reason": _text(f.reason),
            "params": list(_items(f.params)), "params_total": len(f.params), "step": step}


def stop(s: Any) -> dict[str, Any]:
    """A breakpoint :class:`~gradviz_nb.probes.backward.Stop` (``rec.find(...)``)."""
    last = s.last.index if s.last is not None else None
    return {**_head("stop"), "rule": s.rule, "hit": bool(s.hit), "index": int(s.index), "node": s.node,
            "text": _text(s.text), "last": last, "healed": len(s.healed), "each": len(getattr(s, "each", ()))}


def checkpoint_plan(p: Any) -> dict[str, Any]:
    """A :class:`~gradviz_nb.analysis.checkpointing.CheckpointPlan`: bytes saved for backward before and after
    the marked checkpoints, the recompute share, the leaves a reentrant checkpoint cuts, the nested marks that
    take effect and what is not exact (``inexact``: verify measures it). The per-call byte
    maps keep the ``MAX_ITEMS`` largest calls."""

    def top(m: dict[str, int]) -> dict[str, int]:
        return dict(sorted(m.items(), key=lambda kv: -kv[1])[:MAX_ITEMS])

    return {**_head("checkpoint_plan"), "marks": dict(p.marks), "before": int(p.before), "after": int(p.after),
            "kept": int(p.kept), "share": _num(p.share), "forward_ops": int(p.forward_ops),
            "recomputed_ops": int(p.recomputed_ops), "forward_flops": int(p.forward_flops),
            "recomputed_flops": int(p.recomputed_flops), "per_call_before": top(p.per_call_before),
            "per_call_after": top(p.per_call_after), "lost_names": _items(p.lost),
            "lost_total": len(p.lost), "cut": _items(p.cut), "ignored": _items(p.ignored),
            "nested": _items(p.nested), "inexact": [_text(x) for x in _items(p.inexact)], "summary": _text(p.summary())}

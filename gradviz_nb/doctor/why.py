"""``gv.why``: why one parameter's gradient is missing, zero, tiny or scaled, from evidence.

It reads what was measured (the parameter's ``.grad``), the traced graph and the capture's forward record
(:mod:`gradviz_nb.tracing.evidence`), and walks from the parameter towards the loss; the first cause found
is named with its op, source line, module and measured numbers (:mod:`gradviz_nb.probes.causes.walk`).
``Why.prove()`` re-runs the forward and backward with the fix applied, in the sandbox
(:mod:`gradviz_nb.doctor.why_prove`).

Sources: a :class:`~gradviz_nb.doctor.Diagnosis` (what ``gv.doctor`` saw), an
:class:`~gradviz_nb.tracing.AutogradGraph` (``gv.trace``, evidence from its ``gv.capture``), a loss tensor, or
a model with ``fn`` (a function returning the loss: run once in the sandbox, fully observed, and provable).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz_nb import schema
from gradviz_nb.errors import GradvizError
from gradviz_nb.kinds import Kind
from gradviz_nb.probes.causes import Cause, Lost, adapter_switch_reasons, events_from_ghosts, explain, grad_status
from gradviz_nb.probes.owned import no_backward_inside
from gradviz_nb.probes.sandbox import sandbox
from gradviz_nb.tracing import AutogradGraph, Capture, capture, trace, typed_torch
from gradviz_nb.tracing.capture import recent_evidence
from gradviz_nb.tracing.compiled import unwrap_compiled
from gradviz_nb.tracing.evidence import Evidence
from gradviz_nb.tracing.ghosts import next_sequence_nr, user_line
from gradviz_nb.validate import not_meta

if TYPE_CHECKING:
    from gradviz_nb.doctor.why_prove import Proof

__all__ = ["Lines", "Why", "remember", "why"]

STATUSES = ("ok", "none", "zero", "tiny", "scaled")


@dataclass
class Why:
    """The answer for one parameter: ``status`` (what was measured: ``"ok"``, ``"none"``, ``"zero"``,
    ``"tiny"``, ``"scaled"``), ``kind`` (a :data:`gradviz_nb.kinds.Kind`, None when nothing is wrong or the
    zero is expected), ``cause`` (the first cause, with op, line and module), ``evidence`` (what was
    observed, with numbers), ``fix``, ``node`` (the graph node to show it on, or ``""``)."""

    name: str
    status: str
    kind: Kind | None
    cause: str
    evidence: str
    fix: str
    node: str = ""
    _event: Evidence | None = field(default=None, repr=False)
    _hook: Any = field(default=None, repr=False)
    _model: Callable[[], nn.Module | None] = field(default=lambda: None, repr=False)
    _fn: Callable[[], Any] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The answer as plain data: name, status, kind, cause, evidence, fix and node."""
        return {"name": self.name, "status": self.status, "kind": self.kind, "cause": self.cause,
                "evidence": self.evidence, "fix": self.fix, "node": self.node}

    def to_json(self, indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``why`` type)."""
        return schema.dumps(schema.why(self), indent)

    def text(self) -> str:
        """The answer as text: the parameter and its status, then the cause, what was seen and the fix."""
        head = f"{self.name}: gradient {self.status}" + (f" [{self.kind}]" if self.kind else "")
        return f"{head}\n  cause: {self.cause}\n  seen: {self.evidence}\n  fix: {self.fix}"

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def prove(self, fn: Callable[[], Any] | None = None, model: nn.Module | None = None) -> Proof:
        """Re-run forward and backward with the fix applied (inside the sandbox: the model, its ``.grad``
        and the RNG end as they were) and measure the gradient; says so where no fix is mechanical.
        ``fn`` (a function returning the loss) and ``model`` default to the ones ``gv.why`` was given."""
        from gradviz_nb.doctor.why_prove import prove

        return prove(self, fn if fn is not None else self._fn, model if model is not None else self._model())


# What gv.doctor explained, by the graph its Diagnosis holds (the doctor's capture is gone by then).
_REMEMBERED: weakref.WeakKeyDictionary[AutogradGraph, dict[str, Why]] = weakref.WeakKeyDictionary()


def remember(graph: AutogradGraph | None, answer: Why) -> None:
    """Keep ``w`` as the last answer for its graph, so the page's details panel shows the same cause."""
    if graph is not None:
        _REMEMBERED.setdefault(graph, {})[answer.name] = answer


def _from_cause(name: str, c: Cause, model: nn.Module | None, fn: Callable[[], Any] | None) -> Why:
    ref: Callable[[], nn.Module | None] = weakref.ref(model) if model is not None else (lambda: None)
    return Why(name, c.status, c.kind, c.cause, c.evidence, c.fix, c.node, c.event, c.hook, ref, fn)


def _graph_evidence(graph: AutogradGraph, cap: Capture | None) -> tuple[list[Evidence], nn.Module | None]:
    """The capture's evidence and model: the one given, else the recent capture the graph's sequence numbers
    fall in, else the detaches the graph itself recorded."""
    if cap is not None:
        return cap.evidence, cap.model
    seqs = [int(d["seq"]) for _, d in graph.nx.nodes(data=True) if d.get("kind") == "op" and d.get("seq", -1) >= 0]
    events, model = recent_evidence(seqs)
    return events or events_from_ghosts(graph), model


def _param(graph: AutogradGraph | None, model: nn.Module | None, name: str) -> torch.Tensor | None:
    if model is not None:
        named = dict(model.named_parameters(remove_duplicate=False))
        if name in named:
            return named[name]
    if graph is not None:
        node = graph.leaves().get(name)
        ref = graph.tensors.get(node) if node is not None else None
        return ref() if ref is not None else None
    return None


def _unused(model: nn.Module | None, name: str, cap: Capture | None) -> str:
    from gradviz_nb.probes.causes import module_seen

    module = name.rsplit(".", 1)[0] if "." in name else ""
    return module_seen(module, cap) if model is not None else ""


def analyse(name: str, *, graph: AutogradGraph | None, model: nn.Module | None, cap: Capture | None,
            events: list[Evidence] | None = None, fn: Callable[[], Any] | None = None,
            status: tuple[str, str] | None = None, lost: Lost | None = None,
            lines: dict[int, str] | None = None) -> Why:
    """The Why of one parameter from what is at hand (the doctor calls this with its step's record)."""
    if events is None and graph is not None:
        events, found = _graph_evidence(graph, cap)
        model = model or found
    evs = events if events is not None else (cap.evidence if cap is not None else [])
    p = _param(graph, model, name)
    measured = status or grad_status(p)
    if p is None and graph is not None and name not in graph.leaves():
        measured = ("none", "it is not in the graph of this loss, so this loss's backward gives it no gradient")
    c = explain(name, measured[0], measured[1], graph=graph, events=evs, model=model, param=p,
                adapters=adapter_switch_reasons(model) if model is not None else {},
                unused=_unused(model, name, cap), lost=lost, lines=lines)
    return _from_cause(name, c, model, fn)


def why(source: Any, name: str, *, fn: Callable[[], Any] | None = None, capture: Capture | None = None) -> Why:
    """Why ``name``'s gradient is missing, zero, tiny or scaled: the first cause, with its evidence.

    ``source``: a :class:`~gradviz_nb.doctor.Diagnosis` from ``gv.doctor``; an
    :class:`~gradviz_nb.tracing.AutogradGraph` from ``gv.trace`` (with the forward under ``gv.capture``, the
    capture's evidence is found by itself, or pass ``capture=``); a loss tensor; or the model, with ``fn``
    returning the loss (run once in the sandbox, the model left as it was). Example::

        with gv.capture(model) as cap:
            loss = criterion(model(x), y)
        loss.backward()
        w = gv.why(gv.trace(loss, model=model, capture=cap), "fc1.weight")
        w.status, w.kind, w.cause     # "none", "left-graph", "its value left the graph through .item() at ..."
        gv.why(model, "fc1.weight", fn=lambda: criterion(model(x), y)).prove()
    """
    if not isinstance(name, str) or not name:
        raise GradvizError(f"name must be a parameter name (a non-empty str), got {name!r}.")
    if fn is not None and not callable(fn):
        raise GradvizError(f"fn must be a function returning the loss, got {type(fn).__name__}.")
    if capture is not None and not isinstance(capture, Capture):
        raise GradvizError(f"capture must be a gv.Capture (from gv.capture(model)), got {type(capture).__name__}.")
    if _is_diagnosis(source):  # by shape: doctor.findings imports this module for Diagnosis.why
        return _from_diagnosis(source, name)
    if isinstance(source, AutogradGraph):
        _known(name, _graph_params(source), None)
        return analyse(name, graph=source, model=capture.model if capture is not None else None, cap=capture)
    if isinstance(source, nn.Module):
        if fn is None:
            raise GradvizError("gv.why(model, name) needs fn=, a function returning the loss (it runs once, in "
                               "the sandbox); or pass the graph (gv.trace) or the Diagnosis (gv.doctor).")
        not_meta("gv.why", source)
        if unwrap_compiled(source) is not source:
            raise GradvizError("gv.why(model, ...) re-runs fn under capture, which a torch.compile'd model skips: "
                               "pass the model before torch.compile (its parameters are the same tensors), with "
                               "an fn that calls it.")
        _known(name, [], source)
        return _observed(source, name, fn)
    if isinstance(source, torch.Tensor):
        if source.grad_fn is None:
            raise GradvizError("the tensor has no grad_fn: pass the loss (before backward frees nothing: the "
                               "graph is read, not run), a gv.trace graph, a Diagnosis or a model with fn=.")
        model = capture.model if capture is not None else None
        graph = trace(source, model=model, capture=capture)
        _known(name, _graph_params(graph), None)
        return analyse(name, graph=graph, model=model, cap=capture, lost=_lost_in(source, graph, name, model, capture))
    raise GradvizError(f"gv.why explains a Diagnosis, an AutogradGraph, a loss tensor or a model (with fn=), got "
                       f"{type(source).__name__}.")


def _graph_params(graph: AutogradGraph) -> list[str]:
    """Leaf names, and every parameter of the traced model (those the loss never reached have no leaf)."""
    modules = graph.nx.graph.get("modules") or {}
    return list(graph.leaves()) + [n for m in modules.values() for n in m.get("parameters", [])]


def _known(name: str, known: list[str], model: nn.Module | None) -> None:
    of_model = [n for n, _ in model.named_parameters(remove_duplicate=False)] if model else []
    names = list(dict.fromkeys(known + of_model))
    if name in names:
        return
    import difflib

    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    raise GradvizError(f"no parameter named {name!r} (not a leaf of the graph, nor a parameter of its model){hint}")


def _is_diagnosis(source: Any) -> bool:
    return type(source).__name__ == "Diagnosis" and all(
        hasattr(source, a) for a in ("findings", "graph", "steps", "restored"))


def _from_diagnosis(dx: Any, name: str) -> Why:
    """The answer the doctor's step explained for ``name``; else the finding about it (its own, its module's,
    then one about the whole model: a step finding such as a second backward speaks of every parameter); a
    gradient the step could not explain yields to a finding that names a cause."""
    known = (_REMEMBERED.get(dx.graph, {}) if dx.graph is not None else {}).get(name)
    if known is not None and known.kind not in (None, "vanishing"):
        return known
    finding = next((f for f in dx.findings if f.target == name or name.startswith(f.target + ".")), None) or \
        next((f for f in dx.findings if f.target in ("(model)", "")), None)
    if finding is not None:
        return Why(name, _finding_status(dx, name, finding.kind), finding.kind, finding.message, finding.evidence,
                   finding.fix, finding.node)
    if known is not None:
        return known
    if dx.graph is None:
        return Why(name, "ok", None, "the doctor found nothing about it", "no backward ran in the observed steps",
                   "nothing to fix")
    leaf = dx.graph.leaves().get(name)
    if leaf is not None:
        return Why(name, "ok", None, "the doctor found nothing about it",
                   f"{name} is leaf {leaf} of the step's graph and was not flagged", "nothing to fix", leaf)
    if dx.graph.nx.graph.get("modules"):  # the model's parameters are known: an unknown name is refused, not "ok"
        _known(name, _graph_params(dx.graph), None)
    return Why(name, "ok", None, "the doctor found nothing about it", f"{name} is not in the step's graph and was "
               "not flagged (not a trainable parameter of the model the doctor watched?)", "nothing to fix")


ZERO_KINDS = ("zero-derivative", "saturated", "hook-zeroed", "custom-backward", "vanishing", "dead-adapter")


SCALING_KINDS = ("double-backward", "unscaled-accumulation", "unscaled-step", "clip-before-unscale")
"""Findings that measured the gradient the step used as a multiple of the loss's own."""


def _finding_status(dx: Any, name: str, kind: str) -> str:
    """What the step measured for ``name``, from the gradient its first optimizer step used (``used``, else the
    gradient statistics ``grad_norms``):
    "none" (no gradient, or no leaf of the step's graph), "zero", "tiny" (against the weight's norm), "scaled"
    for a finding that measured a factor on it, else "ok" (the finding is about the step); a zero-kind finding
    with nothing measured says "zero"."""
    from gradviz_nb.probes.causes import TINY

    used = getattr(dx, "used", {}) or {}  # what the optimizer step used: cleared or clipped after backward
    norms = getattr(dx, "grad_norms", {}) or {}
    if name in used or name in norms:
        g = used[name] if name in used else norms[name]
        if g is None:
            return "none"
        if g == 0:
            return "zero"
        weight = _weight_norm(dx, name)
        if weight and g / weight < TINY:
            return "tiny"
        return "scaled" if kind in SCALING_KINDS else "ok"
    if dx.graph is None or name not in dx.graph.leaves():
        return "none"
    return "zero" if kind in ZERO_KINDS else "ok"


def _weight_norm(dx: Any, name: str) -> float:
    """The norm of the parameter's values, read from the step's graph (0.0 when it is gone)."""
    node = dx.graph.leaves().get(name) if dx.graph is not None else None
    ref = dx.graph.tensors.get(node) if node is not None else None
    t = ref() if ref is not None else None
    return float(t.detach().double().norm()) if isinstance(t, torch.Tensor) else 0.0


def _lost_in(loss: torch.Tensor, graph: AutogradGraph, name: str, model: nn.Module | None,
             cap: Capture | None) -> Lost | None:
    """Where a zero or tiny gradient was lost, from a recorded backward of ``loss`` (its graph still alive;
    ``.grad`` left as it is), else None."""
    from gradviz_nb.probes.backward import record_backward
    from gradviz_nb.probes.causes import where_lost

    leaf = graph.leaves().get(name)
    p = _param(graph, model, name)
    status = grad_status(p)[0]
    if leaf is None or status not in ("zero", "tiny"):
        return None
    try:
        rec = record_backward(loss, model=model, capture=cap, grad=torch.ones_like(loss))
    except (RuntimeError, GradvizError):  # the graph was freed by an earlier backward: nothing to record
        return None
    return where_lost(rec, rec.graph, rec.graph.leaves().get(name, leaf), zero=status == "zero")


class Lines(TorchFunctionMode):
    """The user's source line of every autograd node the forward makes, by sequence number (the re-runs of why
    and of the doctor's zero replay only: the capture's hot path records none). ``on = False`` stops reading
    lines (while a recorded backward runs inside the mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[int, str] = {}
        self.on = True

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not self.on:
            return func(*args, **(kwargs or {}))
        before = next_sequence_nr()
        out = func(*args, **(kwargs or {}))
        after = next_sequence_nr()
        if after > before:
            line = user_line()
            for seq in range(before, after):
                self.lines.setdefault(seq, line)
        return out


def _observed(model: nn.Module, name: str, fn: Callable[[], Any]) -> Why:
    """Run ``fn`` once under capture in the sandbox, record its backward node by node, and explain with
    everything observed (a zero or tiny gradient: where the recorded backward lost it)."""
    from gradviz_nb.probes.backward import record_backward
    from gradviz_nb.probes.causes import where_lost

    p = dict(model.named_parameters(remove_duplicate=False))[name]
    with sandbox(model):
        for q in model.parameters():
            q.grad = None
        with capture(model) as cap, Lines() as seen, no_backward_inside("gv.why"):
            loss = fn()
        if not isinstance(loss, torch.Tensor):
            raise GradvizError(f"fn must return the loss tensor, got {type(loss).__name__}.")
        graph = None
        if loss.grad_fn is not None:
            rec = record_backward(loss, model=model, capture=cap, accumulate=True, grad=torch.ones_like(loss))
            graph = rec.graph
        elif loss.requires_grad:
            typed_torch.backward(loss, torch.ones_like(loss))
        status = grad_status(p)
        leaf = graph.leaves().get(name) if graph is not None else None
        lost = None
        if graph is not None and leaf is not None and status[0] in ("zero", "tiny"):
            lost = where_lost(rec, graph, leaf, zero=status[0] == "zero")
        return analyse(name, graph=graph, model=model, cap=cap, fn=fn, status=status, lost=lost,
                       lines=seen.lines)

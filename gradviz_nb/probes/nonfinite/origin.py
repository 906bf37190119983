"""Where a loss that is already NaN/Inf got it in the forward pass, read from what autograd saved.

:func:`gv.find_nonfinite` watches every op while ``fn`` runs. :func:`gv.record_backward` has only the loss
and its graph: the forward already ran. This reads the tensors the graph's nodes saved for backward (no
recompute: a checkpointed node's are skipped) and answers in :func:`find_nonfinite`'s terms (a
:class:`NonFinite` with the same op names, causes from the same :func:`classify`, and module paths):

* a node that saved a non-finite ``result`` made a non-finite output; a node that saved a non-finite input
  (``self``, ``other``, ``mat2``, ...) received one, made by the node feeding that input;
* the birth is a node whose output is known non-finite while every input it saved is finite, the earliest
  in the forward (autograd sequence number); a parameter or input that already held NaN/Inf comes first
  ("already non-finite");
* no node saved what shows it (an op that saves nothing, e.g. ``add``): the earliest node whose output is
  known non-finite, cause "other", and the loss's own op when nothing else is known.

The source line is the one :func:`find_nonfinite` names, by the same rule
(:func:`~gradviz_nb.tracing.lines.op_line`): the capture's torch function mode kept it for every op that made a
node (``with gv.capture(model)``), and it is read here by the node's sequence number. Without such a capture
(``gv.watch`` runs no mode) :attr:`NonFinite.line` is empty, and the stop says how to get it. The answer's
site (op, module, module type, line) is :func:`find_nonfinite`'s for the same forward birth.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from gradviz_nb.analysis.derivatives import SAVED_INPUT
from gradviz_nb.probes.nonfinite.found import NonFinite, classify, input_info
from gradviz_nb.tracing import AutogradGraph
from gradviz_nb.tracing.capture import recent_line

__all__ = ["forward_origin"]

# Causes whose inputs alone make the NaN/Inf (what the op's output then held).
_MAKES = {"log(0)": "Inf", "division by zero": "Inf", "exp overflow": "Inf", "0/0": "NaN", "log of a negative": "NaN",
          "sqrt of a negative": "NaN"}

_SLOT = {"self": 0, "input": 0, "other": 1}  # the usual saved names, for ops SAVED_INPUT does not list


def _bad(t: Any) -> bool:
    return (isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.layout == torch.strided
            and not t.is_meta and t.numel() > 0 and not bool(torch.isfinite(t.detach()).all()))


def _kind(t: torch.Tensor) -> str:
    d = torch.view_as_real(t.detach()) if t.is_complex() else t.detach()
    nan, inf = bool(d.isnan().any()), bool(d.isinf().any())
    return "NaN and Inf" if nan and inf else "NaN" if nan else "Inf"


def _base(op: str) -> str:
    """``LogBackward0`` -> ``log``: the forward op's name, as aten names it where they agree."""
    name = re.sub(r"Backward\d*$", "", op)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _saved(fn: Any, name: str) -> Any:
    try:
        return getattr(fn, f"_saved_{name}")
    except (RuntimeError, AttributeError):  # freed by an earlier backward, or not an attribute
        return None


@dataclass
class _SavedEvidence:
    """What the graph's saved tensors show: non-finite outputs per node, and the inputs each node saved."""

    out: dict[Any, torch.Tensor] = field(default_factory=dict)  # node -> a non-finite output it made
    fed_bad: set[Any] = field(default_factory=set)  # nodes that saved a non-finite input
    inputs: dict[Any, list[torch.Tensor]] = field(default_factory=dict)  # node -> the inputs it saved, by slot
    slots_of: dict[Any, set[int]] = field(default_factory=dict)  # node -> the input slots it saved

    def complete(self, fn: Any) -> bool:
        """It saved every input that needs grad: its inputs are all known."""
        needed = {i for i, (nxt, _) in enumerate(fn.next_functions) if nxt is not None}
        return bool(self.slots_of.get(fn)) and needed <= self.slots_of[fn]


def _read_saved(graph: AutogradGraph, nodes: Mapping[Any, str], loss: torch.Tensor) -> _SavedEvidence:
    attrs = graph.nx.nodes
    ev = _SavedEvidence(out={loss.grad_fn: loss})
    for fn, node_id in nodes.items():
        a = attrs[node_id]
        if a["kind"] == "leaf":
            var = getattr(fn, "variable", None)
            if isinstance(var, torch.Tensor) and _bad(var):
                ev.out.setdefault(fn, var)
            continue
        if "Checkpoint" in a["op"]:
            continue  # unpacking would recompute the block
        slots = SAVED_INPUT.get(a["op"], _SLOT)
        saved_inputs: list[tuple[int, torch.Tensor]] = []
        for s in a["saved"]:
            t = None if s.get("packed") else _saved(fn, s["name"])
            if not isinstance(t, torch.Tensor):
                continue
            if s["name"] == "result":
                if _bad(t):
                    ev.out.setdefault(fn, t)
                continue
            slot = slots.get(s["name"])
            if slot is None:
                continue
            saved_inputs.append((slot, t))
            if _bad(t):
                ev.fed_bad.add(fn)
                producer = fn.next_functions[slot][0] if slot < len(fn.next_functions) else None
                if producer is not None:
                    ev.out.setdefault(producer, t)
        ev.inputs[fn] = [t for _, t in sorted(saved_inputs, key=lambda p: p[0])]
        ev.slots_of[fn] = {slot for slot, _ in saved_inputs}
    return ev


def _inferred(graph: AutogradGraph, nodes: Mapping[Any, str], ev: _SavedEvidence, start: list[Any]
              ) -> dict[Any, tuple[str, str, str]]:
    """Upstream of outputs known non-finite from nodes that did not save every input (``h * 0.0`` saves only
    the 0): an op whose saved, finite inputs alone make NaN/Inf (log(0), a division by zero, sqrt of a
    negative), as find_nonfinite's transitions: node -> (kind, cause, detail)."""
    attrs = graph.nx.nodes
    found: dict[Any, tuple[str, str, str]] = {}
    stack: list[Any] = list(start)
    visited: set[Any] = set()
    while stack and len(visited) < 10_000:
        fn = stack.pop()
        if fn in visited or fn not in nodes:
            continue
        visited.add(fn)
        values = ev.inputs.get(fn)
        if values and ev.complete(fn) and not any(_bad(v) for v in values):
            cause, detail = classify(_base(attrs[nodes[fn]]["op"]), list(values), False, True)
            if cause in _MAKES:
                found[fn] = (_MAKES[cause], cause, detail)
            continue
        stack.extend(nxt for nxt, _ in fn.next_functions if nxt in nodes and attrs[nodes[nxt]]["kind"] == "op")
    return found


def forward_origin(graph: AutogradGraph, nodes: Mapping[Any, str], loss: torch.Tensor) -> NonFinite | None:
    """The forward birth of the NaN/Inf in ``loss`` (None when the loss is finite), from ``graph`` (traced
    from ``loss``) and ``nodes`` (its autograd nodes -> node ids, as :func:`trace_with_nodes` gives them)."""
    if not _bad(loss):
        return None
    attrs = graph.nx.nodes
    ev = _read_saved(graph, nodes, loss)
    known = [fn for fn in ev.out if fn in nodes]
    if not known:
        return None

    def order(fn: Any) -> int:
        return -1 if attrs[nodes[fn]]["kind"] == "leaf" else int(attrs[nodes[fn]]["seq"])

    # a birth: its output is non-finite, and it saved its inputs (or is a leaf) and none of them is
    births = [fn for fn in known if fn not in ev.fed_bad and (attrs[nodes[fn]]["kind"] == "leaf" or ev.complete(fn))]
    inferred = _inferred(graph, nodes, ev, [fn for fn in known if fn not in ev.fed_bad and fn not in births])
    reached = (f"the loss ({_kind(loss)})",)
    fn = min([*births, *inferred] if inferred else births or known, key=order)
    a = attrs[nodes[fn]]
    if fn in inferred:
        kind, cause, detail = inferred[fn]
        found = NonFinite("forward", f"aten.{_base(a['op'])}", a.get("module") or "", "", "", "", kind, cause,
                          detail, tuple(input_info(v) for v in ev.inputs[fn]), reached)
    else:
        found = _answer(a, ev.out[fn], ev.inputs.get(fn, []), bool(births), reached)
    return _placed(found, graph, a)


def _placed(found: NonFinite, graph: AutogradGraph, a: Mapping[str, Any]) -> NonFinite:
    """``found`` with its module's type and the user's source line, as find_nonfinite's site has them."""
    modules = graph.nx.graph.get("modules", {})
    module_type = modules.get(found.module, {}).get("type", "") if found.op != "(a leaf)" else ""
    line = recent_line(int(a["seq"])) if a["kind"] == "op" else ""
    return replace(found, module_type=module_type, line=line)


def _answer(a: Mapping[str, Any], t: torch.Tensor, values: list[torch.Tensor], born: bool,
            reached: tuple[str, ...]) -> NonFinite:
    kind, module = _kind(t), a.get("module") or ""
    if a["kind"] == "leaf":
        name = (a.get("names") or [""])[0] or f"a leaf of shape {list(t.shape)}"
        return NonFinite("forward", "(a leaf)", module, "", "", "", kind, "already non-finite",
                         f"{name} already held {kind} before the forward pass (the data, or a parameter broken "
                         "by an earlier step)", (input_info(t),), reached)
    base = _base(a["op"])
    if born:
        cause, detail = classify(base, list(values), "NaN" in kind, "Inf" in kind)
    else:
        cause, detail = "other", (f"{base} passed on {kind}; the op that made it saved nothing that shows it "
                                  "(gv.find_nonfinite(fn) re-runs the step and names it)")
    return NonFinite("forward", f"aten.{base}", module, "", "", "", kind, cause, detail,
                     tuple(input_info(v) for v in values), reached)

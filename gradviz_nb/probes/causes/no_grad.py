"""Why a parameter has no gradient, from what was observed: a recorded cut, a module that never ran,
a backward that has not run. Where nothing was observed, the reason says so and how to find out.

Evidence, strongest first:
1. a ``detach()`` / ``.data`` recorded by ``gv.capture`` whose source depends on the parameter
   (the ghost's ``cut`` list), with the module it ran in and the user's source line; then the capture's other
   recorded cuts (a value leaving the graph, a comparison, a use under no_grad, a reentrant checkpoint);
2. no parameter of the model has a gradient, or the parameter is in the traced loss's graph: backward
   has not run on that loss (or the gradients were cleared since);
3. the capture saw its module never called, or called without making any autograd node (no_grad);
4. otherwise what is known (backward reached other parameters, or not) and which call gives more.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from torch import nn

from gradviz_nb.probes.causes.walk import cut_cause, first_cut

if TYPE_CHECKING:
    from gradviz_nb.tracing import AutogradGraph, Capture

__all__ = ["adapter_switch_reasons", "module_seen", "no_grad_reason"]

HEAD = "requires_grad but .grad is None"


def _ghost_records(graph: AutogradGraph | None, capture: Capture | None) -> list[dict[str, Any]]:
    """Detach ghosts as plain records (label, where, line, cut), from the graph or else the capture.

    Only detached values that were used again by an op with a gradient count as cuts: a ``loss.detach()``
    for logging is upstream of every parameter, yet cuts nothing.
    """
    if graph is not None and graph.nx.graph.get("ghosts"):
        return [gh for gh in graph.nx.graph["ghosts"] if gh["kind"] == "detached" and gh["targets"]]
    if capture is None:
        return []
    return [{"label": gh.label, "where": gh.where, "line": gh.line, "cut": gh.cut}
            for gh in capture.ghosts if gh.kind == "detached" and gh.target_seqs]


def _cut_by(names: Sequence[str], ghosts: Iterable[dict[str, Any]]) -> str:
    hits = []
    for gh in ghosts:
        if not set(names) & set(gh.get("cut", ())):
            continue
        where = f"module {gh['where']!r}" if gh.get("where") else "the model's top level"
        line = f" at {gh['line']}" if gh.get("line") else ""
        hits.append(f"the {gh['label']} in {where}{line}")
    if not hits:
        return ""
    return f"its path to the loss was cut by {'; '.join(dict.fromkeys(hits))} (recorded by gv.capture)"


def module_seen(module: str, capture: Capture | None) -> str:
    if capture is None or not module or not capture.calls:
        return ""
    calls = [c for c in capture.calls if c.path == module]
    if not calls:
        return (f"gv.capture saw no call of its module {module!r} in this forward: the parameter is not used "
                "(an unused branch, or a module kept outside the forward)")
    if all(c.end >= 0 and c.end <= c.start for c in calls):
        return (f"its module {module!r} ran but made no autograd node: it ran under torch.no_grad() / "
                "inference_mode, or nothing in it required grad")
    return ""


def no_grad_reason(model: nn.Module, name: str, names: Sequence[str], module: str, any_grad: bool,
                   graph: AutogradGraph | None, capture: Capture | None) -> str:
    """The reason text of a ``no-grad`` flag on parameter ``name`` (all its tied ``names``)."""
    cut = _cut_by(names, _ghost_records(graph, capture))
    if cut:
        return f"{HEAD}: {cut}"
    event = first_cut(capture.evidence, names) if capture is not None else None
    if event is not None:  # a value that left the graph, a comparison, no_grad, a reentrant checkpoint
        found = cut_cause("none", name, event, capture.evidence if capture is not None else [])
        seen = module_seen(module, capture) if event.kind == "no-grad" else ""
        return f"{HEAD}: {found.cause} ({found.evidence})" + (f"; {seen}" if seen else "")
    if not any_grad:
        return (f"{HEAD}, like every parameter of the model: backward() has not run since the gradients were "
                "last cleared (zero_grad() with set_to_none, or a new model); call loss.backward() first")
    if graph is not None and any(n in graph.leaves() for n in names):
        return (f"{HEAD}, yet it is in the graph of the traced loss: backward() has not run on that loss, or "
                "this gradient was cleared after it (zero_grad(set_to_none=True))")
    unused = module_seen(module, capture)
    if unused:
        return f"{HEAD}: {unused}"
    if graph is None:
        return (f"{HEAD} while other parameters have one, so backward ran but never reached it: its path to the "
                "loss was cut or it was not used. Trace the loss (graph=gv.trace(loss, model=model, capture=cap), "
                "with the forward under gv.capture) to see where")
    seen = ("gv.capture recorded no cut on its path (no detach()/.data, no value leaving the graph, no use "
            "under no_grad)") if graph.nx.graph.get("captured") else (
        "the forward was not captured, so cuts were not recorded (use gv.capture to see them)")
    return f"{HEAD}: it is not in the graph of this loss (no path from it to the loss); {seen}"


def adapter_switch_reasons(model: nn.Module) -> dict[str, str]:
    """Adapter layers switched off by their library: module path -> what was seen.

    peft's ``disable_adapter()`` / ``enable_adapters(False)`` set ``disable_adapters`` on each tuner
    layer (and freeze its adapter weights); ``merge_adapter()`` sets ``merged``. Either way the layer
    computes through its base weights only, and the adapter learns nothing.
    """
    out = {}
    for path, m in model.named_modules():
        if getattr(m, "disable_adapters", False) is True:
            out[path] = ("adapter switched off: peft's disable_adapters is True on this layer (set by "
                         "disable_adapter() or enable_adapters(False)), so its weights are frozen and the layer "
                         "computes its base only; call enable_adapters(True) / leave the disable_adapter() block")
        elif getattr(m, "merged", False) is True and hasattr(m, "merged_adapters"):
            out[path] = (f"adapter merged into the base weights (peft merged_adapters={list(m.merged_adapters)}): "
                         "the layer runs its base only and the adapter weights get no gradient; call "
                         "unmerge_adapter() before training")
    return out

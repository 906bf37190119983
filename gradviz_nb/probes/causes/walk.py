"""The first cause of a missing, zero or tiny gradient, read from evidence: the traced graph and the
capture's forward record (:mod:`gradviz_nb.tracing.evidence`).

Walking from the parameter towards the loss, the first thing that explains the measured gradient wins:

- not in the graph (``.grad`` None): frozen (``requires_grad=False``, or a frozen parent module), an adapter
  its library switched off, then the first recorded cut whose upstream parameters include it, in forward
  order (``detach()``, ``.data``, a value that left the graph through ``.item()``/``.tolist()``/numpy/an
  integer cast, a comparison, a use under ``torch.no_grad()``, a reentrant checkpoint's no-grad forward),
  then the module that never ran;
- in the graph with a zero or tiny gradient: a hook measured returning less than it received, a node on
  every path to the loss whose derivative is zero (``round``, ``sign``, ...; a saturated ReLU/clamp), a
  custom ``autograd.Function`` on every path, the most saturated activation on its paths, a hook on the
  parameter itself;
- expected zeros are explained, not flagged: every path multiplies by a parameter that is exactly zero
  (measured on its values: LoRA's ``B``, a zero-initialised adapter), whatever it is called.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import torch
from torch import nn

from gradviz_nb.kinds import Kind, fix_for
from gradviz_nb.probes.causes.cause import Cause, _custom, _hook_cause, _made_at, _on_bound, _place, _saturated
from gradviz_nb.probes.causes.lost import lost_cause
from gradviz_nb.probes.causes.zeros import Lost, expected_zero
from gradviz_nb.tracing import AutogradGraph
from gradviz_nb.tracing.evidence import Evidence

__all__ = ["CUT_KINDS", "TINY", "cut_cause", "events_from_ghosts", "explain", "first_cut", "grad_status"]

TINY = 1e-6  # |grad| / |weight| below this is "tiny": an update of a millionth of the weight at lr 1
CUT_KINDS = ("detached", "data-access", "left-graph", "zero-derivative", "no-grad", "reentrant-checkpoint")
ZERO_OPS = {"RoundBackward0", "SignBackward0", "SgnBackward0", "FloorBackward0", "CeilBackward0", "TruncBackward0"}


def grad_status(p: torch.Tensor | None) -> tuple[str, str]:
    """("none" | "zero" | "tiny" | "ok", the measured numbers)."""
    if p is None:
        return "none", "the parameter could not be read"
    g = p.grad
    if g is None:
        return "none", ".grad is None"
    with torch.no_grad():
        g64 = (g.to_dense() if g.is_sparse else g).detach().double()
        norm, w = float(g64.norm()), float(p.detach().double().norm())
    if norm == 0:
        return "zero", f"every one of its {g.numel():,} gradient values is exactly 0"
    ratio = norm / w if w else float("inf")
    if ratio < TINY:
        return "tiny", f"|grad| = {norm:.3g} against |weight| = {w:.3g} (ratio {ratio:.2g})"
    return "ok", f"|grad| = {norm:.3g} (|grad|/|weight| = {ratio:.3g})"


def events_from_ghosts(graph: AutogradGraph | None) -> list[Evidence]:
    """A saved or loaded graph's recorded detaches as evidence (no capture at hand)."""
    ghosts = graph.nx.graph.get("ghosts", []) if graph is not None else []
    return [Evidence("data-access" if gh["label"] == ".data" else "detached", gh["label"], gh["where"], gh["line"],
                     i, cut=list(gh.get("cut", [])), shape=list(gh["shape"]), targets=list(gh["targets"]))
            for i, gh in enumerate(ghosts) if gh["kind"] == "detached" and gh["targets"]]


def first_cut(events: Sequence[Evidence], names: Iterable[str]) -> Evidence | None:
    """The first recorded cut (forward order) whose upstream parameters include one of ``names``."""
    wanted = set(names)
    return next((e for e in events if e.kind in CUT_KINDS and wanted & set(e.cut)), None)


def _entered_after(events: Sequence[Evidence], left: Evidence) -> Evidence | None:
    return next((e for e in events if e.order > left.order and e.kind == "entered"), None)


def cut_cause(status: str, name: str, e: Evidence, events: Sequence[Evidence], node: str = "") -> Cause:
    """A recorded cut, worded with its op, line, module."""
    at = _place(e)
    kind: Kind
    if e.kind == "left-graph":
        back = _entered_after(events, e)
        came = (f"; it came back as a new tensor through {back.op} at {_place(back)}, which has no gradient "
                "path to the parameter") if back is not None else ""
        kind, cause = "left-graph", f"its value left the graph through {e.op} at {at}"
        took = e.arg or f"a tensor {e.shape}"
        gave = e.value or "a Python value (or an integer tensor)"
        evidence = (f"gv.capture saw {e.op} at {e.line} take {took} computed from {name} and return {gave}, which "
                    f"autograd does not follow (its output depends on the input's values, measured){came}")
    elif e.kind == "zero-derivative":
        kind, cause = "zero-derivative", f"a comparison ({e.op}) at {at} is all its path carries to the loss"
        evidence = (f"gv.capture saw {e.op} at {e.line} take a tensor {e.shape} computed from {name}; its result is "
                    "a boolean/integer tensor, whose derivative is zero (autograd does not track it)")
    elif e.kind == "no-grad":
        kind, cause = "no-grad", f"it was used under {e.op} at {at}"
        evidence = (f"gv.capture saw {name} used by an op at {e.line} while grad mode was off ({e.op}), and no op "
                    "with grad enabled used it")
    elif e.kind == "reentrant-checkpoint":
        kind = "reentrant-checkpoint"
        cause = (f"a reentrant checkpoint (called at {e.via}) ran {e.where!r} under no_grad, and none of its inputs "
                 "required grad")
        evidence = (f"gv.capture saw {name} used at {e.line} inside torch.utils.checkpoint's reentrant forward "
                    "(run under no_grad); none of the checkpoint's inputs required grad, so PyTorch made no "
                    "backward node for it and its inner parameters get no gradient")
    else:
        kind = "data-access" if e.kind == "data-access" else "detached"
        cause = f"its path to the loss was cut by the {e.op} at {at}"
        evidence = (f"gv.capture saw {e.op} at {e.line} applied to a tensor {e.shape} computed from {name}, and the "
                    "result used again by the loss")
    return Cause(status, kind, cause, evidence, fix_for(kind), node, e)


# -- in the graph: blockers on the paths to the loss -------------------------------------------------------


def _reach(g: nx.DiGraph, leaf: str, roots: list[str], removed: set[str]) -> bool:
    """Does ``leaf`` still reach a root with ``removed`` nodes taken out?"""
    seen, stack = {leaf}, [leaf]
    targets = set(roots)
    while stack:
        for nxt in g.successors(stack.pop()):
            if nxt in targets:
                return True
            if nxt not in seen and nxt not in removed:
                seen.add(nxt)
                stack.append(nxt)
    return False


def _distances(g: nx.DiGraph, leaf: str) -> dict[str, int]:
    return dict(nx.single_source_shortest_path_length(g, leaf))


@dataclass(frozen=True)
class _Blocker:
    node: str
    kind: Kind
    event: Evidence | None
    hook: Any = None  # a module's full backward hook (not measured: registered before the capture)


def _module_hook(model: nn.Module | None, attrs: dict[str, Any]) -> Any:
    """The full backward hook of the module a ``BackwardHookFunctionBackward`` node belongs to, if any."""
    if model is None or attrs.get("op") != "BackwardHookFunctionBackward":
        return None
    try:
        module = model.get_submodule(str(attrs.get("module", "")))
    except AttributeError:
        return None
    hooks = getattr(module, "_backward_hooks", None) or {}
    return next(iter(hooks.values()), None)


def _blockers(graph: AutogradGraph, dist: dict[str, int], events: Sequence[Evidence], status: str,
              model: nn.Module | None = None) -> list[_Blocker]:
    """Nodes on the leaf's paths that can zero its gradient, nearest to the parameter first."""
    g = graph.nx
    by_seq: dict[int, list[Evidence]] = {}
    for e in events:
        if e.seq is not None:
            by_seq.setdefault(e.seq, []).append(e)
    out: list[_Blocker] = []
    for n in dist:
        attrs = g.nodes[n]
        evs = by_seq.get(attrs.get("seq", -1), []) if attrs.get("kind") == "op" else []
        hook = next((e for e in evs if e.kind == "hook" and _zeroed(e)), None)
        sat = next((e for e in evs if e.kind == "saturated"), None)
        if hook is not None:
            out.append(_Blocker(n, "hook-zeroed", hook))
        elif attrs.get("op") in ZERO_OPS:
            out.append(_Blocker(n, "zero-derivative", next((e for e in evs if e.kind == "zero-derivative"), None)))
        elif sat is not None and sat.numbers.get("fraction", 0.0) >= 1.0 and status != "none":
            out.append(_Blocker(n, "saturated", sat))
        elif _custom(attrs):
            out.append(_Blocker(n, "custom-backward", None))
        elif status == "zero" and _module_hook(model, attrs) is not None:
            out.append(_Blocker(n, "hook-zeroed", None, _module_hook(model, attrs)))
    return sorted(out, key=lambda b: dist[b.node])


def _zeroed(e: Evidence) -> bool:
    nums = e.numbers
    return bool(nums) and nums["grad_in"] > 0 and nums["grad_out"] < nums["grad_in"] * TINY


def _in_graph(status: str, name: str, graph: AutogradGraph, leaf: str, events: Sequence[Evidence],
              p: torch.Tensor | None, model: nn.Module | None = None, lines: dict[int, str] | None = None
              ) -> Cause | None:
    g = graph.nx
    dist = _distances(g, leaf)
    leaf_hook = next((e for e in events if e.kind == "hook" and name in e.cut and _zeroed(e)), None)
    if leaf_hook is not None:
        return _hook_cause(status, name, leaf_hook, leaf)
    blockers = _blockers(graph, dist, events, status, model)
    removed = {b.node for b in blockers}
    if blockers and status in ("none", "zero") and not _reach(g, leaf, graph.roots, removed):
        # the nearest one whose removal alone... the nearest blocker every remaining path passes
        first = next((b for b in blockers if not _reach(g, leaf, graph.roots, {b.node})), blockers[0])
        return _blocker_cause(status, name, graph, first, len(blockers), lines)
    if status == "tiny":
        sat = _most_saturated(dist, events, graph)
        if sat and not _reach(g, leaf, graph.roots, {n for _, n in sat}):  # they block every path
            e, node = min(sat, key=lambda s: s[0].numbers.get("derivative", 1.0))
            return _saturated(status, name, e, node, graph)
    dead = _dead_input(graph, dist, events) if status == "zero" else None
    if dead is not None:
        e, node = dead
        if e.kind == "zero-derivative":
            return Cause(status, "zero-derivative", f"its layer's input is computed from {e.op} at {_place(e)}, "
                         "whose outputs were all zero", f"measured in forward: all {e.shape} outputs of {e.op} were 0; "
                         f"a weight's gradient is its input times the output's gradient, so {name}'s is zero",
                         fix_for("zero-derivative"), node, e)
        return Cause(status, "saturated", f"its layer's input is computed from {e.op} at {_place(e)}, whose "
                     "outputs all sat in its flat region", f"measured in forward: {e.numbers['fraction']:.1%} of "
                     f"{e.op}'s {e.shape} outputs were saturated{_on_bound(e)} (a dead ReLU outputs zeros, a "
                     "saturated sigmoid a constant); a weight's gradient is its input times the output's gradient, "
                     f"so {name}'s is zero",
                     fix_for("saturated"), node, e)
    hook = _live_hooks(p)
    if hook is not None and status in ("zero", "tiny"):
        return Cause(status, "hook-zeroed", f"a hook on {name} ({hook[0]}) leaves it {status}",
                     f"{name} carries the tensor hook {hook[0]}, and nothing on its {len(dist) - 1} nodes to the "
                     "loss has a zero derivative", fix_for("hook-zeroed"), leaf, hook=hook[1])
    return None


def _dead_input(graph: AutogradGraph, dist: dict[str, int], events: Sequence[Evidence]) -> tuple[Evidence, str] | None:
    """An activation whose outputs all sat in its flat region (a dead ReLU: all zero; a saturated sigmoid: all
    constant), upstream of an op on the parameter's path without being on it: the layer's input."""
    seqs = {d.get("seq"): n for n, d in graph.nx.nodes(data=True) if d.get("kind") == "op"}
    for e in events:
        node = seqs.get(e.seq) if e.kind in ("saturated", "zero-derivative") else None
        full = e.numbers.get("fraction", 0.0) >= 1.0 or e.numbers.get("zeros", 0.0) >= 1.0
        if node is not None and node not in dist and full and \
                not dist.keys().isdisjoint(nx.descendants(graph.nx, node)):
            return e, node
    return None


def _live_hooks(p: torch.Tensor | None) -> tuple[str, Any] | None:
    from gradviz_nb.tracing.evidence import hook_name

    hooks = getattr(p, "_backward_hooks", None) or {}
    for hook in hooks.values():
        return hook_name(getattr(hook, "__wrapped__", hook)), hook
    return None


def _blocker_cause(status: str, name: str, graph: AutogradGraph, b: _Blocker, count: int,
                   lines: dict[int, str] | None = None) -> Cause:
    attrs = graph.nx.nodes[b.node]
    module = f" in module {attrs.get('module')!r}" if attrs.get("module") else ""
    more = f" ({count - 1} more such nodes on its paths)" if count > 1 else ""
    e = b.event
    if b.kind == "hook-zeroed" and e is not None:
        return _hook_cause(status, name, e, b.node)
    if b.kind == "hook-zeroed":
        from gradviz_nb.tracing.evidence import hook_name

        hook = hook_name(b.hook)
        return Cause(status, "hook-zeroed", f"the full backward hook {hook} of module {attrs.get('module')!r} "
                     "passes no gradient back", f"every path from {name} to the loss runs through the backward hook "
                     f"node of {attrs.get('module')!r}, {name}'s gradient is exactly zero, and no op on "
                     f"those paths has a zero derivative{more}", fix_for("hook-zeroed"), b.node, hook=b.hook)
    if b.kind == "custom-backward":
        made = _made_at(attrs.get("seq", -1), lines)
        return Cause(status, "custom-backward", f"the custom autograd.Function {attrs['op']}"
                     f"{f' applied at {made}' if made else ''}{module} passes no "
                     "gradient back to it", f"every path from {name} to the loss runs through {attrs['op']}{module}, "
                     f"and {name}'s gradient is {status}: its backward returned None or zero for that "
                     f"input{more}; gv.gradcheck(fn, inputs) compares it with finite differences",
                     fix_for("custom-backward"), b.node)
    if b.kind == "saturated" and e is not None:
        return _saturated(status, name, e, b.node, graph)
    line = f" at {e.line}" if e is not None and e.line else ""
    op = e.op if e is not None else str(attrs["op"]).removesuffix("Backward0").lower()
    return Cause(status, "zero-derivative", f"{op}{line}{module} has a zero derivative",
                 f"every path from {name} to the loss passes through {attrs['op']}{module}, whose local "
                 f"derivative is 0 everywhere{more}", fix_for("zero-derivative"), b.node, e)


def _most_saturated(dist: dict[str, int], events: Sequence[Evidence],
                    graph: AutogradGraph) -> list[tuple[Evidence, str]]:
    seqs = {graph.nx.nodes[n].get("seq"): n for n in dist}
    sats = [(e, seqs[e.seq]) for e in events if e.kind == "saturated" and e.seq in seqs
            and e.numbers.get("fraction", 0.0) >= 0.9]
    return sats


# -- the whole walk ------------------------------------------------------------------------------------------


def _frozen(status: str, name: str, model: nn.Module | None) -> Cause:
    parent = ""
    if model is not None:
        for path, m in model.named_modules():
            params = list(m.parameters())
            if path and name.startswith(path + ".") and params and not any(q.requires_grad for q in params):
                parent = path
                break
    if parent:
        n = sum(1 for _ in model.get_submodule(parent).parameters()) if model is not None else 0
        return Cause(status, "frozen", f"its parent module {parent!r} is frozen",
                     f"all {n} parameters of {parent!r} have requires_grad=False, {name} among them",
                     f"model.{parent}.requires_grad_(True) (or leave it frozen on purpose)")
    return Cause(status, "frozen", f"{name} has requires_grad=False", f"{name}.requires_grad is False, so autograd "
                 "never computes its gradient", f"{name}.requires_grad_(True) (or leave it frozen on purpose)")


def _expected(status: str, graph: AutogradGraph | None, leaf: str | None) -> Cause | None:
    """An exact zero explained by a factor that is exactly zero (measured, :func:`expected_zero`)."""
    if status != "zero" or graph is None or leaf is None:
        return None
    reason = expected_zero(graph, [leaf])
    if not reason:
        return None
    return Cause(status, None, reason, "a weight's gradient is the product of the gradients after it and the "
                 "factors on its path; one factor is all zeros, so the product is zero (a zero-initialised "
                 "up-projection: LoRA's B, an adapter's last layer)", "nothing to fix: it learns once that "
                 "parameter moves, after the first optimizer step", leaf)


def _measured_expected(status: str, name: str, lost: Lost | None, leaf: str | None) -> Cause | None:
    """An exact zero the recorded backward lost at a node whose all-zero factor is a trainable parameter (read
    from what the node saved: a zero-initialised up-projection, whatever it is called): expected."""
    if status != "zero" or lost is None or lost.factor != 0 or lost.between or lost.zero is None \
            or not lost.zero.param or lost.zero.param == name:
        return None
    where = f" in module {lost.module!r}" if lost.module else ""
    return Cause(status, None, f"expected: {lost.op}{where} multiplies its gradient by {lost.zero.param}, which is "
                 "exactly zero (measured: every value it saved for the backward is 0), so this gradient is exactly "
                 f"zero until that parameter moves", f"measured in the backward: {lost.op}{where} received a "
                 f"gradient of norm {lost.received:.3g} and sent 0 towards {name}", "nothing to fix: it learns once "
                 "that parameter moves, after the first optimizer step", leaf or "")


def explain(name: str, status: str, measured: str, *, graph: AutogradGraph | None, events: Sequence[Evidence],
            model: nn.Module | None, param: torch.Tensor | None, adapters: dict[str, str] | None = None,
            unused: str = "", lost: Lost | None = None, lines: dict[int, str] | None = None) -> Cause:
    """The first cause of ``name``'s gradient ``status`` (see the module docstring)."""
    leaf = graph.leaves().get(name) if graph is not None else None
    if param is not None and not param.requires_grad:
        return _frozen(status, name, model)
    expected = _expected(status, graph, leaf) or _measured_expected(status, name, lost, leaf)
    if expected is not None:
        return expected
    switched = next((why for path, why in (adapters or {}).items() if name.startswith(path + ".")), "")
    if switched and status in ("none", "zero"):
        return Cause(status, "dead-adapter", "its adapter is switched off", switched, fix_for("dead-adapter"))
    penalty = _only_penalty(status, name, measured, graph, leaf, events)
    if penalty is not None:
        return penalty
    if status == "ok":
        return Cause("ok", None, "it has a gradient", measured, "nothing to fix", leaf or "")
    if leaf is None:
        cut = first_cut(events, [name])
        if cut is not None:
            return cut_cause(status, name, cut, events)
        if unused:  # a use under no_grad would be a recorded cut above: the module ran without using it
            if "made no autograd node" in unused and events:
                module = name.rsplit(".", 1)[0]
                unused = (f"its module {module!r} ran but made no autograd node, and gv.capture saw no use of {name} "
                          "under no_grad: that forward did not use it")
            return Cause(status, "unused-parameter", unused, f"{measured}; no recorded cut touches {name}",
                         fix_for("unused-parameter"))
        where = "gv.capture recorded no cut (detach, .data, a value leaving the graph, no_grad) on its path" \
            if events else "the forward was not captured, so cuts were not recorded (run it under gv.capture)"
        return Cause(status, "unused-parameter", f"{name} is not in the graph of the loss",
                     f"{measured}; no path from {name} to the loss in the traced graph; {where}",
                     fix_for("unused-parameter"))
    assert graph is not None
    leaf_hook = next((e for e in events if e.kind == "hook" and name in e.cut and _zeroed(e)), None)
    # Measured in the backward, unless the parameter's own hook did it or a layer's input measured all zero in
    # forward (a dead ReLU) is the other factor: both named below.
    own_hook = leaf_hook is not None or (lost is not None and lost.between and lost.node == leaf)
    measured_origin = lost is not None and bool(lost.maker or (lost.zero is not None and lost.zero.node))
    if lost is not None and not own_hook and (status != "zero" or measured_origin
                                              or _dead_input(graph, _distances(graph.nx, leaf), events) is None):
        return lost_cause(status, name, graph, lost, events, model, lines)
    found = _in_graph(status, name, graph, leaf, events, param, model, lines)
    if found is not None:
        return found
    if status == "none":
        return Cause(status, "no-grad", "it is in the loss's graph but has no gradient: backward has not run on "
                     "this loss, or the gradient was cleared after it", f"{measured}; {name} is leaf {leaf} of the "
                     "traced graph", "call loss.backward() (and read .grad before zero_grad())", leaf)
    return Cause(status, "vanishing", f"its gradient is {status}, and no single op explains it",
                 f"{measured}; no zero-derivative op, saturated activation, hook or custom backward on its paths "
                 "was recorded", fix_for("vanishing"), leaf)


def _in_modules(g: nx.DiGraph, leaf: str) -> bool:
    """Ops inside the model's modules are on the leaf's way to the loss."""
    return any(g.nodes[n].get("kind") == "op" and g.nodes[n].get("module") for n in nx.descendants(g, leaf))


_STARVES: dict[tuple[int, int], tuple[weakref.ref[AutogradGraph], Evidence, bool]] = {}


def _starves(graph: AutogradGraph, cut: Evidence) -> bool:
    """The cut leaves some parameter upstream of it in the graph with only top-level ops to the loss (a penalty
    term): measured harm, so the cut is no stop-gradient by design, even for parameters another path (an
    auxiliary loss) still reaches."""
    key = (id(graph), id(cut))
    hit = _STARVES.get(key)
    if hit is not None and hit[0]() is graph and hit[1] is cut:
        return hit[2]
    if len(_STARVES) > 256:
        _STARVES.clear()
    leaves = graph.leaves()
    starves = any(n in leaves and not _in_modules(graph.nx, leaves[n]) for n in cut.cut)
    _STARVES[key] = (weakref.ref(graph), cut, starves)
    return starves


def _only_penalty(status: str, name: str, measured: str, graph: AutogradGraph | None, leaf: str | None,
                  events: Sequence[Evidence]) -> Cause | None:
    """Its module path to the loss was cut by a detach used again, yet it is in the graph: only another term
    (weight decay, an auxiliary loss) still reaches it. A detach outside every module (the prediction
    detached in the loop), or one after which only top-level ops reach the parameter."""
    if graph is None or leaf is None:
        return None
    cut = next((e for e in events if e.kind in ("detached", "data-access") and name in e.cut and e.targets), None)
    if cut is None:
        return None
    g = graph.nx
    if _in_modules(g, leaf) and not _starves(graph, cut):
        # Measured: ops inside the model's modules still carry its gradient to the loss, so it still learns from
        # the data; the cut is a stop-gradient on another path (SimSiam, BYOL, an online probe): information.
        if status != "ok":
            return None
        return Cause("ok", None, f"it has a gradient; the {cut.op} at {_place(cut)} cuts one of its paths to the "
                     "loss (cut here by design?)", f"{measured}; its gradient still reaches it through ops inside "
                     "the model's modules, so it still learns from the data: the cut only stops this path",
                     "nothing to fix if the stop-gradient is the method (SimSiam, BYOL, a detached probe)", leaf, cut)
    shown = "scaled" if status == "ok" else status
    c = cut_cause(shown, name, cut, events, leaf)
    return Cause(shown, c.kind, c.cause + "; only another term (a penalty or an auxiliary loss) still reaches it",
                 c.evidence + f"; {measured}", c.fix, leaf, cut)

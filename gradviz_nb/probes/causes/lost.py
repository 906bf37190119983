"""A zero or shrunk gradient explained where the recorded backward lost it (:class:`~.zeros.Lost`): the node or
the edge, worded by what is there (a module's backward hook, a custom ``autograd.Function``, a forward hook's op,
a saturated activation, a cast that underflowed, an all-zero factor and the node that made it). The op names in
``_WORDS`` only word an op; the zero itself was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from gradviz_nb.kinds import fix_for
from gradviz_nb.probes.causes.cause import Cause, _custom, _hook_cause, _made_at, _saturated
from gradviz_nb.probes.causes.zeros import Lost
from gradviz_nb.tracing import AutogradGraph
from gradviz_nb.tracing.evidence import Evidence, hook_name
from gradviz_nb.tracing.places import source_file, split_line

__all__ = ["lost_cause"]

# Wording only: what a node whose backward sent zero usually is, by its op. The zero itself was measured.
_WORDS = {"MulBackward0": "a multiplication", "NativeDropoutBackward0": "a dropout", "ToCopyBackward0": "a cast",
          "MaskedFillBackward0": "a masked_fill", "WhereBackward0": "a torch.where", "DivBackward0": "a division"}
_HOOKS = ("_backward_pre_hooks", "_backward_hooks")
_FORWARD_HOOKS = ("_forward_pre_hooks", "_forward_hooks")


def _module_hooks(model: nn.Module | None, module: str) -> tuple[str, Any] | None:
    """``(path, hook)``: a backward (pre-)hook of the module at ``module``, else of a module inside it (the live
    object, for prove()); a backward pre-hook's node is attributed to the caller of its module."""
    if model is None:
        return None
    found = [(path, h) for path, m in model.named_modules() for attr in _HOOKS
             for h in (getattr(m, attr, None) or {}).values()]
    exact = [(path, h) for path, h in found if path == module]
    inside = [(path, h) for path, h in found if not module or path.startswith(module + ".")]
    chosen = exact or inside
    return chosen[0] if chosen else None


def _forward_hook_at(model: nn.Module | None, line: str) -> tuple[str, Any] | None:
    """The module forward (pre-)hook whose code holds ``line`` (as ``places.source_line`` wrote it):
    ``(module path, hook)``."""
    place = split_line(line) if model is not None else None
    if model is None or place is None:
        return None
    filename, number = place
    for path, m in model.named_modules():
        for attr in _FORWARD_HOOKS:
            for hook in (getattr(m, attr, None) or {}).values():
                code = getattr(getattr(hook, "__wrapped__", hook), "__code__", None)
                if code is None or source_file(code.co_filename) != filename:
                    continue
                last = max((n for _, _, n in code.co_lines() if n is not None), default=code.co_firstlineno)
                if code.co_firstlineno <= number <= last:
                    return path, hook
    return None



def _op_in(graph: AutogradGraph, node: str) -> str:
    """A node in the user's words (its op and module, never its id): ``MulBackward0 in module 'fc'``."""
    attrs = graph.nx.nodes[node] if node in graph.nx else {}
    if attrs.get("kind") == "leaf":
        names = attrs.get("names") or []
        return f"leaf {names[0]}" if names else "a leaf"
    op = attrs.get("op") or "an op"
    module = attrs.get("module")
    return f"{op} in module {module!r}" if module else str(op)


def lost_cause(status: str, name: str, graph: AutogradGraph, lost: Lost, events: Sequence[Evidence],
               model: nn.Module | None, lines: dict[int, str] | None = None) -> Cause:
    """The cause of a zero or shrunk gradient where the recorded backward lost it."""
    attrs = graph.nx.nodes[lost.node]
    evs, line = _at(graph, lost.node, events, lines)
    at = f" at {line}" if line else ""
    where = f" in module {lost.module!r}" if lost.module else ""
    measured = (f"measured in the backward: {lost.op}{where} received a gradient of norm "
                f"{lost.received:.3g} and sent {lost.sent:.3g} towards {name} (factor {lost.factor:.3g})")
    hook_event = next((e for e in evs if e.kind == "hook"), None)
    if lost.between:
        if hook_event is not None:
            return _hook_cause(status, name, hook_event, lost.node)
        found = _module_hooks(model, lost.module) if lost.op == "BackwardHookFunctionBackward" else None
        what = (f"the backward hook {hook_name(found[1])} of module {found[0]!r}" if found is not None else
                f"a hook on the gradient between {_op_in(graph, lost.between)} and {lost.op}{where}")
        return Cause(status, "hook-zeroed", f"{what} turned a non-zero gradient into zero",
                     f"measured in the backward: {_op_in(graph, lost.between)} sent a gradient of norm "
                     f"{lost.received:.3g}, and {lost.op}{where} received zero", fix_for("hook-zeroed"), lost.node,
                     hook=found[1] if found is not None else None)
    if lost.op == "BackwardHookFunctionBackward" or hook_event is not None:
        found = _module_hooks(model, lost.module)
        what = f"the backward hook {hook_name(found[1])} of module {found[0]!r}" if found is not None else \
            f"a backward hook of module {lost.module!r}"
        return Cause(status, "hook-zeroed", f"{what} passes {'no' if lost.factor == 0 else 'a shrunk'} gradient back",
                     measured, fix_for("hook-zeroed"), lost.node, hook_event, found[1] if found is not None else None)
    if _custom(dict(attrs)):
        return Cause(status, "custom-backward", f"the custom autograd.Function {lost.op}{at}{where} passes "
                     f"{'no' if lost.factor == 0 else 'a shrunk'} gradient back to it", measured + "; "
                     "gv.gradcheck(fn, inputs) compares it with finite differences", fix_for("custom-backward"),
                     lost.node)
    origin = lost.maker or (lost.zero.node if lost.zero is not None else "")
    if origin and origin != lost.node and lost.factor == 0:
        return _zero_input(status, name, graph, lost, origin, events, model, lines, measured)
    in_hook = _forward_hook_at(model, line)
    if in_hook is not None:
        path, hook = in_hook
        return Cause(status, "hook-zeroed", f"the forward hook {hook_name(hook)} of module {path!r} made {lost.op} at "
                     f"{line}, which passes {'no' if lost.factor == 0 else 'a shrunk'} gradient back", measured,
                     fix_for("hook-zeroed"), lost.node, hook=hook)
    sat = next((e for e in evs if e.kind == "saturated" and e.numbers.get("fraction", 0.0) >= 1.0), None)
    if sat is not None:
        return _saturated(status, name, sat, lost.node, graph)
    what = _WORDS.get(lost.op, lost.op.removesuffix("Backward0").lower() or "an op")
    underflow = _underflow(graph, lost)
    if underflow:
        return Cause(status, "zero-derivative", f"{what}{at}{where} sends the gradient in {underflow}, where every "
                     "value of it underflows to 0", measured, "keep the gradient in float32 there (autocast instead "
                     "of a manual cast), or scale the loss (torch.amp.GradScaler)", lost.node)
    if lost.factor == 0 and lost.reduced and lost.zero is None:
        return Cause(status, None, f"its gradient sums to zero at {what}{at}{where}: the loss does not change when "
                     f"{name} moves (a bias before a normalisation, or a mean subtracted after it)", measured + "; the "
                     f"non-zero gradient {lost.op} received adds up to exactly 0 over the dimensions it sums towards "
                     f"{name}, and no factor it saved for backward is zero", "nothing to fix if the invariance is by "
                     "design; else remove the parameter or the normalisation after it", lost.node)
    if lost.factor == 0:
        return Cause(status, "zero-derivative", f"{what}{at}{where} passes no gradient back: its local derivative "
                     "was zero for every element (multiplied by zero, everything dropped, or masked)", measured,
                     fix_for("zero-derivative"), lost.node)
    return Cause(status, "vanishing", f"{what}{at}{where} keeps {lost.factor:.3g} of the gradient's norm, the least "
                 "of any node on its paths", measured, fix_for("vanishing"), lost.node)


def _at(graph: AutogradGraph, node: str, events: Sequence[Evidence],
        lines: dict[int, str] | None) -> tuple[list[Evidence], str]:
    """The capture's evidence on ``node`` and its source line (from the evidence, else the re-run's lines)."""
    seq = graph.nx.nodes[node].get("seq", -1)
    evs = [e for e in events if e.seq is not None and e.seq == seq]
    return evs, next((e.line for e in evs if e.line), "") or _made_at(seq, lines)


def _zero_input(status: str, name: str, graph: AutogradGraph, lost: Lost, origin: str, events: Sequence[Evidence],
                model: nn.Module | None, lines: dict[int, str] | None, measured: str) -> Cause:
    """``lost.node`` sent zero because it multiplied by a tensor that was all zero (read from what it saved), which
    ``origin`` made: the cause is ``origin`` (a forward hook's op, a custom Function, a saturated activation, any
    op whose output was all zero), worded with its own line."""
    o = graph.nx.nodes[origin]
    op = str(o.get("op", ""))
    evs, line = _at(graph, origin, events, lines)
    at = f" at {line}" if line else ""
    where = f" in module {o.get('module')!r}" if o.get("module") else ""
    shape = list(lost.zero.shape) if lost.zero is not None else []
    seen = (f"{measured}; the tensor {shape} it multiplies by (read from what {lost.op} saved for backward) is all "
            f"zeros, made by {op}{where}{at}")
    then = f"; {_op_in(graph, lost.node)} multiplies {name}'s gradient by that output, so it is zero"
    in_hook = _forward_hook_at(model, line)
    if in_hook is not None:
        path, hook = in_hook
        return Cause(status, "hook-zeroed", f"the forward hook {hook_name(hook)} of module {path!r} made {op} at "
                     f"{line}, whose output is all zeros{then}", seen, fix_for("hook-zeroed"), origin, hook=hook)
    if _custom(dict(o)):
        return Cause(status, "custom-backward", f"the custom autograd.Function {op}{where} outputs all zeros{then}",
                     seen + "; gv.gradcheck(fn, inputs) compares it with finite differences",
                     fix_for("custom-backward"), origin)
    sat = next((e for e in evs if e.kind == "saturated" and e.numbers.get("fraction", 0.0) >= 1.0), None)
    if sat is not None:
        return _saturated(status, name, sat, origin, graph)
    what = _WORDS.get(op, op.removesuffix("Backward0").lower() or "an op")
    return Cause(status, "zero-derivative", f"{what}{at}{where} outputs all zeros{then}", seen,
                 fix_for("zero-derivative"), origin)


def _underflow(graph: AutogradGraph, lost: Lost) -> str:
    """The low-precision dtype the node sent its gradient in, when that is why it became zero (measured: a
    non-zero gradient arrived, the producers' dtype is a float type narrower than float32)."""
    g = graph.nx
    if lost.factor != 0:
        return ""
    dtypes = {str(g.nodes[u].get("dtype", "")) for u in g.predecessors(lost.node)}
    low = sorted(d for d in dtypes if d.removeprefix("torch.") in ("float16", "bfloat16") or "float8" in d)
    mine = str(g.nodes[lost.node].get("dtype", ""))
    return low[0].removeprefix("torch.") if low and mine not in low else ""

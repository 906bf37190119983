"""Checks for gradients that exist and are wrong: a custom ``autograd.Function`` whose backward disagrees
with its forward (checked with ``gv.gradcheck`` on the inputs the step gave it), and a parameter written
through ``.data`` during a forward.

A Function whose backward is its true gradient times one constant (a gradient-reversal or gradient-scaling
layer) is a design, measured as such (the analytical vector-Jacobian product is that constant times the
numerical one), and is not reported.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

import networkx as nx
import torch

from gradviz_nb.doctor.checks_steps import common_module
from gradviz_nb.doctor.findings import Finding
from gradviz_nb.doctor.values_watch import FunctionCall
from gradviz_nb.kinds import fix_for
from gradviz_nb.tracing.capture import Attribution

if TYPE_CHECKING:
    from gradviz_nb.doctor.checks import Observed

__all__ = ["BUDGET", "check_data_write", "check_functions", "function_factor"]

BUDGET = 2.0  # seconds of checking custom Functions per doctor run; the rest are skipped, and said so


def check_data_write(obs: Observed) -> list[Finding]:
    """Parameters whose values a ``.data`` write changed while a forward's graph held them."""
    out: list[Finding] = []
    done: set[str] = set()
    for rec in obs.records:
        for w in rec.events.writes:
            if w.name in done:
                continue
            done.add(w.name)
            out.append(Finding(
                "data-write", w.name, f"written through .data ({w.op}) during the forward: backward and the step "
                "use values the forward did not compute with", f"at step {rec.index}, {w.op} at {w.line or '?'} "
                f"changed {w.name} by up to {w.change:.3g} after the forward read it and before "
                "backward; .data writes do not bump the version counter, so autograd could not refuse it",
                fix_for("data-write"), rec.index))
    return out


def function_factor(call: FunctionCall) -> tuple[bool, float | None, float]:
    """``(agrees, factor, rel_error)``: the Function's vector-Jacobian product for a random vector against
    central differences of the same product, over the inputs that need grad; ``factor`` is the constant the
    analytical one is of the numerical one when it is one (a reversal layer), else None."""
    fn = call.cls
    args = [a.clone().requires_grad_(rg) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a, rg in call.inputs]
    wrt = [a for a, (_, rg) in zip(args, call.inputs, strict=True) if isinstance(a, torch.Tensor) and rg]
    if not wrt:
        return True, None, 0.0
    gen = torch.Generator().manual_seed(0)

    apply = getattr(fn, "apply")  # noqa: B009  (a Function class, typed as a plain type here)

    def first(*xs: Any) -> torch.Tensor:
        out = apply(*xs)
        return cast(torch.Tensor, out[0] if isinstance(out, (tuple, list)) else out)

    y = first(*args)
    v = torch.randn(y.shape, generator=gen, dtype=y.dtype)
    analytic = torch.autograd.grad(y, wrt, v, allow_unused=True)
    # An input the backward returns None for gets no gradient at all: a cut, which the cut checks name
    # (custom-backward), not a wrong value. Only the gradients the backward does return are compared.
    sent = [(t, g) for t, g in zip(wrt, analytic, strict=True) if g is not None]
    if not sent:
        return True, None, 0.0
    a_flat, n_flat = [], []
    with torch.no_grad():
        for t, g in sent:
            num = torch.zeros_like(t)
            flat = t.view(-1)
            for i in range(flat.numel()):
                keep = float(flat[i])
                flat[i] = keep + 1e-6
                up = float((first(*args) * v).sum())
                flat[i] = keep - 1e-6
                down = float((first(*args) * v).sum())
                flat[i] = keep
                num.view(-1)[i] = (up - down) / 2e-6
            a_flat.append(g.reshape(-1))
            n_flat.append(num.reshape(-1))
    a, n = torch.cat(a_flat), torch.cat(n_flat)
    scale = float(n.norm()) or 1.0
    err = float((a - n).norm()) / scale
    if err < 1e-4:
        return True, 1.0, err
    c = float((a * n).sum()) / (float((n * n).sum()) or 1.0)
    uniform = float((a - c * n).norm()) / scale < 1e-4 and abs(c) > 1e-6
    return False, c if uniform else None, err


def check_functions(obs: Observed) -> list[Finding]:
    """Every custom ``autograd.Function`` the steps called, checked on its own inputs (float64, a few rows)."""
    calls: dict[type, FunctionCall] = {}
    for rec in obs.records:
        for cls, call in rec.events.calls.items():
            calls.setdefault(cls, call)
    out: list[Finding] = []
    start = time.perf_counter()
    for cls, call in calls.items():
        if time.perf_counter() - start > BUDGET:
            break
        with torch.random.fork_rng():
            try:
                agrees, factor, err = function_factor(call)
            except Exception:  # a Function that cannot run on float64 slices is not judged
                continue
        if agrees or factor is not None:
            continue  # a constant multiple of the true gradient: a reversal or scaling layer, by design
        reached = _reached(obs, call)
        target = common_module(reached) if reached else (_module_of(obs, call) or cls.__name__)
        out.append(Finding(
            "wrong-gradient", target, f"{cls.__name__}.backward disagrees with its forward",
            f"{cls.__name__}.apply at {call.line or 'an unknown line'}: on its own inputs from step 1 (float64, "
            f"a few rows), the gradient its backward returns differs from finite differences of its forward by "
            f"{err:.3g} (relative), and is not a constant multiple of it; that gradient reaches "
            f"{len(reached)} parameters", "fix the backward of "
            f"{cls.__name__} (gv.gradcheck(lambda *x: {cls.__name__}.apply(*x), inputs) names the input)", 1))
    return out


def _module_of(obs: Observed, call: FunctionCall) -> str:
    """The module call the Function ran in, from the first step's capture (by sequence number)."""
    rec = obs.records[0] if obs.records else None
    cap = rec.cap if rec is not None else None
    if cap is None or call.seq is None:
        return ""
    found = Attribution(cap.calls).call_of(call.seq, "")
    return found.path if found is not None else ""


def _reached(obs: Observed, call: FunctionCall) -> list[str]:
    """The parameters upstream of the Function's nodes in the first step's graph (the checked call's, and every
    other call of the same Function: the same backward runs there): its gradient reaches them."""
    rec = obs.records[0] if obs.records else None
    g = rec.graph.nx if rec is not None and rec.graph is not None else None
    if g is None or call.seq is None:
        return []
    node = next((n for n, d in g.nodes(data=True) if d.get("kind") == "op" and d.get("seq") == call.seq), None)
    if node is None:
        return []
    op = g.nodes[node].get("op")
    nodes = [n for n, d in g.nodes(data=True) if d.get("kind") == "op" and d.get("op") == op] or [node]
    names: set[str] = set()
    for n in set().union(*(nx.ancestors(g, m) for m in nodes)):
        d = g.nodes[n]
        if d.get("kind") == "leaf" and d.get("name"):
            names.add(str(d["name"]))
    return sorted(names)

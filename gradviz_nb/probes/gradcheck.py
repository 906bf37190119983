"""``gv.gradcheck``: finite differences against autograd, with the wrong backward named on the graph.

``torch.autograd.gradcheck`` says *that* a Jacobian is wrong; this also says *where*. Inputs are copied
to float64 leaves (the user's tensors stay untouched); outputs are reduced to ``L = sum_j <w_j, out_j>``
with fixed random weights. A recorded run under a ``TorchFunctionMode`` numbers every float64 tensor
needing grad as first seen (an op's output, or an op's argument: how outputs of custom Functions, whose
``apply`` no mode sees, and parameters are caught) and keeps each op call's autograd sequence interval.
Screening: for each tensor T, ``<dL/dT, v>`` from backward against the central difference of L when a
re-run adds ``±eps*v`` to T wherever it is seen. Judging: each node reading a wrong T, alone, by its own
backward: what it sent T (a node hook's ``grad_inputs``) against the central difference of
``sum_m <dL/dT_m, T_m>`` over the tensors T_m it feeds, their gradients as backward gave them. A wrong
node further down then neither hides nor frames it. Readers inside one op call are shifted in that call
only; custom Functions are judged by their own outputs. A disagreement that reaches no leaf's gradient is
a convention, not a bug (``cholesky`` returns a symmetrised gradient): listed in ``conventions``, not
named. Per-input verdicts use ``torch.autograd.gradcheck``'s own Jacobians.
"""

from __future__ import annotations

import bisect
import importlib
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.sandbox import sandbox
from gradviz_nb.tracing.capture import Capture, _sequence_counter
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.tracing.trace import trace_with_nodes
from gradviz_nb.validate import finite_number, model_or_none, not_meta

OVERLAY_TITLE = "gradient check: relative error"
SEED = 0  # fixed: output weights, directions and every run's RNG are the same at each call


@dataclass(frozen=True)
class WrongGradient:
    """A node whose backward gives its ``input`` (``next_functions`` position) a wrong gradient.
    ``analytic`` / ``numeric``: derivative of L along a random unit direction of that input."""

    node: str
    op: str
    module: str
    input: int
    source: str  # what feeds that input: a leaf name ("inputs[1]", "fc.weight") or "op (node id)"
    analytic: float
    numeric: float

    @property
    def rel_error(self) -> float:
        """``|analytic - numeric| / |numeric|`` (the numeric value floored at 1e-12)."""
        return abs(self.analytic - self.numeric) / max(abs(self.numeric), 1e-12)

    def describe(self) -> str:
        """One line: the node, its module, the input and element, and both derivatives."""
        where = f" in {self.module}" if self.module else ""
        ratio = f", {self.analytic / self.numeric:.4g}x" if self.numeric else ""
        return (f"{self.op} ({self.node}{where}): gradient for input {self.input} ({self.source}) is "
                f"{self.analytic:.6g} by backward vs {self.numeric:.6g} by finite differences"
                f" (rel. error {self.rel_error:.3g}{ratio})")


@dataclass(frozen=True)
class InputCheck:
    """One checked input: ``torch.autograd.gradcheck``'s analytical vs numerical Jacobians."""

    index: int
    name: str
    ok: bool
    max_error: float  # max |analytical - numerical| over the entries
    rel_error: float  # ||analytical - numerical|| / ||numerical||
    kinks: int = 0  # entries at a kink: off the central difference, between the one-sided derivatives


@dataclass(frozen=True)
class GradCheck:
    """Answer of :func:`gradcheck`. ``wrong``: nodes with a wrong backward, in forward order; ``inputs``:
    per checked input; ``graph``: the traced run (wrong nodes in its notes); ``compared``: tensors whose
    gradient met finite differences; ``conventions``: tensors that disagreed without reaching a leaf;
    ``kinks``: tensors where the loss has a kink along the checked direction (one-sided differences
    disagree), so finite differences cannot judge their gradient."""

    wrong: list[WrongGradient]
    inputs: list[InputCheck]
    graph: AutogradGraph = field(repr=False)
    compared: int = 0
    conventions: list[str] = field(default_factory=list)
    kinks: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every checked node's analytic gradient matches the numeric one."""
        return not self.wrong and all(i.ok for i in self.inputs)

    def summary(self) -> str:
        """The result as text: nodes checked, and each wrong one described."""
        head = "gradients agree with finite differences" if self.ok else (
            f"wrong backward in {len(self.wrong)} node(s)" if self.wrong else "wrong Jacobian, no node named")
        lines = [f"gv.gradcheck: {head} ({self.compared} tensors compared)", *(f"  {w.describe()}" for w in self.wrong)]
        ins = ", ".join(f"{i.name} {'ok' if i.ok else 'WRONG'} (max error {i.max_error:.2g}"
                        + ("" if i.ok else f", rel. error {i.rel_error:.3g}")
                        + (f"; {i.kinks} {'entry' if i.kinks == 1 else 'entries'} at a kink, between the one-sided "
                           "derivatives" if i.kinks else "")
                        + ")" for i in self.inputs)
        lines.append(f"  inputs (torch.autograd.gradcheck's Jacobians): {ins}")
        if self.conventions:
            lines.append(f"  not named (reaches no leaf's gradient): {', '.join(self.conventions)}")
        if self.kinks:
            lines.append(f"  not judged (at a kink, e.g. a clamp or relu input exactly on its bound, where any "
                         f"one-sided derivative is a valid choice): {', '.join(self.kinks)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<GradCheck {'ok' if self.ok else 'WRONG'}{': ' + self.wrong[0].describe() if self.wrong else ''}>"


def gradcheck(fn: Callable[..., Any], inputs: torch.Tensor | Sequence[Any], *, eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-3, model: nn.Module | None = None) -> GradCheck:
    """Compare ``fn``'s autograd gradients with finite differences, and name the node whose backward is
    wrong. ``fn(*inputs)`` must be re-runnable (it runs many times; the RNG is re-seeded each run).
    Floating inputs that need grad are checked (every floating one if none does), as float64 copies.
    ``model`` (float64, e.g. ``copy.deepcopy(m).double()``) names modules and parameters.

    Example::

        res = gv.gradcheck(lambda x, w: MyMul.apply(x, w).tanh(), (x, w))
        res.wrong[0].op, res.wrong[0].input      # ("MyMulBackward", 1)
        widget.overlay = res      # the wrong nodes flagged on the graph
    """
    finite_number("eps", eps, lo=0, lo_open=True, hint="It is the finite-difference step.")
    finite_number("atol", atol, lo=0)
    finite_number("rtol", rtol, lo=0)
    model_or_none("model", model)
    not_meta("gv.gradcheck", model, *(inputs if isinstance(inputs, (list, tuple)) else [inputs]))
    args = _copy_inputs(fn, inputs, model)
    with sandbox(model):  # fn runs many times: BatchNorm statistics, RNGs, hooks, .grad come back as they were
        return _Session(fn, args, eps, atol, rtol, model).check()


def _copy_inputs(fn: Any, inputs: Any, model: nn.Module | None) -> tuple[Any, ...]:
    if not callable(fn):
        raise GradvizError(f"gv.gradcheck needs a function to re-run, got {type(fn).__name__}.")
    if not isinstance(inputs, (torch.Tensor, list, tuple)):
        raise GradvizError(f"inputs must be a tensor or a tuple/list of fn's arguments, got {type(inputs).__name__}.")
    args = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors:
        raise GradvizError("inputs hold no tensor: pass the tensors fn differentiates, e.g. (x, w).")
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and not a.is_floating_point():
            raise GradvizError(f"inputs[{i}] is a {a.dtype} tensor: only real floating inputs have gradients. "
                               f"Close over it instead, e.g. lambda x: fn(x, inputs_{i}).")
    if model is not None and any(p.is_floating_point() and p.dtype != torch.float64
                                 for p in [*model.parameters(), *model.buffers()]):
        raise GradvizError("gradcheck runs in float64: pass a float64 model (copy.deepcopy(model).double()).")
    everything = not any(t.requires_grad for t in tensors)  # nothing marked: check every floating input
    return tuple(a.detach().to(torch.float64).clone().requires_grad_(a.requires_grad or everything)
                 if isinstance(a, torch.Tensor) else a for a in args)


@dataclass
class _Probe:
    value: int  # which numbered tensor to shift
    delta: torch.Tensor
    call: int | None = None  # None: everywhere it is seen; else only in that op call's arguments
    hit: bool = False


def _dot(grad: torch.Tensor | None, t: torch.Tensor) -> float:
    return 0.0 if grad is None else float((grad * t).sum())


def _numbered(t: Any) -> bool:
    # float64 only: a finite difference with eps ~1e-6 through a float32 tensor would be rounding noise
    return isinstance(t, torch.Tensor) and t.requires_grad and t.dtype == torch.float64 and t.numel() > 0


class _Observer(TorchFunctionMode):
    """Numbers tensors as first seen, keeps op calls' sequence intervals, applies a probe. Holding every
    numbered tensor keeps their ``id()`` unique for the run."""

    def __init__(self, leaves: list[Any], probe: _Probe | None, shifted: torch.Tensor | None) -> None:
        super().__init__()
        self.values: list[torch.Tensor] = []
        self.versions: list[int] = []  # an in-place write moves a tensor's gradient edge: those are skipped
        self.index: dict[int, int] = {}
        self.calls: list[tuple[int, int]] = []
        self.probe = probe
        self.swapped: dict[int, torch.Tensor] = {}  # id(tensor) -> its shifted copy, reused at every use
        self.done: set[int] = set() if shifted is None else {id(shifted)}  # never shift a shifted one
        for t in leaves:
            self.see(t)

    def see(self, t: Any) -> None:
        if _numbered(t) and id(t) not in self.index:
            self.index[id(t)] = len(self.values)
            self.values.append(t)
            self.versions.append(t._version)

    def shift(self, t: Any, call: int | None) -> Any:
        p = self.probe
        if p is None or not isinstance(t, torch.Tensor) or id(t) in self.done or self.index.get(id(t)) != p.value:
            return t
        if p.call is not None and p.call != call:
            return t
        if id(t) not in self.swapped:
            s = t + p.delta  # inside the handler the mode is off: this op is not numbered
            self.done.add(id(s))
            self.index[id(s)] = p.value
            self.swapped[id(t)], p.hit = s, True
        return self.swapped[id(t)]

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        call = len(self.calls)
        self.calls.append((0, 0))
        for a in tree_flatten((args, kwargs or {}))[0]:
            self.see(a)
        args, kwargs = tree_map(lambda a: self.shift(a, call), (args, kwargs or {}))
        start = _sequence_counter()
        out = func(*args, **kwargs)
        self.calls[call] = (start, _sequence_counter())
        return tree_map(self._output, out)

    def _output(self, t: Any) -> Any:
        self.see(t)
        return self.shift(t, None)


class _Session:
    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], eps: float, atol: float, rtol: float,
                 model: nn.Module | None) -> None:
        self.fn, self.args, self.eps, self.atol, self.rtol, self.model = fn, args, eps, atol, rtol, model
        self.leaf_args = [i for i, a in enumerate(args) if _numbered(a)]  # numbered first, in this order
        self.weights: list[torch.Tensor] = []
        self.directions: dict[int, torch.Tensor] = {}

    def run(self, probe: _Probe | None, cap: Any = None) -> tuple[_Observer, list[torch.Tensor]]:
        with torch.random.fork_rng(devices=[]), torch.enable_grad(), cap or nullcontext():
            args, shifted = list(self.args), None
            if probe is not None and probe.call is None and probe.value < len(self.leaf_args):
                pos = self.leaf_args[probe.value]
                shifted = args[pos] = args[pos] + probe.delta  # fn itself gets the shifted input
                probe.hit = True
            obs = _Observer([args[i] for i in self.leaf_args], probe, shifted)
            torch.manual_seed(SEED)  # dropout and friends draw the same numbers in every run
            with obs:
                out = self.fn(*args)
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            for t in outs:
                obs.see(t)
            return obs, [obs.shift(t, None) for t in outs if t.is_floating_point()]

    def loss(self, outs: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([(w * o.to(torch.float64)).sum() for w, o in zip(self.weights, outs, strict=True)]).sum()

    def numeric(self, k: int, call: int | None = None, frontier: list[int] | None = None) -> float:
        """Central difference along ``direction(k)`` of L, or with a ``frontier`` of ``sum_m <dL/dT_m, T_m>``
        (dL/dT_m as backward gave it: fixed weights, so only the ops in between are differentiated)."""
        plus, minus = self._ends(k, self.eps, call, frontier)
        return (plus - minus) / (2 * self.eps)

    def _ends(self, k: int, h: float, call: int | None = None, frontier: list[int] | None = None) -> list[float]:
        """L (or the frontier sum) with ``T_k`` shifted by ``+h`` and ``-h`` along ``direction(k)``."""
        ends = []
        for sign in (1.0, -1.0):
            probe = _Probe(k, sign * h * self.direction(k), call)
            with torch.no_grad():
                obs, outs = self.run(probe)
                if not probe.hit or [t.shape for t in obs.values[:len(self.shapes)]] != self.shapes:
                    raise GradvizError("fn took another path when re-run; gv.gradcheck needs fn to do the same ops.")
                ends.append(float(self.loss(outs)) if frontier is None else
                            sum(_dot(self.grads[m], obs.values[m]) for m in frontier))
        return ends

    def at_kink(self, k: int) -> bool:
        """L is not differentiable at ``T_k`` along ``direction(k)``: its one-sided differences disagree by
        more than the tolerance, and by as much at half the step (a smooth curvature's gap halves with the
        step; a kink's stays). A clamp or relu whose input sits exactly on its bound is one."""
        gaps = []
        for h in (self.eps, self.eps / 2):
            plus, minus = self._ends(k, h)
            gaps.append(abs(plus + minus - 2 * self.base) / h)  # |forward slope - backward slope|
        return gaps[0] > self.atol + self.rtol * abs(self.numeric_of[k]) and gaps[1] > 0.75 * gaps[0]

    def direction(self, k: int) -> torch.Tensor:
        if k not in self.directions:
            v = torch.randn(self.shapes[k], generator=torch.Generator().manual_seed(SEED + 1 + k), dtype=torch.float64)
            self.directions[k] = v / v.norm()
        return self.directions[k]

    def close(self, a: float, n: float) -> bool:
        return abs(a - n) <= self.atol + self.rtol * abs(n)

    def check(self) -> GradCheck:
        cap = Capture(self.model, ghosts=False) if self.model is not None else None
        obs, outs = self.run(None, cap)
        if not outs:
            raise GradvizError("fn returned no floating-point tensor to check.")
        if missing := [i for i, o in enumerate(outs) if not o.requires_grad]:
            raise GradvizError(f"output {missing[0]} of fn has no grad_fn (detached, made under no_grad, or a "
                               "constant): it does not depend on the inputs through autograd. Return only outputs "
                               "to check.")
        gen = torch.Generator().manual_seed(SEED)
        self.weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in outs]
        self.shapes, self.calls = [t.shape for t in obs.values], sorted(obs.calls)
        names = {f"inputs[{i}]": a for i, a in enumerate(self.args) if isinstance(a, torch.Tensor)}
        graph, nodes = trace_with_nodes(outs, model=self.model, capture=cap, names=names)
        self.g = graph.nx
        self.base = float(self.loss(outs).detach())
        with torch.no_grad():
            if float(self.loss(self.run(None)[1])) != self.base:
                raise GradvizError("fn gave another result when re-run with the same inputs; make it deterministic.")
        edges = {k: torch.autograd.graph.get_gradient_edge(t) for k, t in enumerate(obs.values)
                 if t._version == obs.versions[k]}
        self.where = {k: (nodes[e.node], int(e.output_nr)) for k, e in edges.items() if e.node in nodes}
        self.analytic = self._analytic(self.loss(outs), obs.values, nodes)
        del nodes, edges, obs, outs  # drop the live autograd graph
        self.numeric_of = {k: self.numeric(k) for k in self.where}
        wrong, conventions, kinks = self._localise()
        graph.nx.graph["notes"] += [f"gv.gradcheck: {w.describe()}" for w in wrong]
        return GradCheck(wrong, self._input_checks(), graph, len(self.where), conventions, kinks)

    def _analytic(self, loss: torch.Tensor, values: list[torch.Tensor], nodes: dict[Any, str]) -> dict[int, float]:
        self.gin: dict[str, tuple[torch.Tensor | None, ...]] = {}  # what each node's backward sent its inputs

        def keep(nid: str) -> Callable[[Any, Any], None]:
            return lambda grad_in, grad_out: self.gin.__setitem__(nid, tuple(grad_in))

        handles = [n.register_hook(keep(nid)) for n, nid in nodes.items() if self.g.nodes[nid]["kind"] == "op"]
        try:  # autograd.grad, not backward: parameters' .grad stay as they were
            grads = torch.autograd.grad(loss, [values[k] for k in self.where], allow_unused=True)
        finally:
            for h in handles:
                h.remove()
        self.grads = dict(zip(self.where, grads, strict=True))
        return {k: _dot(g, self.direction(k)) for k, g in self.grads.items()}

    def _localise(self) -> tuple[list[WrongGradient], list[str], list[str]]:
        self.at = {place: k for k, place in self.where.items()}
        bad = [k for k in self.where if not self.close(self.analytic[k], self.numeric_of[k])]
        kinks = [k for k in bad if self.at_kink(k)]  # finite differences cannot judge a gradient there
        # A leaf at a kink still counts as reached: a wrong node further down is named by its own check.
        bad_leaves = {self.where[k][0] for k in bad if self.g.nodes[self.where[k][0]]["kind"] == "leaf"}
        wrong: dict[tuple[str, int], WrongGradient] = {}
        conventions = []
        for k in (k for k in bad if k not in kinks):
            u, o = self.where[k]
            if u not in bad_leaves and not bad_leaves & nx.ancestors(self.g, u):
                conventions.append(self._name(u))
                continue
            # Readers grouped by op call (T shifted in that call only) or, outside every call (custom
            # Functions), node by node (T shifted everywhere; that node's own outputs measured).
            readers: dict[int | str, list[tuple[str, int]]] = {}
            for _, y, d in self.g.out_edges(u, data=True):
                for i in (i for oo, i in d["slots"] if oo == o and self.g.nodes[y]["kind"] == "op"):
                    call = self._call_of(y)
                    readers.setdefault(y if call is None else call, []).append((y, i))
            for group, pairs in readers.items():
                a = sum(self._grad_in(y, i, k) for y, i in pairs)
                n = self.numeric(k, group if isinstance(group, int) else None, self._frontier({y for y, _ in pairs}))
                for y, i in pairs if not self.close(a, n) else []:
                    d = self.g.nodes[y]
                    wrong.setdefault((y, i), WrongGradient(y, d["op"], d["module"], i, self._name(u), a, n))
        return list(wrong.values()), conventions, [self._name(self.where[k][0]) for k in kinks]

    def _frontier(self, start: set[str]) -> list[int]:
        """The compared tensors first met downstream of the nodes ``start``."""
        stack, seen, found = list(start), set(start), set()
        while stack:
            x = stack.pop()
            for _, y, d in self.g.out_edges(x, data=True):
                for o, _ in d["slots"]:
                    if (x, o) in self.at:
                        found.add(self.at[(x, o)])
                    elif y not in seen:
                        seen.add(y)
                        stack.append(y)
        return sorted(found)

    def _grad_in(self, node: str, slot: int, k: int) -> float:
        return _dot((*self.gin.get(node, ()), *[None] * (slot + 1))[slot], self.direction(k))

    def _call_of(self, node: str) -> int | None:
        seq = self.g.nodes[node]["seq"]  # op calls never nest (the mode is off inside its handler)
        i = bisect.bisect_right(self.calls, (seq, float("inf"))) - 1
        return i if i >= 0 and self.calls[i][0] <= seq < self.calls[i][1] else None

    def _name(self, u: str) -> str:
        d = self.g.nodes[u]
        return str(d["name"]) if d["kind"] == "leaf" and d["name"] else f"{d['op']} ({u})"

    def _input_checks(self) -> list[InputCheck]:
        """Per-input verdicts from torch.autograd.gradcheck's own slow-mode Jacobians."""
        tg = importlib.import_module("torch.autograd.gradcheck")  # the module: the attribute is the function

        def plain(*xs: Any) -> tuple[torch.Tensor, ...]:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(SEED)
                out = self.fn(*xs)
            return tuple(t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point())

        numerical = tg._get_numerical_jacobian(plain, self.args, eps=self.eps)  # [input][output]
        analytical = [tg._check_analytical_jacobian_attributes(self.args, o, float("inf"), False)
                      for o in plain(*self.args)]  # [output][input]
        checked = [i for i, a in enumerate(self.args) if isinstance(a, torch.Tensor) and a.requires_grad]
        result = []
        for j, i in enumerate(checked):
            pairs = [(per_out[j], numerical[j][o]) for o, per_out in enumerate(analytical)]
            diff = torch.cat([(a - n).flatten() for a, n in pairs])
            num = torch.cat([n.flatten() for _, n in pairs])
            ok, kinks = self._agree_but_at_kinks(plain, i, pairs)
            result.append(InputCheck(i, f"inputs[{i}]", ok, float(diff.abs().max()) if diff.numel() else 0.0,
                                     float(diff.norm() / max(float(num.norm()), 1e-12)), kinks))
        return result

    def _agree_but_at_kinks(self, plain: Callable[..., tuple[torch.Tensor, ...]], i: int,
                            pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[bool, int]:
        """(whether the Jacobians agree, how many entries sit at a kink). An entry that misses the central
        difference is still right at a kink of that input element (its one-sided differences disagree, by
        as much at half the step) when it lies between the two one-sided derivatives: clamp at its bound
        passes 1 up to torch 2.13 and 0 from 2.14 on, both one-sided derivatives, both right."""
        close = [torch.isclose(a, n, self.rtol, self.atol) for a, n in pairs]  # [input element, output element]
        rows = sorted({int(r) for c in close for r in (~c).nonzero()[:, 0]})
        if not rows:
            return True, 0
        base = [o.detach().flatten() for o in plain(*self.args)]
        kinks = 0
        for row in rows:
            slopes = []
            for h in (self.eps, self.eps / 2):
                ends = []
                for sign in (1.0, -1.0):
                    x = self.args[i].detach().clone()
                    x.view(-1)[row] += sign * h
                    args = list(self.args)
                    args[i] = x
                    ends.append([o.detach().flatten() for o in plain(*args)])
                slopes.append([((p - b) / h, (b - m) / h) for p, m, b in zip(*ends, base, strict=True)])
            for o, ((a, n), c) in enumerate(zip(pairs, close, strict=True)):
                (fwd, bwd), (fwd2, bwd2) = slopes[0][o], slopes[1][o]
                tol = self.atol + self.rtol * n[row].abs()
                gap, gap2 = (fwd - bwd).abs(), (fwd2 - bwd2).abs()
                kink = (gap > tol) & (gap2 > 0.75 * gap)
                between = (a[row] >= torch.minimum(fwd, bwd) - tol) & (a[row] <= torch.maximum(fwd, bwd) + tol)
                if not bool((c[row] | (kink & between)).all()):
                    return False, kinks
                kinks += int((~c[row] & kink).sum())
        return True, kinks

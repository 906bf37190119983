"""From observed steps to findings: each check names the evidence it saw, or finds nothing.

Every check is a function ``(Observed) -> list[Finding]`` reading :class:`StepRecord` data (what the steps
really did) and the model; none guesses. :data:`CHECKS` is the one ordered list the doctor runs: a new check
is one function here, one line in :data:`CHECKS` and one bug-zoo case.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch
from torch import nn

from gradviz_nb.doctor.checks_clip import check_clip_norm
from gradviz_nb.doctor.checks_freeze import check_self_freeze
from gradviz_nb.doctor.checks_grads import (
    check_grad_edits,
    check_loss_weight,
    check_lr_zero,
    check_zero_grad_in_accumulation,
)
from gradviz_nb.doctor.checks_steps import (
    check_double_backward,
    check_recreated,
    check_two_optimizers,
    check_unscaled_accumulation,
    check_zero_grad_before_step,
)
from gradviz_nb.doctor.checks_values import check_data_write, check_functions
from gradviz_nb.doctor.findings import Finding
from gradviz_nb.doctor.nodes import call_node, cut_node, leaf_node
from gradviz_nb.doctor.observe import Sightings, StepRecord
from gradviz_nb.doctor.registration import Unregistered, unregistered
from gradviz_nb.kinds import fix_for
from gradviz_nb.probes.flow import Flag, optimizer_roles
from gradviz_nb.tracing.observer import InplaceWrite

__all__ = ["CHECKS", "Check", "Observed", "findings_from_flow", "inplace_finding", "mode_findings",
           "not_a_parameter", "optimizer_findings", "spike_findings", "stale_findings"]


@dataclass
class Observed:
    """Everything the doctor saw: every step's record (in order), the model and the optimizer. Facts more
    than one check needs are derived here once (as cached properties), never threaded by hand."""

    records: list[StepRecord]
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    seen: Sightings = field(default_factory=Sightings)

    @cached_property
    def others(self) -> list[torch.optim.Optimizer]:
        """Optimizers the steps touched besides the one passed in (seen by torch's global optimizer hooks)."""
        return [o for o in self.seen.known.values() if o is not self.optimizer]

    @cached_property
    def recreated(self) -> set[str]:
        """Parameters a new object replaced during a step (the recreated-parameter check names them)."""
        return {n for r in self.records for n in r.events.recreated}

    @cached_property
    def copies(self) -> set[str]:
        """Parameters the step writes by hand instead of training (an EMA or SWA copy, ``AveragedModel``),
        measured: no optimizer the step used holds them, no step's loss graph has them as a leaf, and the step
        wrote them in place (their version counter moved, whether or not the values did: the copy of a
        parameter that did not train is rewritten with the same values). A cut parameter of the trained model
        is held by its optimizer, so it is never one of these."""
        held = {id(p) for o in [self.optimizer, *self.others] if o is not None
                for g in o.param_groups for p in g["params"]}
        in_graph = {n for r in self.records if r.graph is not None for n in r.graph.leaves()}
        written = set().union(*(r.written for r in self.records)) if self.records else set()
        return {n for n, p in self.model.named_parameters(remove_duplicate=False)
                if p.requires_grad and id(p) not in held and n not in in_graph and n in written}

    @cached_property
    def not_in_optimizer(self) -> set[str]:
        """Parameters the optimizer does not step (their stale .grad is not blamed on a missing zero_grad)."""
        return {f.target for f in optimizer_findings(self.records, self.model, self.optimizer, self.others,
                                                     self.recreated) if f.kind == "not-in-optimizer"}


Check = Callable[[Observed], list[Finding]]


def _no_grad_finding(rec: StepRecord, f: Flag) -> Finding:
    """A parameter without gradient, explained by gv.why from the step's graph and capture (a recorded cut, a
    value leaving the graph, no_grad, a reentrant checkpoint, ...), else ``unused-parameter`` (what DDP's
    find_unused_parameters would trip on)."""
    from gradviz_nb.doctor.why_checks import no_grad_finding

    return no_grad_finding(rec, f)


def findings_from_flow(rec: StepRecord, copies: set[str] | frozenset[str] = frozenset()) -> list[Finding]:
    """gradient_flow's flags of one step, as findings (optimizer flags are handled with the optimizer);
    ``copies``: parameters written by hand, not trained (:attr:`Observed.copies`): their missing gradient is
    the design, not a finding."""
    from gradviz_nb.doctor.why_checks import explained

    if rec.flow is None:
        return []
    out = []
    for f in rec.flow.flags:
        if f.kind in ("frozen", "not-in-optimizer") or explained(rec, f):
            continue  # a layer whose zero gradients gv.why explained is reported with that cause
        if f.kind == "no-grad" and set(f.params or (f.target,)) <= copies:
            continue
        if f.kind == "no-grad":
            finding = _no_grad_finding(rec, f)
        else:
            finding = Finding(f.kind, f.target, f.reason.split(": ", 1)[0], f.reason,
                              fix_for(f.kind), rec.index)
        names = f.params or (f.target,)
        node = finding.node or leaf_node(rec, names) or cut_node(rec, names) or call_node(rec, f.target)
        out.append(Finding(finding.kind, finding.target, finding.message, finding.evidence, finding.fix,
                           finding.step, node))
    return out


def optimizer_findings(records: list[StepRecord], model: nn.Module, optimizer: torch.optim.Optimizer | None,
                       others: list[torch.optim.Optimizer] | tuple[()] = (), skip: set[str] | None = None
                       ) -> list[Finding]:
    """``frozen`` and ``not-in-optimizer``: from the param groups when the optimizer is given, else from
    what the step did (a parameter with a gradient that never moved while others did). A parameter one of
    ``others`` (optimizers the step also stepped) holds is held; ``skip``: names another check explains."""
    named = dict(model.named_parameters())
    held_elsewhere = {id(p) for o in others for g in o.param_groups for p in g["params"]}
    with_grad = {n for rec in records if rec.flow for p in rec.flow.params if p.has_grad for n in p.names
                 if n not in (skip or set()) and (n not in named or id(named[n]) not in held_elsewhere)}
    moved = set().union(*(rec.moved for rec in records)) if records else set()
    last = records[-1] if records else None

    def node(name: str) -> str:
        return leaf_node(last, [name]) if last is not None else ""

    out: list[Finding] = []
    if optimizer is None:
        if not moved:
            return []  # nothing moved at all: no optimizer step in this loop, nothing to compare
        for n in sorted(with_grad - moved, key=list(named).index):
            out.append(Finding("not-in-optimizer", n, "gets a gradient but the step never changes it",
                               f"had a gradient in every observed step, and its value stayed bit-identical while "
                               f"{len(moved)} other parameters moved", fix_for("not-in-optimizer"), 1, node(n)))
        return out
    roles = optimizer_roles(optimizer)
    kind = type(optimizer).__name__
    frozen = [n for n, p in named.items() if not p.requires_grad and id(p) in roles]
    out += _frozen_findings(model, frozen, kind)
    for n, p in named.items():
        held = roles.get(id(p), [])
        if n not in with_grad:
            continue
        if not held:
            out.append(Finding("not-in-optimizer", n, f"gets a gradient but no param group of {kind} holds it",
                               f"{kind} has {len(optimizer.param_groups)} param groups, none holding it; its value "
                               f"{'never changed' if n not in moved else 'changed'} during the steps",
                               fix_for("not-in-optimizer"), 1, node(n)))
        elif all(lr == 0 for _, lr in held) and not any(n in s.lr_all for r in records
                                                         for s in r.events.optimizer_steps):  # else: lr-zero
            out.append(Finding("not-in-optimizer", n, f"its param group of {kind} has lr 0",
                               f"param group {held[0][0]} holds it with lr=0; its value never changed",
                               "give the group a learning rate (or freeze it on purpose: requires_grad_(False))",
                               1, node(n)))
    return out


def _frozen_findings(model: nn.Module, frozen: list[str], kind: str) -> list[Finding]:
    """Frozen parameters the optimizer holds, grouped by the largest module frozen whole."""
    frozen_set = set(frozen)
    out: list[Finding] = []
    covered: set[str] = set()
    for path, module in model.named_modules():
        names = [f"{path}.{n}" if path else n for n, _ in module.named_parameters()]
        if path and names and set(names) <= frozen_set and not covered & set(names):
            covered |= set(names)
            out.append(Finding("frozen", path, f"the whole module is frozen while {kind} expects it to train",
                               f"{kind} holds its {len(names)} parameters, all with requires_grad=False: they "
                               "never get a gradient and never move",
                               f"model.{path}.requires_grad_(True), or leave it out of the optimizer", 1))
    for n in frozen:
        if n not in covered:
            out.append(Finding("frozen", n, f"{kind} holds it but requires_grad is False",
                               "it never gets a gradient, so the optimizer never moves it",
                               fix_for("frozen"), 1))
    return out


def stale_findings(records: list[StepRecord], model: nn.Module, optimizer: torch.optim.Optimizer | None,
                   not_in_optimizer: set[str], others: list[torch.optim.Optimizer] | tuple[()] = ()
                   ) -> list[Finding]:
    """``.grad`` still holding the previous step's gradient when the next backward added to it (parameters
    the optimizer does not hold are not blamed on a missing zero_grad: opt.zero_grad() cannot reach them)."""
    roles = optimizer_roles(optimizer) if optimizer is not None else None
    if roles is not None:  # a parameter another optimizer the step used holds is that optimizer's to clear
        roles = {**roles, **{id(p): [] for o in others for g in o.param_groups for p in g["params"]}}
    named = dict(model.named_parameters())
    for rec in records:
        stale = [n for n in rec.stale if (roles is None or id(named[n]) in roles) and n not in not_in_optimizer]
        if not stale:
            continue
        target = _common_module(stale) if len(stale) > 1 else stale[0]
        return [Finding("stale-grad", target, f".grad of {len(stale)} parameters was not zeroed before "
                        f"step {rec.index}'s backward, which added onto the previous step's gradient",
                        f"at step {rec.index}, .grad was the same tensor with the same version as when step "
                        f"{rec.index - 1}'s backward ended (e.g. {stale[0]}); nothing cleared it in between",
                        fix_for("stale-grad"), rec.index)]
    return []


def _common_module(names: list[str]) -> str:
    """The deepest module holding every name ("(model)" at the top)."""
    parts = [n.split(".")[:-1] for n in names]
    common: list[str] = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common) or "(model)"


SPIKE = 10.0  # a layer's gradient norm this many times its median over the earlier steps


def spike_findings(records: list[StepRecord]) -> list[Finding]:
    """A layer whose gradient norm jumps more than :data:`SPIKE` x its median over the earlier steps."""
    history: dict[str, list[float]] = {}
    out: list[Finding] = []
    seen: set[str] = set()
    for rec in records:
        if rec.flow is None:
            continue
        for m in rec.flow.layers:
            if not m.n_with_grad or not math.isfinite(m.norm):
                continue
            earlier = history.setdefault(m.path, [])
            if earlier and m.path not in seen:
                median = statistics.median(earlier)
                if median > 0 and m.norm > SPIKE * median:
                    seen.add(m.path)
                    out.append(Finding("spike", m.path or "(model)", f"gradient norm jumped {m.norm / median:.3g}x "
                                       f"at step {rec.index}", f"norm {m.norm:.3g} at step {rec.index} against a "
                                       f"median of {median:.3g} over steps 1-{rec.index - 1}",
                                       fix_for("spike"), rec.index, call_node(rec, m.path)))
            earlier.append(m.norm)
    return out


def mode_findings(records: list[StepRecord], model: nn.Module) -> list[Finding]:
    """Training in ``eval()`` (dropout off, batch norm frozen while the weights move), or evaluating in
    ``train()`` (a step with a forward and no backward, while dropout drops and batch norm updates its
    running statistics)."""
    stochastic = [p for p, m in model.named_modules()
                  if isinstance(m, (nn.Dropout, nn.modules.batchnorm._BatchNorm)) or "Dropout" in type(m).__name__]
    if not stochastic:
        return []
    names = ", ".join(stochastic[:3])
    for rec in records:
        if rec.training_at_backward is False and rec.moved:
            return [Finding("mode", "(model)", "the training step ran in eval() mode",
                            f"at step {rec.index}'s backward model.training was False while {len(rec.moved)} "
                            f"parameters moved; {len(stochastic)} modules behave differently in eval ({names})",
                            fix_for("mode"), rec.index)]
        off = [path for path in rec.eval_at_backward if _gradient_passes(rec, path)]
        if rec.training_at_backward and off and rec.moved:
            listed = ", ".join(f"{p} ({type(model.get_submodule(p)).__name__})" for p in off[:3])
            return [Finding("mode", "(model)", f"{len(off)} module{'s' if len(off) > 1 else ''} stayed in eval() "
                            "while the model trained", f"at step {rec.index}'s backward model.training was True but "
                            f"{listed}{', ...' if len(off) > 3 else ''} had training=False (dropout off, batch norm "
                            f"on its running statistics) while {len(rec.moved)} parameters moved",
                            "call model.train() before training steps, with no submodule .eval() after it (unless "
                            "freezing batch-norm statistics is meant)", rec.index)]
        ran_forward = rec.cap is not None and bool(rec.cap.calls)
        if rec.backwards == 0 and ran_forward and rec.training_at_forward:
            return [Finding("mode", "(model)", "an evaluation step ran in train() mode",
                            f"step {rec.index} ran the model's forward with no backward while model.training was "
                            f"True: {names} drop units / update running statistics as in training",
                            fix_for("mode"), rec.index)]
    return []


def _gradient_passes(rec: StepRecord, path: str) -> bool:
    """Does a trained parameter's gradient pass through the module at ``path`` in this step's backward? Its
    nodes, or for a module that makes none (dropout in eval is the identity) its parent's, are in the graph: a
    frozen backbone run under no_grad makes none, so its eval() harms nothing."""
    graph = rec.graph
    if graph is None:
        return True  # nothing measured: keep the finding

    def has_nodes(prefix: str) -> bool:
        return any(d.get("kind") == "op" and (not prefix or d.get("module", "") == prefix or
                                              str(d.get("module", "")).startswith(prefix + "."))
                   for _, d in graph.nx.nodes(data=True))

    return has_nodes(path) or has_nodes(path.rpartition(".")[0])


def not_a_parameter(model: nn.Module, records: Sequence[StepRecord] = (),
                    optimizers: Iterable[torch.optim.Optimizer] = ()) -> list[Finding]:
    """Weights ``parameters()`` misses (:mod:`gradviz_nb.doctor.registration`): a leaf tensor that requires
    grad kept as a plain attribute, in a plain list / dict, or as a buffer, and modules in a plain container.
    Named when backward gave it a gradient (or, with no backward observed, from the structure alone) and no
    optimizer holds it. A tensor with a ``grad_fn`` (a loss kept on the module) is a value and never named."""
    held = {id(p) for o in optimizers for g in o.param_groups for p in g["params"]}
    got: dict[str, float] = {}
    for rec in records:
        for b in rec.events.backwards:
            for n, v in b.contrib.items():
                got[n] = max(got.get(n, 0.0), v)
    backward_ran = any(r.events.backwards for r in records)
    out = []
    for u in unregistered(model):
        fed = {n: got[n] for n in u.tensors if n in got}
        if (backward_ran and not fed) or all(id(t) in held for t in u.tensors.values()):
            continue
        out.append(_unregistered_finding(u, fed, backward_ran))
    return out


def _unregistered_finding(u: Unregistered, fed: dict[str, float], backward_ran: bool) -> Finding:
    first = next(iter(u.tensors.values()))
    over = f" over {len(fed)} tensors" if len(fed) > 1 else ""
    grad = (f"backward gave it a gradient (|g| {max(fed.values()):.3g}{over})" if fed
            else "no backward ran to show whether it gets a gradient")
    tail = f"; {grad}, and no optimizer holds it, so it never moves"
    if u.how == "modules":
        n = sum(t.numel() for t in u.tensors.values())
        holder = "nn.ModuleDict" if u.path and "'" in next(iter(u.tensors)) else "nn.ModuleList"
        return Finding("not-a-parameter", u.path, "modules kept in a plain container",
                       f"{u.owner}.{u.attr} holds {u.modules} modules ({n:,} parameters) that model.parameters() "
                       "and the optimizer do not see" + tail, f"self.{u.attr} = {holder}(...)", 1)
    if u.how == "buffer":
        return Finding("not-a-parameter", u.path, "a buffer that requires grad: a weight registered as a buffer",
                       f"{u.owner}.{u.attr} is a buffer {tuple(first.shape)} with requires_grad=True: it is in "
                       "state_dict() but not in model.parameters()" + tail,
                       f"self.{u.attr} = nn.Parameter(...) instead of register_buffer (or requires_grad=False if "
                       "it is a constant)", 1)
    if u.how == "attribute":
        return Finding("not-a-parameter", u.path, "a tensor that requires grad but is not an nn.Parameter",
                       f"{u.owner}.{u.attr} is a plain leaf tensor {tuple(first.shape)}: model.parameters() and the "
                       "optimizer do not see it" + tail, f"self.{u.attr} = nn.Parameter(...)", 1)
    holder = "nn.ParameterDict" if u.how == "dict" else "nn.ParameterList"
    return Finding("not-a-parameter", u.path, f"weights kept in a plain {u.how}",
                   f"{u.owner}.{u.attr} holds {len(u.tensors)} leaf tensors that require grad "
                   f"({', '.join(list(u.tensors)[:3])}): model.parameters() and the optimizer do not see them" + tail,
                   f"self.{u.attr} = {holder}(...)", 1)


_INPLACE = re.compile(r"\[torch\.\w+ \[([\d, ]*)\]\], which is output (\d+) of (\w+), is at version (\d+); "
                      r"expected version (\d+)")


def inplace_finding(err: BaseException, writes: list[InplaceWrite], index: int) -> Finding | None:
    """Name the in-place op behind PyTorch's "modified by an inplace operation" error, from the writes the
    capture saw in the forward."""
    text = str(err)
    if "modified by an inplace operation" not in text:
        return None
    m = _INPLACE.search(text)
    if m is None:
        return Finding("inplace", "(unknown op)", "an in-place op overwrote a tensor saved for backward",
                       text.splitlines()[0], fix_for("inplace"), index)
    shape = tuple(int(d) for d in m.group(1).split(",") if d.strip())
    output, made_by, version = int(m.group(2)), m.group(3), int(m.group(4))
    # PyTorch names the node by its forward op ("Sigmoid") or its node name ("AddmmBackward0")
    hits = [w for w in writes if made_by in (w.target_op, re.sub(r"Backward\d*$", "", w.target_op))
            and w.target_output == output and w.shape == shape]
    hit = next((w for w in hits if w.version == version), hits[-1] if hits else None)
    saved = f"output {output} of {made_by} {list(shape)}"
    if hit is None:
        return Finding("inplace", made_by, f"an in-place op overwrote {saved}, which backward needs",
                       f"PyTorch: version {version}, expected {m.group(5)}; gv.capture saw no in-place op on it "
                       "(it ran outside the captured forward)", fix_for("inplace"), index)
    where = f" in module {hit.where!r}" if hit.where else ""
    return Finding("inplace", f"{hit.op}{where}", f"{hit.op} at {hit.line or 'an unknown line'}{where} overwrote "
                   f"{saved}, which backward needs", f"the tensor made by {made_by} was saved for backward (by "
                   f"{made_by} itself or an op that consumed it), then {hit.op} moved it to version {version}; "
                   f"backward expected version {m.group(5)}", f"use the out-of-place form: x = x.{hit.op[:-1]}(...)",
                   index)


# -- the checks, as the doctor runs them --------------------------------------------------------------------


def check_causes(obs: Observed) -> list[Finding]:
    """Zero, tiny and cut gradients with the cause gv.why names (doctor/why_checks.py)."""
    from gradviz_nb.doctor.why_checks import check_causes as causes

    return causes(obs)


def check_inplace(obs: Observed) -> list[Finding]:
    """A step that failed with PyTorch's in-place error, named by the write the capture saw."""
    hits = (inplace_finding(r.error, r.cap.inplace, r.index) for r in obs.records
            if r.error is not None and r.cap is not None)
    return [h for h in hits if h is not None]


def check_flow(obs: Observed) -> list[Finding]:
    """gradient_flow's flags of the first step that has them."""
    first = next((r for r in obs.records if r.flow is not None), None)
    return findings_from_flow(first, obs.copies) if first is not None else []


def check_optimizer(obs: Observed) -> list[Finding]:
    """``frozen`` and ``not-in-optimizer``: what the optimizer's param groups hold against what got a gradient."""
    return optimizer_findings(obs.records, obs.model, obs.optimizer, obs.others, obs.recreated)


def check_stale(obs: Observed) -> list[Finding]:
    """``stale-grad``: a ``.grad`` the next backward added onto without a zero_grad between (per parameter: any
    optimizer the step used that holds it is the one to clear it)."""
    return stale_findings(obs.records, obs.model, obs.optimizer, obs.not_in_optimizer | obs.recreated, obs.others)


def check_spike(obs: Observed) -> list[Finding]:
    """``spike``: a layer's gradient norm jumping over its earlier steps' median."""
    return spike_findings(obs.records)


def check_mode(obs: Observed) -> list[Finding]:
    """``mode``: training in eval(), or evaluating in train()."""
    return mode_findings(obs.records, obs.model)


def check_registration(obs: Observed) -> list[Finding]:
    """``not-a-parameter``: weights ``parameters()`` misses that got a gradient no optimizer uses."""
    optimizers = [*([obs.optimizer] if obs.optimizer is not None else []), *obs.others]
    return not_a_parameter(obs.model, obs.records, optimizers)


CHECKS: tuple[Check, ...] = (check_inplace, check_flow, check_optimizer, check_stale, check_spike, check_mode,
                             check_registration, check_double_backward, check_unscaled_accumulation,
                             check_two_optimizers, check_zero_grad_before_step, check_recreated, check_grad_edits,
                             check_loss_weight, check_zero_grad_in_accumulation, check_lr_zero, check_data_write,
                             check_functions, check_self_freeze, check_causes, check_clip_norm)
"""Every check the doctor runs, in order (findings are then sorted by the kinds' rank)."""

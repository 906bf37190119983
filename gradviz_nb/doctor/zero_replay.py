"""Where a zero or tiny gradient was lost, measured in the backward itself: the step replayed once.

The doctor's observed steps let the backward run unhooked (recording every node costs more than the backward).
When the first step that ran a backward left a parameter's gradient exactly zero or tiny, the state is put back
as it was before that step and the step runs again, under capture, up to its first backward, which
:func:`gv.record_backward <gradviz_nb.probes.backward.record_backward>` records node by node; the step is stopped
there (one forward and one backward more, no optimizer step; the doctor restores everything afterwards). Not
replayed: zeros the step's own graph measures expected (a zero-initialised up-projection on every path), and a
step whose first backward ran on a loss the step measured multiplied by zero (the loss-weight check names it).

For each such parameter the recording names the first node that received a non-zero gradient and sent zero
towards it, or the node that kept the least of its norm (:func:`~gradviz_nb.probes.causes.where_lost`); hooks of
every kind are nodes there or measured in/out pairs between two nodes. A node that sent zero multiplied by
something all zero: its saved tensors, read while the replayed graph is alive, say what
(:func:`~gradviz_nb.probes.causes.zero_factors`): a trainable parameter that is exactly zero (expected: a
zero-initialised up-projection), or the output of another node, traced to the node that made the zero. No op
name decides whether or where a zero exists; the names only word it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gradviz_nb.doctor.checks_grads import GONE
from gradviz_nb.doctor.observe import StepRecord
from gradviz_nb.doctor.why import Lines, Why, analyse
from gradviz_nb.doctor.why_checks import candidates
from gradviz_nb.probes.backward import BackwardRecording, record_backward
from gradviz_nb.probes.causes import (
    Lost,
    ZeroFactor,
    expected_zero,
    grad_status,
    where_lost,
    zero_factors,
    zero_maker,
    zero_param_upstream,
)
from gradviz_nb.probes.owned import for_this_thread
from gradviz_nb.tracing import AutogradGraph, Capture, capture
from gradviz_nb.tracing.evidence import Evidence

__all__ = ["replay_zeros"]


class _Stop(BaseException):
    """Out of the replayed step right after its first backward (a BaseException: a user's ``except
    Exception`` around the backward does not swallow it)."""


def _loss_weighted_away(rec: StepRecord) -> bool:
    """The step's own arithmetic measured its first backward's loss multiplied by (almost) zero on its way to
    ``backward()``: every gradient's zero is that weight's, named by the loss-weight check."""
    first = rec.events.backwards[0] if rec.events.backwards else None
    return first is not None and first.scale <= GONE and bool(first.scale_lines)


def _root(tensors: Any, grad_tensors: Any) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The one root of a backward call and its gradient (None, None for several roots)."""
    roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors or [])
    grads = [grad_tensors] if grad_tensors is None or isinstance(grad_tensors, torch.Tensor) else list(grad_tensors)
    if len(roots) != 1 or len(grads) != 1:
        return None, None
    return roots[0], grads[0]


def _distributed() -> bool:
    """More than one process in the default group: a replay runs the step's collectives again, and a rank
    whose gradients have no zero would not join them (a hang), so the zeros keep the graph walk's answer."""
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def replay_zeros(step: Callable[[], Any], model: nn.Module, records: list[StepRecord],
                 rewind: Callable[[], None]) -> None:
    """Explain the zero and tiny gradients of the first step that ran a backward by a recorded replay of that
    step's first backward; the answers go to that record's ``measured``. ``rewind()`` puts the state back as it
    was before the first step (the caller restores it again afterwards). Only the first observed step is
    replayed (a later one would need the steps before it run again), and not for zeros the step's own graph
    already measured expected (every path multiplies by a parameter that is all zero)."""
    rec = next((r for r in records if r.flow is not None), None)
    if rec is None or rec.graph is None or rec.index != 1 or _distributed():
        return
    wanted = {n: s for n, s in candidates(rec).items() if s[0] in ("zero", "tiny")}
    if not wanted or _loss_weighted_away(rec):
        return
    rewind()  # the values as the step found them: what expected_zero measures
    leaves = rec.graph.leaves()
    wanted = {n: s for n, s in wanted.items() if s[0] == "tiny" or not (
        n in leaves and expected_zero(rec.graph, [leaves[n]]))}  # LoRA's A at init: no replay
    if not wanted:
        return
    lines = Lines()
    done: list[bool] = []
    busy: list[bool] = []

    def backward(original: Callable[..., Any], tensors: Any, grad_tensors: Any = None, *args: Any,
                 **kwargs: Any) -> Any:
        if busy:  # the recording's own backward
            return original(tensors, grad_tensors, *args, **kwargs)
        if done:
            raise _Stop
        done.append(True)
        root, grad = _root(tensors, grad_tensors)
        if root is None or root.grad_fn is None or kwargs.get("inputs") is not None or kwargs.get("create_graph"):
            raise _Stop
        lines.on = False
        busy.append(True)
        with cap.paused():
            try:
                recording = record_backward(root, model=model, capture=cap, accumulate=True, grad=grad)
            finally:
                busy.clear()
            rec.measured.update(_explain(recording, root, model, cap, wanted, lines.lines))
        raise _Stop

    with capture(model) as cap, lines, for_this_thread(torch.autograd, "backward", backward):
        try:
            step()
        except _Stop:
            pass
        except Exception:  # the step failing on replay: the zeros keep the step's own evidence
            return


def _explain(recording: BackwardRecording, root: torch.Tensor, model: nn.Module, cap: Capture,
             wanted: dict[str, tuple[str, str]], lines: dict[int, str]) -> dict[str, Why]:
    graph = recording.graph
    named = dict(model.named_parameters(remove_duplicate=False))
    losses: dict[str, tuple[tuple[str, str], Lost | None]] = {}
    for name, (status, _) in wanted.items():
        now = grad_status(named.get(name))
        leaf = graph.leaves().get(name)
        if now[0] != status or leaf is None:
            continue  # the replay did not reproduce the step (data or randomness outside torch's RNG)
        losses[name] = (now, where_lost(recording, graph, leaf, zero=status == "zero"))
    zeros = [lost.node for _, lost in losses.values() if lost is not None and lost.factor == 0 and not lost.between]
    factors = zero_factors(root, graph, zeros)
    out = {}
    for name, (now, lost) in losses.items():
        if lost is not None and lost.node in factors and not lost.between:
            lost = _with_factor(recording, root, cap.evidence, lost, factors[lost.node])
        out[name] = analyse(name, graph=graph, model=model, cap=cap, status=now, lost=lost, lines=lines)
    return out


def _with_factor(recording: BackwardRecording, root: torch.Tensor, events: list[Evidence], lost: Lost,
                 z: ZeroFactor) -> Lost:
    """``lost`` with the all-zero tensor its node multiplied by, and where that was made: the node upstream that
    sent zero for non-zero (past activations whose inputs all sat exactly on their bound: their zeros came from
    further up), else a trainable parameter upstream that is exactly zero (then the zero is that parameter's,
    expected)."""
    graph = recording.graph
    if z.own:
        origin = _through_bound(recording, root, events, lost.node)
        return dataclasses.replace(lost, zero=z, maker=origin if origin != lost.node else "")
    if not z.node:
        return dataclasses.replace(lost, zero=z)
    maker = zero_maker(recording, graph, z.node)
    if not maker:
        param = zero_param_upstream(graph, z.node)
        if param:
            return dataclasses.replace(lost, zero=dataclasses.replace(z, param=param, node=""))
    return dataclasses.replace(lost, zero=z, maker=_through_bound(recording, root, events, maker or z.node))


def _all_on_bound(graph: AutogradGraph, node: str, events: list[Evidence]) -> bool:
    """Every input of ``node`` sat exactly on its bound in forward (measured by the capture: a ReLU fed zeros)."""
    seq = graph.nx.nodes[node].get("seq")
    return any(e.seq == seq and e.kind == "saturated" and e.numbers.get("on_bound", 0.0) >= 1.0 for e in events)


def _through_bound(recording: BackwardRecording, root: torch.Tensor, events: list[Evidence], node: str) -> str:
    """``node``, or, when its inputs all sat exactly on its bound, the op upstream that made those values (its own
    all-zero factor's maker when it multiplied by one)."""
    graph = recording.graph
    for _ in range(8):
        preds = [u for u in graph.nx.predecessors(node) if graph.nx.nodes[u].get("kind") == "op"]
        if not _all_on_bound(graph, node, events) or len(preds) != 1:
            return node
        node = preds[0]
        z = zero_factors(root, graph, [node]).get(node)
        if z is None or not z.node:
            return node
        node = zero_maker(recording, graph, z.node) or z.node
    return node

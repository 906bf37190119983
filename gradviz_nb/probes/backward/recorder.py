"""One recorded pass of :func:`gv.record_backward`: the hooks on every node, what they read, and the steps
they leave in the recording (:class:`Recorder`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gradviz_nb.probes.backward.stats import SAME_ELEMENTS, GradStats, Pending, Tracker, resolve
from gradviz_nb.probes.backward.steps import Delivery, Step
from gradviz_nb.tracing import AutogradGraph, typed_torch
from gradviz_nb.tracing.trace import trace_with_nodes
from gradviz_nb.tracing.walk import is_custom

if TYPE_CHECKING:
    from gradviz_nb.probes.backward.recording import BackwardRecording

__all__ = ["Recorder", "hidden_params"]


def _distributed() -> bool:
    dist = getattr(torch, "distributed", None)
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


class Recorder:
    """One recorded pass: the hooks' state, and what they leave for :meth:`finish`.

    Most nodes get a one-line pre-hook (which node started: a backward error names the node that did not
    finish) and a post-hook that reads what the node received and sent: both are still there after it
    ran, and a gradient a leaf received was already moved into ``.grad`` (no copy forced). Steps are
    made in :meth:`finish`. Nodes whose received gradient may change while or after they run read it in
    their pre-hook instead (:meth:`_early`): custom Functions (their backward may write ``grad_output``
    in place) and leaves whose ``.grad`` changes after accumulation (``accumulate=True``, post-accumulate
    hooks, DDP/FSDP reducers)."""

    def __init__(self, rec: BackwardRecording, graph: AutogradGraph, nodes: dict[Any, str], accumulate: bool,
                 keep_values: bool, keep_leaf_values: bool) -> None:
        self.rec, self.pass_index = rec, rec.passes
        self.accumulate, self.keep_values, self.keep_leaf = accumulate, keep_values, keep_leaf_values
        self.leaf_tensors: dict[str, torch.Tensor] = {}
        self.producers: dict[str, list[tuple[str, int] | None]] = {}
        self.one_slot: set[str] = set()
        self.op_of: dict[str, str] = {}
        self._index(graph, nodes)
        self.track = Tracker()
        self.early: dict[str, tuple[list[Pending | None], Pending | None]] = {}  # read by _early pre-hooks
        self.started: list[str] = []  # node ids in the order the engine started them
        self.order: list[tuple[str, list[Pending | None], list[Pending | None], Pending | None, Pending | None]] = []
        self.leaf_grads: dict[str, torch.Tensor] = {}
        self.hidden: list[tuple[torch.Tensor, list[str]]] = []
        self.hidden_grads: dict[str, torch.Tensor | None] = {}
        self.distributed = _distributed()
        self.node_ids: dict[Any, str] = dict(nodes)  # live nodes -> ids while the pass runs (dropped after)
        self.nested_calls: dict[str, int] = {}
        self.put_back: dict[int, tuple[torch.Tensor, Any]] = {}  # id -> (tensor, .grad): set by record_backward

    def _index(self, graph: AutogradGraph, nodes: dict[Any, str]) -> None:
        """Leaves, producers per input and one-slot buffers of ``nodes`` (the traced graph's, or a nested
        engine call's, already merged into the recording's graph)."""
        attrs = graph.nx.nodes
        self.leaf_tensors.update({n: fn.variable for fn, n in nodes.items() if attrs[n]["kind"] == "leaf"})
        # producer (node id, output_nr) per input_nr, from the traced edges (no next_functions read again)
        ids = set(nodes.values())
        self.producers.update({n: [] for n in ids})
        slots: dict[str, int] = {}  # incoming slots of each node's buffer (the root's: none counted)
        for u, v, pairs in graph.nx.edges(data="slots"):
            ps = self.producers.get(v) if v in ids else None
            if ps is None:  # an edge into a root, or outside these nodes
                continue
            for out, input_nr in pairs:
                ps.extend([None] * (input_nr + 1 - len(ps)))
                ps[input_nr] = (u, out)
                slots[u] = slots.get(u, 0) + 1
        self.one_slot.update(n for n, k in slots.items() if k == 1)
        self.op_of.update({n: attrs[n]["op"] for n in nodes.values()})

    def nested(self, roots: list[torch.Tensor], outer: Any, model: nn.Module | None,
               names: Mapping[str, torch.Tensor] | None) -> Callable[[], None]:
        """An engine call made inside the backward (a reentrant checkpoint's inner backward, an
        ``autograd.grad`` in a custom backward): its nodes join the recording's graph inside the outer node's
        module call, ids ``"<outer id>/<k>/<id>"``, and are hooked until the call returns."""
        graph = self.rec.graph
        outer_id = self.node_ids.get(outer, "") if outer is not None else ""
        count = self.nested_calls.get(outer_id, 0)
        self.nested_calls[outer_id] = count + 1
        prefix = f"{outer_id or 'nested'}/{count}/"
        inner, inner_nodes = trace_with_nodes(roots, model, None, names)
        where = graph.nx.nodes[outer_id] if outer_id in graph.nx else {}
        kept = {n: prefix + n for n, d in inner.nx.nodes(data=True) if d["kind"] != "root"}
        added = 0
        for n, new in kept.items():
            if new not in graph.nx:
                d = dict(inner.nx.nodes[n])
                d["call"], d["module"] = where.get("call", ""), where.get("module", "")
                graph.nx.add_node(new, **d)
                added += 1
        _grow(graph, where.get("call", ""), added)
        for u, v, d in inner.nx.edges(data=True):
            if u in kept and v in kept and not graph.nx.has_edge(kept[u], kept[v]):
                graph.nx.add_edge(kept[u], kept[v], **d)
        _join(graph, inner, kept, outer_id)
        mapped = {fn: kept[n] for fn, n in inner_nodes.items() if n in kept}
        for fn in mapped:  # a leaf only the nested call reaches (no model= named it): its .grad put back
            var = getattr(fn, "variable", None)
            if isinstance(var, torch.Tensor) and not self.accumulate and id(var) not in self.put_back:
                self.put_back[id(var)] = (var, var.grad)
                var.grad = None
        self.node_ids.update(mapped)
        self._index(graph, mapped)
        handles = self.install(mapped, hidden=False)
        del inner_nodes, mapped

        def undo() -> None:
            for h in handles:
                h.remove()
        return undo

    @property
    def finished(self) -> set[str]:
        return {entry[0] for entry in self.order}

    def install(self, nodes: dict[Any, str], hidden: bool = True) -> list[Any]:
        handles = []
        started = self.started.append
        for fn, node_id in nodes.items():
            if self._needs_early(fn, node_id):
                handles.append(fn.register_prehook(self._early(node_id)))
            else:
                handles.append(fn.register_prehook(lambda _, n=node_id: started(n)))
            handles.append(fn.register_hook(self._post(node_id)))
        for t, param_names in self.hidden if hidden else ():
            handles.append(typed_torch.register_hook(t, self._arrived(param_names)))
        return handles

    def _needs_early(self, fn: Any, node_id: str) -> bool:
        leaf = self.leaf_tensors.get(node_id)
        if leaf is None:
            return is_custom(fn)
        return self.accumulate or self.distributed or bool(getattr(leaf, "_post_accumulate_grad_hooks", None))

    def _early(self, node_id: str) -> Any:
        leaf, reuse = self.leaf_tensors.get(node_id), node_id in self.one_slot

        def hook(grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
            self.started.append(node_id)
            if leaf is None:
                self.early[node_id] = ([self.track(g, self.keep_values, reuse=reuse) for g in grad_outputs], None)
                return
            outs = [self.track(g, self.keep_leaf, copy=self.accumulate, reuse=reuse) for g in grad_outputs]
            # accumulate: .grad is about to change in place: its statistics and values now
            self.early[node_id] = (outs, self.track(leaf.grad, self.keep_leaf) if self.accumulate else None)
        return hook

    def _post(self, node_id: str) -> Any:
        same = self.op_of[node_id] in SAME_ELEMENTS
        leaf, reuse = self.leaf_tensors.get(node_id), node_id in self.one_slot
        keep_out = self.keep_leaf if leaf is not None else self.keep_values
        track, early, append = self.track, self.early, self.order.append

        def hook(grad_inputs: tuple[torch.Tensor | None, ...], grad_outputs: tuple[Any, ...]) -> None:
            got = early.pop(node_id, None)
            # Read after the node ran: a leaf's gradient is .grad by now, held without a copy.
            outs, before = got if got is not None else (
                [track(g, keep_out, copy=False, reuse=reuse) for g in grad_outputs], None)
            if same and len(grad_inputs) == 1 and len(outs) == 1:
                ins = [track.same(grad_inputs[0], outs[0], self.keep_values)]  # a view of what arrived
            else:
                ins = [track(g, self.keep_values) for g in grad_inputs]
            after = None
            if leaf is not None:
                received = outs[0] if outs else None
                if received is not None and received.value is not None:
                    self.leaf_grads[node_id] = received.value
                # Without accumulate the slot was empty, so .grad is exactly what arrived: no copy.
                after = track(leaf.grad, self.keep_leaf) if self.accumulate else received
            append((node_id, outs, ins, before, after))
        return hook

    def _arrived(self, param_names: list[str]) -> Any:
        # A tensor hook on a parameter that is no node of the graph: it fires when the backward a reentrant
        # checkpoint runs inside its node reaches that parameter (once per checkpoint using it).
        def hook(g: torch.Tensor) -> None:
            for name in param_names:
                if not self.keep_leaf:
                    self.hidden_grads[name] = None
                elif (old := self.hidden_grads.get(name)) is None:
                    self.hidden_grads[name] = g.detach().clone()  # .grad may become this tensor and be added to
                else:
                    self.hidden_grads[name] = old + g.detach()
        return hook

    def failing(self) -> str | None:
        """The node the engine started last without finishing it (where a backward error came from)."""
        done = self.finished
        return next((n for n in reversed(self.started) if n not in done), None)

    def finish(self) -> None:
        """Statistics to numbers, the steps into the recording."""
        tracked = [t for _, outs, ins, before, after in self.order for t in (*outs, *ins, before, after)
                   if t is not None]
        resolved = resolve(tracked)

        def get(t: Pending | None) -> GradStats | None:
            return resolved[id(t)] if t is not None else None

        rec, first = self.rec, len(self.rec.steps)
        for i, (node_id, outs, ins, before, after) in enumerate(self.order):
            producers = self.producers[node_id]
            deliveries = [Delivery(producer[0], producer[1], input_nr)
                          for input_nr, (g, producer) in enumerate(zip(ins, producers, strict=False))
                          if g is not None and producer is not None]
            rec.steps.append(Step(first + i, self.pass_index, node_id, self.op_of[node_id], [get(t) for t in outs],
                                  [get(t) for t in ins], deliveries, get(before), get(after)))
        rec._leaf_grads.append(self.leaf_grads)
        rec._hidden_grads.append(self.hidden_grads)
        rec._hidden_names.update(name for _, param_names in self.hidden for name in param_names)
        rec.passes += 1


def hidden_params(
    model: nn.Module | None, names: Mapping[str, torch.Tensor] | None, leaves: Iterable[torch.Tensor]
) -> list[tuple[torch.Tensor, list[str]]]:
    """Named tensors that require grad but are no leaf of the graph (their names, once per tensor)."""
    in_graph = {id(t) for t in leaves}
    found: dict[int, tuple[torch.Tensor, list[str]]] = {}
    named = list(model.named_parameters(remove_duplicate=False)) if model is not None else []
    for name, t in [*named, *(names or {}).items()]:
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf and id(t) not in in_graph:
            found.setdefault(id(t), (t, []))[1].append(name)
    return list(found.values())


def _join(graph: AutogradGraph, inner: AutogradGraph, kept: Mapping[str, str], outer_id: str) -> None:
    """Join a nested call's nodes to the outer node that ran it: what the call's roots were made by feeds the
    outer node (a reentrant checkpoint's recomputed output is its node's output; the gradient the node
    received flows into that call), so reachability (what-if, lost leaves) sees the nested leaves reach the
    loss. The edge carries inputs past the outer node's own (no gradient is ever sent to them)."""
    if outer_id not in graph.nx:
        return
    first = 1 + max((i for _, _, slots in graph.nx.in_edges(outer_id, data="slots") for _, i in slots), default=-1)
    roots = [n for n, kind in inner.nx.nodes(data="kind") if kind == "root"]
    for k, root in enumerate(roots):
        for u, _, d in inner.nx.in_edges(root, data=True):
            if u not in kept:
                continue
            slot = [d["output_nr"], first + k]
            if graph.nx.has_edge(kept[u], outer_id):
                graph.nx.edges[kept[u], outer_id]["slots"].append(slot)
            else:
                graph.nx.add_edge(kept[u], outer_id, output_nr=slot[0], input_nr=slot[1], shape=d.get("shape"),
                                  slots=[slot])



def _grow(graph: AutogradGraph, call: str, added: int) -> None:
    """The box holding a nested call's nodes, and every box around it, counts them (a box's ``size`` is its
    nodes, its inner boxes' included): the page's "Hidden · 12 nodes", not the one opaque node."""
    calls = {c["id"]: c for c in graph.nx.graph.get("calls", [])}
    seen: set[str] = set()
    while call in calls and call not in seen:
        seen.add(call)
        calls[call]["size"] += added
        call = calls[call]["parent"]

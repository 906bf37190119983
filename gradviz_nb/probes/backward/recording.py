"""Record the real backward pass node by node: ``gv.record_backward``.

Hooks on every autograd node of the traced graph record, in the order PyTorch's engine runs them, the
gradient each node received (its input buffer, already summed over consumers) and the gradients it
sent to each input. Statistics are kept as small tensors during the pass and turned into numbers once
at the end (:mod:`gradviz_nb.probes.backward.stats`); full values are kept for small gradients and for
leaves. By default the user's ``.grad`` are put back exactly as they were.
"""

from __future__ import annotations

import re
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gradviz_nb.analysis.derivatives import SAVED_INPUT, explain
from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.backward.armed import Armed, armed_check
from gradviz_nb.probes.backward.nested import Nested
from gradviz_nb.probes.backward.recorder import Recorder, hidden_params
from gradviz_nb.probes.backward.stats import GradStats
from gradviz_nb.probes.backward.steps import Step
from gradviz_nb.probes.backward.undo import undone, user_hooks
from gradviz_nb.probes.nonfinite import NonFinite, forward_origin
from gradviz_nb.probes.sharded import is_dtensor
from gradviz_nb.tracing import AutogradGraph, Capture, typed_torch
from gradviz_nb.tracing.capture import watched
from gradviz_nb.tracing.observer import InplaceWrite
from gradviz_nb.tracing.summary import SMALL, readable
from gradviz_nb.tracing.trace import trace, trace_with_nodes
from gradviz_nb.tracing.walk import reachable
from gradviz_nb.validate import boolean, instance, not_meta

if TYPE_CHECKING:
    from gradviz_nb.probes.backward.breakpoints import Stop


def as_list(t: torch.Tensor) -> list[float]:
    """Every element, flat (a sparse gradient densified first; a complex one as its magnitudes ``|g|``,
    like its statistics: the page shows real numbers, never a complex number's real part alone)."""
    t = t.to_dense() if t.is_sparse else t
    values: list[float] = (t.abs() if t.is_complex() else t).flatten().tolist()
    return values


class BackwardRecording:
    """The steps of one or more recorded backward passes over the same graph.

    Example::

        rec = gv.record_backward(loss, model=model)
        rec.steps[0].node          # the root's grad_fn: the first node the engine runs
        rec.leaf_grad("fc1.weight")  # the full gradient that reached fc1.weight in the last pass
    """

    def __init__(self, graph: AutogradGraph | Callable[[], AutogradGraph]) -> None:
        # A quiet armed pass keeps how to trace its graph instead of the graph (traced when first asked).
        self._graph = graph
        self.steps: list[Step] = []
        self.passes = 0
        self._leaf_grads: list[dict[str, torch.Tensor]] = []
        self.values: dict[str, list[float]] = {}  # node id -> forward value of small outputs
        self.exponents: dict[str, float] = {}  # PowBackward0 node -> its scalar exponent
        # Per pass: parameters (by name) that are no leaf of the graph, e.g. inside a reentrant checkpoint,
        # whose backward PyTorch runs inside one opaque node -> what arrived there (None: not kept).
        self._hidden_grads: list[dict[str, torch.Tensor | None]] = []
        self._hidden_names: set[str] = set()  # every such parameter name the recording watched
        self.armed: Armed | None = None  # record_backward(until=...): what the armed pass checked
        # The loss of a recorded pass was already NaN/Inf: where the forward pass made it (the first such pass).
        self.forward: NonFinite | None = None

    @property
    def forward_text(self) -> str:
        """:attr:`forward` in words, as the ``nonfinite`` stop and the page say it ("" when the loss was finite):
        the site in :meth:`NonFinite.summary`'s words (op, module, the user's source line), then the cause."""
        f = self.forward
        if f is None:
            return ""
        loss = f.reached[0] if f.reached else "the loss"
        if f.cause == "already non-finite":
            return f"{loss}: {f.detail}"
        text = f"{loss}: {f.kind} born in {f.site.describe()}: {f.cause}, {f.detail}"
        if not f.line:
            text += (" (to name the source line, run the forward inside `with gv.capture(model)`, or let "
                     "gv.find_nonfinite(fn) re-run the step)")
        return text

    @property
    def graph(self) -> AutogradGraph:
        """The recorded pass's autograd graph (traced when first asked, for a quiet armed recording)."""
        if not isinstance(self._graph, AutogradGraph):
            self._graph = self._graph()
        return self._graph

    def leaf_grad(self, name: str, pass_index: int = -1) -> torch.Tensor:
        """The gradient a leaf (by name or id) received in one pass (default: the last).

        Parameters of ``model`` / ``names`` that are no leaf of the graph (inside a reentrant checkpoint)
        are answered too: their gradient is what PyTorch delivered to them during the recorded backward.
        """
        self._pass(pass_index, "leaf_grad")
        if name in self._hidden_names and name not in self.graph.leaves():
            hidden = self._hidden_grads[pass_index]
            if name not in hidden:
                raise GradvizError(
                    f"{name!r} received no gradient in pass {pass_index}: PyTorch's backward did not reach it "
                    "(its .grad stays None), e.g. a reentrant checkpoint whose inputs need no grad.")
            value = hidden[name]
            if value is None:
                raise GradvizError(f"{name!r}: leaf values were not kept; record with keep_leaf_values=True.")
            return value
        try:
            node = self.graph.find(name)
        except GradvizError as err:
            if any(op == "CheckpointFunctionBackward" for _, op in self.graph.nx.nodes(data="op")):
                raise type(err)(
                    f"{err} Parameters inside a reentrant checkpoint are no nodes of this graph; pass model= "
                    "(or names={...}) to gv.record_backward so their gradients are recorded too.") from None
            raise
        grads = self._leaf_grads[pass_index]
        if node not in grads and self.graph.nx.nodes[node]["kind"] == "leaf" and any(
            s.node == node for s in self.pass_steps(pass_index)
        ):
            raise GradvizError(f"{name!r}: leaf values were not kept; record with keep_leaf_values=True.")
        if node not in grads:
            raise GradvizError(f"{name!r} received no gradient in pass {pass_index} (pruned, or not a leaf).")
        return grads[node]

    def explain(self, step: Step) -> list[str]:
        """The local derivative rule of ``step``'s op with PyTorch's numbers plugged in."""
        if not isinstance(step, Step):
            raise GradvizError(f"explain(step): step must be one of this recording's steps (rec.steps[i], "
                               f"rec.first_nonfinite, rec.find(...).step); got {type(step).__name__}.")
        g = self.graph.nx
        inputs: list[list[float] | None] = []
        for u, _, slots in sorted(g.in_edges(step.node, data="slots"), key=lambda e: min(s[1] for s in e[2])):
            for out, input_nr in slots:
                while len(inputs) <= input_nr:
                    inputs.append(None)
                inputs[input_nr] = self.values.get(u) if out == 0 else None
        received = step.grad_outputs[0].value if step.grad_outputs and step.grad_outputs[0] else None
        return explain(
            step.op,
            as_list(received) if received is not None else None,
            inputs,
            self.values.get(step.node),
            [as_list(s.value) if s is not None and s.value is not None else None for s in step.grad_inputs],
            n_elements=_numel(inputs[0]) if inputs else None,
            exponent=self.exponents.get(step.node),
        )

    @property
    def first_nonfinite(self) -> Step | None:
        """The first step (engine order) that SENT a NaN/Inf gradient while receiving only finite ones:
        where it was born in backward. Else the first step touching one (seeded at the root); None when
        every recorded gradient is finite. The stepper's "first NaN/Inf" button goes to the same step.
        A NaN born in the forward pass reaches backward already made: :func:`gv.find_nonfinite` names it."""
        def bad(grads: list[GradStats | None]) -> bool:
            return any(g is not None and g.nonfinite for g in grads)

        born = next((s for s in self.steps if bad(s.grad_inputs) and not bad(s.grad_outputs)), None)
        return born or next((s for s in self.steps if bad(s.grad_inputs) or bad(s.grad_outputs)), None)

    def find(self, rule: str = "", *, threshold: float | None = None, module: str = "", leaf: str = "") -> Stop:
        """A breakpoint: the first step where ``rule`` fires, with the numbers that made it fire.

        ``"nonfinite"`` (the first NaN/Inf received or sent; where it was born; later steps that healed it),
        ``"zero"`` (the first exactly-zero gradient sent for a non-zero one received), ``"above"`` with
        ``threshold=`` (the first gradient norm above it), ``"jump"`` (the largest change of norm from what a
        node received to what it sent); or ``module="blocks.3"`` / ``leaf="fc1.weight"`` (first and last
        step). ``stop.hit`` is False when it never fires; ``w.step = stop.index`` shows it in the stepper.

        Example::

            stop = rec.find("nonfinite")
            print(stop)        # born at step 813 (SqrtBackward0 in blocks.3): it received finite ...
        """
        from gradviz_nb.probes.backward.breakpoints import find

        return find(self, rule, threshold=threshold, module=module, leaf=leaf)

    def pass_steps(self, pass_index: int = -1) -> list[Step]:
        """The steps of one recorded pass (default: the last)."""
        wanted = self._pass(pass_index, "pass_steps")
        return [s for s in self.steps if s.pass_index == wanted]

    def _pass(self, pass_index: object, what: str) -> int:
        """``pass_index`` as a pass number, or a GradvizError saying which exist (or that none was kept)."""
        if self.passes == 0 and self.armed is not None:
            raise GradvizError(f"{what}: this armed recording kept no steps and no gradients (its backward had "
                               "no NaN/Inf, which is all until='nonfinite' checks); record them with "
                               "gv.record_backward(loss, model=model), without until=.")
        if isinstance(pass_index, bool) or not isinstance(pass_index, int) or not (
                -self.passes <= pass_index < self.passes):
            raise GradvizError(f"{what}(pass_index={pass_index!r}): this recording has {self.passes} pass(es); "
                               f"give an int from 0 to {self.passes - 1} (or -1 for the last).")
        return range(self.passes)[pass_index]

    def __repr__(self) -> str:
        return f"<BackwardRecording: {self.passes} pass(es), {len(self.steps)} steps over {self.graph!r}>"


def record_backward(
    loss: torch.Tensor,
    model: nn.Module | None = None,
    capture: Capture | None = None,
    names: Mapping[str, torch.Tensor] | None = None,
    *,
    accumulate: bool = False,
    keep_values: bool = False,
    keep_leaf_values: bool = True,
    into: BackwardRecording | None = None,
    grad: torch.Tensor | None = None,
    until: str | None = None,
) -> BackwardRecording:
    """Run the real ``loss.backward()`` with hooks on every node and record it step by step.

    By default ``.grad`` of every leaf ends exactly as before (the same tensor objects) and the graph
    stays usable. ``accumulate=True`` really accumulates into ``.grad`` (to show a second pass adding to
    the first). ``keep_values`` keeps full values of every gradient (not only small ones and leaves).
    ``into`` appends this pass to an earlier recording of the same graph structure (a training loop).
    ``grad``: the gradient of a non-scalar ``loss`` (as in ``loss.backward(grad)``).
    Parameters the graph cannot show (inside a reentrant checkpoint) are recorded too: ``leaf_grad``. Engine
    calls made inside the backward (a reentrant checkpoint's inner backward, ``autograd.grad`` in a custom
    backward) are followed: their nodes join the graph inside the outer node's box, their steps the recording
    (:mod:`gradviz_nb.probes.backward.nested`).
    ``until="nonfinite"`` arms it: the backward runs with only a cheap finiteness check per gradient, and
    is recorded in full only when a NaN/Inf appeared (else no steps; ``rec.armed`` says what was checked, and
    ``rec.graph`` is traced when first asked, while ``loss`` is alive: nothing keeps a quiet step's graph).

    Example::

        rec = gv.record_backward(loss, model=model)
        for step in rec.steps:
            print(step.op, [g.norm for g in step.grad_inputs if g])
    """
    _check_args(loss, grad, accumulate, keep_values, keep_leaf_values, into, model)
    _refuse_dtensor_leaves(loss)
    armed: Armed | None = None
    if until is not None:
        armed = _armed(loss, grad, until, model, into is not None or accumulate)
        if not armed.hit:
            quiet = BackwardRecording(_trace_later(loss, model, capture, names))
            quiet.armed = armed
            return quiet
    graph, nodes = trace_with_nodes(loss, model, capture, names)
    rec = into if into is not None else BackwardRecording(graph)
    if into is not None and _signature(into.graph) != _signature(graph):
        raise GradvizError("into=: this loss's graph differs from the recording's; record it separately.")
    if rec.passes == 0:
        rec.values, rec.exponents = _forward_values(graph, nodes)
    if rec.forward is None:
        rec.forward = forward_origin(graph, nodes, loss)
    run = Recorder(rec, graph, nodes, accumulate, keep_values, keep_leaf_values)
    run.hidden = hidden_params(model, names, run.leaf_tensors.values())
    leaves = [*run.leaf_tensors.values(), *(t for t, _ in run.hidden)]
    run.put_back = {id(t): (t, None) for t in leaves}  # these _grads_put_back restores
    hooked = user_hooks(leaves, (op for _, op in graph.nx.nodes(data="op")))  # before our own hooks go on
    handles = run.install(nodes)
    try:
        with undone(leaves, model, hooked=hooked, keep_grads=accumulate), \
                _grads_put_back(leaves, enabled=not accumulate), \
                Nested(lambda roots, outer: run.nested(roots, outer, model, names)):
            typed_torch.backward(loss, grad, retain_graph=True)
    except RuntimeError as err:
        failing = run.failing()
        writes = [w for cap in ([capture] if capture is not None else watched()) for w in cap.inplace]
        raise _backward_error(err, graph, failing, writes) from err
    finally:
        for h in handles:
            h.remove()
        for t, g in [v for k, v in run.put_back.items() if k not in {id(x) for x in leaves}]:
            t.grad = g
        run.node_ids.clear()
        del nodes, handles  # drop every autograd Node reference
    run.finish()
    rec.armed = armed if armed is not None else rec.armed
    return rec


def _armed(loss: torch.Tensor, grad: torch.Tensor | None, until: str, model: nn.Module | None,
           changes_grads: bool) -> Armed:
    """The armed pass (:func:`armed_check`), with its argument and freed-graph errors in the user's terms."""
    if changes_grads:
        raise GradvizError("record_backward(until=...) records one pass that changes no .grad: drop into= "
                           "and accumulate=True.")
    try:
        return armed_check(loss, grad, until, model)
    except RuntimeError as err:
        text = str(err)
        if "backward through the graph a second time" in text or "already been freed" in text:
            raise _freed("") from err
        raise


def _trace_later(loss: torch.Tensor, model: nn.Module | None, capture: Capture | None,
                 names: Mapping[str, torch.Tensor] | None) -> Callable[[], AutogradGraph]:
    """How to trace ``loss``'s graph later, holding the loss only weakly: a quiet armed recording must not
    keep a training step's activations alive."""
    ref = weakref.ref(loss)
    capture = capture if capture is not None else next(iter(watched()), None)  # the watch may end before

    def later() -> AutogradGraph:
        alive = ref()
        if alive is None:
            raise GradvizError("This armed recording found no NaN/Inf, so it kept no graph, and the loss it checked "
                               "has been freed since: trace a loss that is still alive, gv.trace(loss).")
        return trace(alive, model=model, capture=capture, names=names)
    return later


def _check_args(loss: Any, grad: Any, accumulate: bool, keep_values: bool, keep_leaf_values: bool, into: Any,
                model: nn.Module | None) -> None:
    if not isinstance(loss, torch.Tensor):
        raise GradvizError(f"record_backward needs the loss tensor, got {type(loss).__name__}.")
    if loss.grad_fn is None:
        raise GradvizError("record_backward needs a tensor with a grad_fn (a loss computed from tensors that "
                           "require grad); this one has none.")
    if grad is None and loss.numel() != 1:
        raise GradvizError(
            f"record_backward needs a scalar loss, got a tensor of shape {list(loss.shape)}: pass loss.sum() "
            "(or .mean()), or give the gradient of each element: gv.record_backward(out, grad=torch.ones_like(out)).")
    if grad is not None and (not isinstance(grad, torch.Tensor) or grad.shape != loss.shape):
        raise GradvizError(f"grad= must be a tensor of the loss's shape {list(loss.shape)}.")
    for flag, value in (("accumulate", accumulate), ("keep_values", keep_values),
                        ("keep_leaf_values", keep_leaf_values)):
        boolean(flag, value)
    if into is not None:
        instance("into", into, BackwardRecording, "a BackwardRecording (an earlier gv.record_backward) or None")
    if loss.is_meta:  # a loss with values comes from parameters with values: the model is not scanned
        not_meta("gv.record_backward", model, loss)


def _refuse_dtensor_leaves(loss: torch.Tensor) -> None:
    """Tensor parallel (``parallelize_module``) runs forward and backward on ``DTensor`` parameters: the gradients
    inside its backward are shards or pending sums (``Partial``), whose statistics need a collective at every
    node. FSDP2 alone backpropagates into plain all-gathered parameters, which record as usual."""
    if "torch.distributed.tensor" not in sys.modules:
        return
    leaves = [fn.variable for fn, _ in reachable([loss.grad_fn]) if hasattr(fn, "variable")]
    found = next((t for t in leaves if is_dtensor(t)), None)
    if found is not None:
        mesh = found.device_mesh
        raise GradvizError(
            f"gv.record_backward (and gv.why, breakpoints) cannot read gradients node by node under tensor parallel: "
            f"this graph's leaves are DTensors on a {tuple(mesh.shape)} mesh, whose gradients inside the backward "
            "are shards or pending sums and would need a collective at every node; use gv.gradient_flow(model) "
            "after backward (full-tensor statistics, one collective per sharded mesh dimension), or record an "
            "unsharded copy of the model in one process.")


_INPLACE = re.compile(r"modified by an inplace operation: (.*?) instead", re.S)
_SAVED = re.compile(r"\[torch\.\w+ \[([\d, ]*)\]\], which is output (\d+) of (\w+), is at version (\d+)")


def _backward_error(
    err: RuntimeError, graph: AutogradGraph, node: str | None, writes: list[InplaceWrite]
) -> Exception:
    """PyTorch's backward errors that have a known fix, as a GradvizError saying it; others unchanged.
    ``writes``: in-place ops the capture saw in the forward, to name the one behind a version error."""
    text = str(err)
    where = ""
    if node is not None:
        attrs = graph.nx.nodes[node]
        where = f" in {attrs['op']}" + (f" (module {attrs['module']})" if attrs.get("module") else "")
    if "backward through the graph a second time" in text or "already been freed" in text:
        return _freed(where)
    found = _INPLACE.search(text)
    if not found:
        return err
    detail = " ".join(found.group(1).split()) + " instead"
    culprit = "an in-place op"
    saved = _SAVED.search(text)
    if saved is not None:
        shape = tuple(int(d) for d in saved.group(1).split(",") if d.strip())
        output, made_by, version = int(saved.group(2)), saved.group(3), int(saved.group(4))
        hits = [w for w in writes if made_by in (w.target_op, re.sub(r"Backward\d*$", "", w.target_op))
                and w.target_output == output and w.shape == shape]
        hit = next((w for w in hits if w.version == version), hits[-1] if hits else None)
        if hit is not None:
            culprit = f"{hit.op}()" + (f" in module {hit.where!r}" if hit.where else "") + (
                f" at {hit.line}" if hit.line else "")
    return GradvizError(
        f"record_backward: backward failed{where}: {culprit} modified a tensor saved for backward ({detail}). "
        "Use the out-of-place form (x = x + 1 instead of x += 1 / x.add_(1), ReLU(inplace=False), no x[i] = ... "
        "on a saved tensor) or clone() the tensor before modifying it, then run the forward again.")


def _freed(where: str) -> GradvizError:
    return GradvizError(
        f"record_backward: this loss's graph was already freed by an earlier backward(){where}: its saved "
        "tensors are gone. Run the forward again and call gv.record_backward on the new loss before any "
        "loss.backward() (or call backward(retain_graph=True) to keep the graph).")


@contextmanager
def _grads_put_back(tensors: Any, enabled: bool) -> Iterator[None]:
    """Give AccumulateGrad fresh ``.grad`` slots, then put the user's very tensors back."""
    saved = [(t, t.grad) for t in tensors] if enabled else []
    for t, _ in saved:
        t.grad = None  # else AccumulateGrad would add in place into the user's gradient tensor
    try:
        yield
    finally:
        for t, grad in saved:
            t.grad = grad


def _signature(graph: AutogradGraph) -> list[tuple[str, str]]:
    return sorted((n, d["op"]) for n, d in graph.nx.nodes(data=True) if "/" not in n)  # nested calls' nodes aside


def _forward_values(graph: AutogradGraph, nodes: dict[Any, str]) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Forward values of small tensors: those the trace has (leaves, roots, ops seen by capture), and
    those PyTorch saved for backward (nothing recomputed or guessed). Also Pow's scalar exponents."""
    values = {n: v for n, v in graph.nx.nodes(data="value") if v is not None}
    exponents: dict[str, float] = {}
    for fn, node_id in nodes.items():
        attrs = graph.nx.nodes[node_id]
        if attrs["kind"] == "leaf" or "Checkpoint" in attrs["op"]:
            continue  # unpacking a checkpoint node would recompute the block
        if attrs["op"] == "PowBackward0" and isinstance(getattr(fn, "_saved_exponent", None), (int, float)):
            exponents[node_id] = float(fn._saved_exponent)
        saved = {s["name"] for s in attrs["saved"]}
        if "result" in saved:
            _put(values, node_id, _saved(fn, "result"))
        for name, input_nr in SAVED_INPUT.get(attrs["op"], {}).items():
            nxt = fn.next_functions[input_nr][0] if input_nr < len(fn.next_functions) else None
            if name in saved and nxt is not None and fn.next_functions[input_nr][1] == 0:
                _put(values, nodes[nxt], _saved(fn, name))
    return values, exponents


def _saved(fn: Any, name: str) -> Any:
    try:
        return getattr(fn, f"_saved_{name}")
    except RuntimeError:  # already freed by an earlier backward
        return None


def _numel(v: list[float] | None) -> int | None:
    return len(v) if v is not None else None


def _put(values: dict[str, Any], node_id: str, t: Any) -> None:
    # readable(): never a tensor whose storage FSDP freed (its all-gathered parameters after forward: reading
    # one segfaults), nor a DTensor (its values are this rank's piece, not the node's)
    if isinstance(t, torch.Tensor) and t.numel() <= SMALL and node_id not in values and readable(t):
        values[node_id] = t.detach().flatten().tolist()

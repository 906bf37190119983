"""Verified what-if: re-run the user's forward and backward with toggles really applied.

Graph tensors are matched to the re-run by *Python-level torch calls*: a ``TorchFunctionMode``
numbers every call (``k``) and its tensor outputs (``j``). The numbering does not depend on which
tensors require grad, so the k-th call of the re-run is the k-th call of the traced run, and
detaching its j-th output there detaches the same tensor. A tensor made inside a fused op (the
transpose inside ``F.linear``) has no Python-level call of its own. When it sits on a one-input,
one-consumer chain, detaching it cuts exactly the same paths as detaching the nearest tensor on that chain
that a Python-level call returns, or as freezing the leaf the chain starts at (``requires_grad=False``):
the re-run replays it that way. Only a tensor inside a fused op with several inputs and several paths is
reported as unverifiable, with the tensor to detach instead, rather than guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz_nb.errors import GradvizError
from gradviz_nb.probes.owned import no_backward_inside
from gradviz_nb.probes.sandbox import sandbox
from gradviz_nb.tracing import AutogradGraph, capture, trace, typed_torch

OpTensor = tuple[int, int]  # (k-th Python-level torch call, j-th tensor output)
Cut = tuple[str, int]  # an output ref: (node id, output_nr)

# Why a toggle could not be applied in the re-run (shown in the page's verification banner).
FUSED = ("PyTorch makes it inside one torch call (no line of your code returns it), between several inputs "
         "and uses, so a re-run cannot detach it alone")
CHECKPOINTED = ("it is made inside a checkpointed block, and backward recomputes the block without the "
                "detach")
NOT_REACHED = "its torch call did not happen in the re-run (does fn take another branch?)"
UNREACHABLE = ("it is neither a parameter of the model nor a tensor passed in names=, so the re-run cannot "
               "reach it (pass it in names={...})")


def _in_checkpoint() -> bool:
    """Inside a non-reentrant checkpoint region (its saved-tensor hooks are on top)?

    Backward recomputes such a region *without* our mode, so a detach applied there in the forward
    would make the recomputed tensors differ (CheckpointError); such tensors are not re-run.
    """
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
    return bool(hooks) and getattr(hooks[0], "__qualname__", "").startswith("_checkpoint_hook")


def _outputs(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    return []


class OpNumbering(TorchFunctionMode):
    """Numbers torch calls; records which graph tensor each output is, or detaches chosen outputs."""

    def __init__(self, detach: set[OpTensor] | None = None) -> None:
        super().__init__()
        self.calls = 0
        self.produced: dict[tuple[int, int], OpTensor] = {}  # (grad_fn seq, output_nr) -> op tensor
        self.rerun = detach is not None
        self.detach = detach or set()
        self.applied: set[OpTensor] = set()
        self.checkpointed: set[int] = set()  # calls made inside non-reentrant checkpoint regions

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        k = self.calls
        self.calls += 1
        if self.rerun:
            return self._detach_chosen(k, out)
        if _in_checkpoint():
            self.checkpointed.add(k)
        for j, t in enumerate(_outputs(out)):
            if t.grad_fn is not None:
                self.produced.setdefault((t.grad_fn._sequence_nr(), t.output_nr), (k, j))
        return out

    def _detach_chosen(self, k: int, out: Any) -> Any:
        chosen = [(k, j) for j in range(len(_outputs(out))) if (k, j) in self.detach]
        if not chosen:
            return out
        self.applied.update(chosen)
        if isinstance(out, torch.Tensor):
            return out.detach()
        seq = [t.detach() if isinstance(t, torch.Tensor) and (k, j) in self.detach else t for j, t in enumerate(out)]
        return type(out)(seq) if isinstance(out, tuple) and not hasattr(out, "_fields") else seq


def _shape(shape: object) -> str:
    return f" (shape {list(shape)})" if isinstance(shape, (list, tuple)) else ""


class Rerunnable:
    """A loss function traced once, and re-run on demand with detaches and freezes applied.

    Every run of ``fn`` (the first, traced one and each verification) happens inside
    :func:`~gradviz_nb.probes.sandbox.sandbox`: parameters, buffers (BatchNorm statistics), ``.grad``
    (the same objects), ``requires_grad``, modes, hooks and the RNGs end as they were, also when ``fn``
    raises or is interrupted.
    """

    def __init__(
        self,
        fn: Callable[[], torch.Tensor],
        model: nn.Module | None = None,
        names: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        self.fn, self.model = fn, model
        self.tensors: dict[str, torch.Tensor] = dict(names or {})
        if model is not None:
            self.tensors.update(model.named_parameters(remove_duplicate=False))
        self._rng = torch.get_rng_state()
        numbering = OpNumbering()
        with sandbox(model, tensors=self.tensors.values()):
            if model is not None:
                with capture(model) as cap, numbering:
                    loss = self._call()
            else:
                cap = None
                with numbering:
                    loss = self._call()
            self.graph: AutogradGraph = trace(loss, model=model, capture=cap, names=names)
        node_of_seq = {d["seq"]: n for n, d in self.graph.nx.nodes(data=True) if d["kind"] == "op"}
        produced = {(node_of_seq[s], out): kj for (s, out), kj in numbering.produced.items() if s in node_of_seq}
        self.op_tensor = {t: kj for t, kj in produced.items() if kj[0] not in numbering.checkpointed}
        # Made by a Python-level call, but inside a checkpointed region: cannot be detached (see above).
        self.checkpointed = {t for t, kj in produced.items() if kj[0] in numbering.checkpointed}

    def _call(self) -> torch.Tensor:
        with no_backward_inside("GraphWidget.from_fn"):
            loss = self.fn()
        if not isinstance(loss, torch.Tensor):
            raise GradvizError(f"from_fn: the function must return the loss tensor, got {type(loss).__name__}.")
        return loss

    def verify(self, detach: Iterable[object] = (), freeze: Iterable[str] = ()) -> dict[str, Any]:
        """Re-run forward and backward with the toggles; compare ``.grad is None`` with the prediction.

        Returns a ``Verification`` (``gradviz_nb/widgets/page/contract.py``): ``predicted_lost`` (leaves
        the toggles cut off, as the page's headline says), ``checked_lost`` (the prediction for the
        toggles the re-run could apply, over the leaves whose ``.grad`` it can read), ``actual_lost``,
        ``agree`` (checked prediction == PyTorch), ``complete`` (every toggle replayed and every leaf
        read: only then is the whole prediction verified) and ``unverifiable`` (what was not checked and
        why, by module, op and tensor names). Only *whether* each leaf gets a gradient is checked.
        """
        wanted = self.graph.what_if(detach, freeze)
        leaf_tensor = {n: self.tensors.get(self.graph.nx.nodes[n]["names"][0]) for n in self._named_leaves()}
        replay = {t: self._replayed_as(t, leaf_tensor) for t in wanted.cut}
        cut = [t for t, r in replay.items() if r is not None]
        frozen = [leaf for leaf in wanted.frozen if leaf_tensor.get(leaf) is not None]
        replay_freeze = {r for r in replay.values() if isinstance(r, str)}
        replay_detach = {t: self.op_tensor[r] for t, r in replay.items() if isinstance(r, tuple)}
        unverifiable = [self._why_not_replayed(t) for t, r in replay.items() if r is None]
        unverifiable += [f"freezing {self._leaf(leaf)} was not replayed: {UNREACHABLE}"
                         for leaf in wanted.frozen if leaf not in frozen]
        unread = [n for n in self.graph.nodes_of("leaf") if leaf_tensor.get(n) is None]
        if unread:
            shown = ", ".join(self._leaf(n) for n in unread[:4]) + (", …" if len(unread) > 4 else "")
            unverifiable.append(f"whether {shown} {'gets' if len(unread) == 1 else 'get'} a gradient was not "
                                f"checked: {UNREACHABLE}")
        predicted = self.graph.what_if(cut, frozen)
        lost_ids = set(predicted.lost_ids)
        with sandbox(self.model, tensors=self.tensors.values()):
            for t in self.tensors.values():
                t.grad = None
            for leaf in {*frozen, *replay_freeze}:
                tensor = leaf_tensor[leaf]
                if tensor is not None:  # both lists hold readable leaves only
                    tensor.requires_grad_(False)
            numbering = OpNumbering(detach=set(replay_detach.values()))
            with torch.random.fork_rng(devices=[]):
                torch.set_rng_state(self._rng)
                with numbering:
                    loss = self._call()
            if loss.requires_grad:
                typed_torch.backward(loss)
            actual = {n for n, t in leaf_tensor.items() if t is not None and t.grad is None}
        missed = [t for t, kj in replay_detach.items() if kj not in numbering.applied]
        unverifiable += [f"{self._tensor(t)} was not replayed: {NOT_REACHED}" for t in missed]
        names = self.graph.nx.nodes
        checked_lost = sorted(names[n]["names"][0] for n in lost_ids if leaf_tensor.get(n) is not None)
        actual_lost = sorted(names[n]["names"][0] for n in actual)
        return {
            "predicted_lost": sorted(wanted.lost),
            "checked_lost": checked_lost,
            "actual_lost": actual_lost,
            "agree": checked_lost == actual_lost and not missed,
            "complete": not unverifiable,
            "unverifiable": unverifiable,
            "error": "",
        }

    def _replayed_as(self, t: Cut, leaf_tensor: Mapping[str, torch.Tensor | None]) -> Cut | str | None:
        """What to apply in the re-run for the cut ``t``: an output ref a Python-level call returns, a leaf
        node to freeze, or None. Walks the one-input, one-consumer chain through ``t`` both ways: every path
        through ``t`` passes through each tensor of that chain, so detaching any of them (or freezing the
        leaf the chain starts at) loses exactly the same leaves, alone or with other toggles."""
        for ref in (*self._chain(t, up=True), *self._chain(t, up=False)):
            if ref in self.op_tensor:
                return ref
            node = self.graph.nx.nodes[ref[0]]
            if node["kind"] == "leaf" and leaf_tensor.get(ref[0]) is not None:
                return ref[0]
        return None

    def _chain(self, t: Cut, up: bool) -> list[Cut]:
        g, chain, ref = self.graph.nx, [t], t
        while len(chain) < 256:
            node, out = ref
            uses = [(v, i) for _, v, slots in g.out_edges(node, data="slots") for o, i in slots if o == out]
            if up:
                inputs = [(u, o) for u, _, slots in g.in_edges(node, data="slots") for o, _ in slots]
                used = {o for _, _, slots in g.out_edges(node, data="slots") for o, _ in slots}
                if len(inputs) != 1 or used != {out}:
                    break
                up_uses = [v for _, v, slots in g.out_edges(inputs[0][0], data="slots")
                           for o, _ in slots if o == inputs[0][1]]
                if len(up_uses) != 1:
                    break
                ref = inputs[0]
            else:
                if len(uses) != 1 or g.nodes[uses[0][0]]["kind"] != "op":
                    break
                consumer = uses[0][0]
                if sum(len(slots) for _, _, slots in g.in_edges(consumer, data="slots")) != 1:
                    break
                outs = {o for _, _, slots in g.out_edges(consumer, data="slots") for o, _ in slots}
                if len(outs) != 1:
                    break
                ref = (consumer, outs.pop())
            chain.append(ref)
        return chain

    def _why_not_replayed(self, t: tuple[str, int]) -> str:
        if t in self.checkpointed:
            return f"{self._tensor(t)} was not replayed: {CHECKPOINTED}"
        call = self.graph.nx.nodes[t[0]].get("call", "")
        types = {c["id"]: c["type"] for c in self.graph.calls}
        hint = (f"; to check a cut here, detach the output of {call} ({types[call]}), which a re-run can replay"
                if call in types else "; to check a cut here, detach a tensor your code returns on this path")
        return f"{self._tensor(t)} was not replayed: {FUSED}{hint}"

    def _tensor(self, t: tuple[str, int]) -> str:
        """A detached tensor by the user's names: "the detach of the ViewBackward0 output in blocks.1.attn
        (Attention)"; never the internal node id."""
        node, out = t
        d = self.graph.nx.nodes[node]
        if d["kind"] == "leaf":
            return f"the detach of {self._leaf(node)} itself"
        outputs = {o for _, _, slots in self.graph.nx.out_edges(node, data="slots") for o, _ in slots}
        nth = f" #{out}" if len(outputs) > 1 or out else ""
        call = d.get("call", "")
        types = {c["id"]: c["type"] for c in self.graph.calls}
        where = f"in {call} ({types[call]})" if call in types else "at the top level"
        return f"the detach of the {d['op'] or d['label']} output{nth} {where}"

    def _leaf(self, leaf: str) -> str:
        d = self.graph.nx.nodes[leaf]
        names: list[str] = d.get("names") or []
        return names[0] if names else f"the unnamed leaf '{d['label']}'{_shape(d.get('shape'))}"

    def _named_leaves(self) -> list[str]:
        return [n for n, d in self.graph.nx.nodes(data=True) if d["kind"] == "leaf" and d["names"]]

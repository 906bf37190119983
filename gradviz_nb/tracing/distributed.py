"""torch.distributed on the graph: the autograd nodes FSDP2, DDP and DTensor add, named for what they do.

These engines do their communication outside autograd (FSDP2 all-gathers parameters in forward and
pre-backward hooks and reduce-scatters gradients in its post-backward; DDP all-reduces gradient buckets
from hooks on the parameters' ``AccumulateGrad``), so collectives are not nodes. What does appear is a
handful of pass-through ``autograd.Function`` nodes that trigger them, and DTensor's own nodes. Each is
looked up in :data:`DISTRIBUTED_NODES` (measured with torch 2.13 under ``torchrun``, see
``tests/unit/test_distributed.py``): it keeps ``op`` and gets a readable ``label``, a ``note`` saying what it
does and ``distributed`` (the engine). The graph gets a note saying where the communication really is.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

__all__ = ["DISTRIBUTED_NODES", "annotate_distributed", "engines"]


class DistributedNode(NamedTuple):
    """What a distributed autograd node is: its ``engine`` (``fsdp2``, ``ddp`` or ``dtensor``), a ``label`` to draw
    and a ``note`` saying what it does."""
    engine: str  # "fsdp2", "ddp" or "dtensor"
    label: str
    note: str


DISTRIBUTED_NODES: dict[str, DistributedNode] = {
    "RegisterPostBackwardFunctionBackward": DistributedNode(
        "fsdp2", "FSDP post-backward hook",
        "FSDP2 (fully_shard) puts this pass-through node on a sharded module's inputs. When backward reaches "
        "it, FSDP runs the module's post-backward: it reduce-scatters the module's parameter gradients "
        "(averaged over ranks) into the sharded parameters' .grad and frees the all-gathered parameters. "
        "Gradients pass through it unchanged."),
    "_DDPSinkBackward": DistributedNode(
        "ddp", "DDP sink",
        "DistributedDataParallel (find_unused_parameters=True or static_graph=True) passes the model's outputs "
        "through this node. Its backward passes gradients through unchanged (with static_graph it queues DDP's "
        "delayed all-reduce on the first iteration); DDP's gradient all-reduce itself runs in hooks on the "
        "parameters, not here."),
    "RedistributeBackward": DistributedNode(
        "dtensor", "DTensor redistribute (collective)",
        "DTensor.redistribute (or an op that needed one): its backward redistributes the gradient back to the "
        "input's placements, which is a collective (all-gather, reduce-scatter or all-reduce) across the mesh."),
    "_ToTorchTensorBackward": DistributedNode(
        "dtensor", "DTensor.to_local",
        "DTensor.to_local() (or full_tensor()): its backward wraps this rank's local gradient back into a "
        "DTensor with the input's placements; no communication."),
    "_FromTorchTensorBackward": DistributedNode(
        "dtensor", "DTensor.from_local",
        "DTensor.from_local(): its backward takes this rank's local piece of the DTensor gradient "
        "(redistributing it first if its placements differ)."),
}

_ENGINE_NOTES = {
    "fsdp2": (
        "FSDP2 (fully_shard): leaves are the all-gathered (unsharded) parameters used in forward, named by their "
        "parameter names. The all-gather (forward and pre-backward) and the gradient reduce-scatter (in each "
        "module's post-backward) run in FSDP's hooks, not as autograd nodes: after backward each rank's "
        "parameter .grad holds its shard of the gradient averaged over ranks. 'FSDP post-backward hook' nodes "
        "mark where a module's reduce-scatter starts; a module whose inputs need no gradient (the first block) "
        "reduce-scatters at the end of backward instead."),
    "ddp": (
        "DistributedDataParallel: gradients are all-reduced (averaged over ranks) bucket by bucket from hooks "
        "on the parameters' AccumulateGrad nodes as backward runs; the all-reduce is not an autograd node. "
        "After backward every rank's .grad holds the same averaged gradient."),
    "dtensor": (
        "DTensor: 'DTensor redistribute' nodes are collectives in backward; 'to_local'/'from_local' nodes move "
        "between a DTensor and this rank's local piece without communication."),
}


def engines(model: Any) -> list[str]:
    """The data-parallel engines wrapping ``model`` or a submodule: ``"fsdp2"`` (``fully_shard``), ``"ddp"``."""
    if model is None:
        return []
    # Only look for engines whose modules were imported: nothing can be wrapped by an engine never imported.
    fsdp = getattr(sys.modules.get("torch.distributed.fsdp"), "FSDPModule", None)
    ddp = getattr(sys.modules.get("torch.nn.parallel.distributed"), "DistributedDataParallel", None)
    if fsdp is None and ddp is None:
        return []
    found: list[str] = []
    for m in model.modules():
        if fsdp is not None and isinstance(m, fsdp) and "fsdp2" not in found:
            found.append("fsdp2")
        if ddp is not None and isinstance(m, ddp) and "ddp" not in found:
            found.append("ddp")
    return found


def annotate_distributed(g: Any, model: Any = None) -> None:
    """Label FSDP2 / DDP / DTensor nodes of a traced ``networkx`` graph (``label``, ``note``, ``distributed``)
    and add a graph note (and ``g.graph["distributed"]``: the engines found) saying where the collectives run.
    """
    found = engines(model)
    for _, attrs in g.nodes(data=True):
        known = DISTRIBUTED_NODES.get(attrs.get("op", ""))
        if known is None:
            continue
        attrs["label"] = known.label
        attrs["note"] = known.note
        attrs["distributed"] = known.engine
        if known.engine not in found:
            found.append(known.engine)
    g.graph["distributed"] = found
    if found:
        g.graph.setdefault("notes", []).extend(_ENGINE_NOTES[e] for e in found)

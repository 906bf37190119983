"""The records of a recorded backward pass: a :class:`Step` per node the engine ran, a :class:`Delivery` per
gradient it sent along an edge."""

from __future__ import annotations

from dataclasses import dataclass

from gradviz_nb.probes.backward.stats import GradStats

__all__ = ["Delivery", "Step"]


@dataclass(slots=True)  # one per edge of every recorded pass: slots build quicker
class Delivery:
    """A gradient this step sent along an edge: into ``target``'s input buffer at ``output_nr``."""

    target: str
    output_nr: int
    input_nr: int


@dataclass(slots=True)  # one per node of every recorded pass
class Step:
    """One node run by the engine, with what it received and sent."""

    index: int
    pass_index: int
    node: str
    op: str
    grad_outputs: list[GradStats | None]
    grad_inputs: list[GradStats | None]
    deliveries: list[Delivery]
    leaf_before: GradStats | None = None  # a leaf's .grad before this pass accumulated into it
    leaf_after: GradStats | None = None  # and after

"""The checkpointing what-if's page traits: ``checkpoints`` (marks), ``checkpoint_table`` (what the page's
rule reads, ``analysis.checkpointing.table``) and ``checkpoint_verified`` (a checkpointed re-run). Their
converters refuse what the page cannot read, by name (``traits.CONVERTERS`` lists them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gradviz_nb.analysis.checkpointing import MODES, check_marks
from gradviz_nb.analysis.checkpointing import table as checkpoint_table_of
from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.validate import given
from gradviz_nb.widgets.page import contract


def checkpoints(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``checkpoints``: ``{call id: "non_reentrant" | "reentrant"}`` (``{}``: nothing checkpointed)."""
    if graph is not None:
        try:
            return dict(check_marks(graph, value))
        except GradvizError as err:
            raise GradvizError(f"checkpoints: {err}") from None
    if not isinstance(value, Mapping) or any(m not in MODES for m in value.values()):
        raise GradvizError("checkpoints must be a dict {call id: 'non_reentrant' | 'reentrant'}; "
                           f"got {given(value)}.")
    return {str(k): v for k, v in value.items()}


def _record(name: str, value: Any, typed: Any) -> Any:
    if isinstance(value, Mapping) and not value:
        return {}
    if not isinstance(value, Mapping) or set(value) != set(typed.__annotations__):
        raise GradvizError(f"{name} must be {{}} or a {typed.__name__} dict (js/src/payload.ts) with the fields "
                           f"{', '.join(sorted(typed.__annotations__))}; got {given(value)}.")
    return dict(value)


def checkpoint_table(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``checkpoint_table``: a ``CheckpointTable`` (``{}`` for none); an ``AutogradGraph`` is read."""
    if isinstance(value, AutogradGraph):
        return checkpoint_table_of(value) if value.calls else {}
    return _record("checkpoint_table", value, contract.CheckpointTable)


def checkpoint_verified(value: Any, graph: AutogradGraph | None) -> Any:
    """Trait ``checkpoint_verified``: a ``CheckpointVerification`` (``{}`` for none)."""
    return _record("checkpoint_verified", value, contract.CheckpointVerification)

"""The page's what-if toggle strings (``js/src/payload.ts`` ``Toggles``) -> ``what_if`` arguments."""

from __future__ import annotations

from typing import Any

from gradviz_nb.tracing import AutogradGraph

CALL = "call:"


def toggle_args(graph: AutogradGraph, toggles: dict[str, Any]) -> tuple[list[object], list[str]]:
    """``{"detach": ["n5:0", "n7", "call:blocks.0"], "freeze": ["n9", "call:fc1"]}`` -> (detach, freeze).

    Detach: ``"n5:0"`` is one tensor, ``"n7"`` every output of a node, ``"call:X"`` the outputs of
    module call X. Freeze: a leaf id, or ``"call:X"`` for every parameter under X's module path.
    """
    paths = {c["id"]: c["path"] for c in graph.calls}
    detach: list[object] = []
    for item in toggles.get("detach", []):
        if item.startswith(CALL):
            detach.append(item.removeprefix(CALL))
        elif ":" in item:
            node, _, out = item.rpartition(":")
            detach.append((node, int(out)))
        else:
            detach.append(item)
    freeze = [paths.get(item.removeprefix(CALL), item) if item.startswith(CALL) else item
              for item in toggles.get("freeze", [])]
    return detach, freeze

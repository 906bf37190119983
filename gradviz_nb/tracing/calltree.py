"""The module-call tree of a graph, in one place: each call's parent, its chain up to the top, children, depth.

Every analysis that walks "which calls hold this node" uses it (memory totals per call, what-if's call
members, the diff's call sizes, the DOT export's clusters), instead of rebuilding parent maps by hand.
The page has the same idea in ``js/src/state/calltree.ts``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any


class CallTree:
    """Index over module-call records (``{"id", "parent", ...}``, parents before children)."""

    def __init__(self, calls: Iterable[Mapping[str, Any]]) -> None:
        self.parent: dict[str, str] = {}
        self.children: dict[str, list[str]] = {"": []}
        self.depth: dict[str, int] = {}
        for c in calls:
            cid, parent = str(c["id"]), str(c["parent"] or "")
            # Unknown parent (a bad record): the call hangs from the top instead of from nothing.
            parent = parent if parent in self.children else ""
            self.parent[cid] = parent
            self.children.setdefault(cid, [])
            self.children[parent].append(cid)
            self.depth[cid] = self.depth[parent] + 1 if parent else 0

    def chain(self, call: str) -> Iterator[str]:
        """``call`` and its ancestors, innermost first; nothing for the top level ("")."""
        seen: set[str] = set()
        while call and call not in seen:  # a cycle (bad records) ends the walk instead of looping
            seen.add(call)
            yield call
            call = self.parent.get(call, "")

    def inside(self, call: str, chosen: set[str] | frozenset[str]) -> bool:
        """True when ``call`` is one of ``chosen`` or nested in one."""
        return any(c in chosen for c in self.chain(call))

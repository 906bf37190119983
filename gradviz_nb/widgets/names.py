"""Shorter module names for display: the dotted prefix every name shares, computed in one place.

The charts label their rows without it (``flow_charts.short_names``) and the graph's payload carries it
(``GraphMeta.prefix``) so the page draws box headers, leaf and ghost names without it; the full names stay
in the details panel and the tooltips. No Bokeh here: the page payload imports this module.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MIN_PREFIX_PARTS", "common_parts", "graph_prefix"]

MIN_PREFIX_PARTS = 2  # a one-part prefix ("model.") saves too little to be worth hiding from the reader


def common_parts(names: Iterable[str]) -> list[str]:
    """The dotted segments every non-empty name starts with (``""``, the model itself, is left out).

    >>> common_parts(["base_model.model.h.0.attn", "base_model.model.h.1.mlp", ""])
    ['base_model', 'model', 'h']
    """
    parts = [n.split(".") for n in names if n]
    common: list[str] = []
    for col in zip(*parts, strict=False):
        if len(set(col)) != 1:
            break
        common.append(col[0])
    return common if len(parts) > 1 else []


def graph_prefix(paths: Iterable[str]) -> str:
    """The prefix (with its trailing dot) the graph's module paths all share, when it has at least
    :data:`MIN_PREFIX_PARTS` segments; ``""`` otherwise. A path equal to the prefix itself (the wrapper
    every other module sits in) keeps its full name on the page.

    >>> graph_prefix(["base_model.model", "base_model.model.transformer", "base_model.model.lm_head"])
    'base_model.model.'
    >>> graph_prefix(["blocks.0", "blocks.1", "lm_head"])
    ''
    """
    common = common_parts(paths)
    return ".".join(common) + "." if len(common) >= MIN_PREFIX_PARTS else ""

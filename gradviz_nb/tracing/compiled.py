"""``torch.compile``: what a compiled model looks like to autograd, and the names users know it by.

``torch.compile(model)`` returns an ``OptimizedModule`` that holds the model as ``_orig_mod``: its
``named_parameters()`` say ``_orig_mod.0.weight`` where the model says ``0.weight``. Everything here
names parameters and modules by the model's own names (:func:`unwrap_compiled`, :func:`real_name`).

In the backward graph, each region that dynamo compiled is one autograd node,
``CompiledFunctionBackward`` (AOTAutograd's ``autograd.Function``): the ops inside it are not autograd
nodes at all. Parameters still are leaves (``AccumulateGrad``), fed by that node. Module capture keeps
working around it: the capture hooks do nothing while dynamo traces (:func:`compiling`), so they never
break the compiled graph, and the region lands in the innermost module call that ran eagerly around it
(the compiled module itself).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

__all__ = ["COMPILED_LABEL", "COMPILED_OP", "compiled_note", "compiling", "real_name", "real_named_modules",
           "unwrap_compiled"]

COMPILED_OP = "CompiledFunctionBackward"
COMPILED_LABEL = "compiled region (torch.compile)"
_WRAPPER = "_orig_mod"  # the attribute OptimizedModule keeps the user's module under


def compiling() -> bool:
    """True while dynamo traces (module hooks must then do nothing: a call dynamo cannot trace, like
    ``torch.autograd._get_sequence_nr``, would split the user's compiled graph)."""
    return bool(torch.compiler.is_compiling())


def _is_optimized(model: object) -> bool:
    # Without torch._dynamo imported nothing can be compiled; importing it costs about a second.
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return eval_frame is not None and isinstance(model, eval_frame.OptimizedModule)


def unwrap_compiled(model: Any) -> Any:
    """The module ``torch.compile`` wrapped (``model._orig_mod``), else ``model`` unchanged.

    It holds the same parameter tensors, named as the user named them. Example::

        cm = torch.compile(model)
        unwrap_compiled(cm) is model   # True
    """
    while _is_optimized(model):
        model = model._orig_mod
    return model


def real_name(name: str) -> str:
    """A parameter or module path without ``torch.compile``'s wrapper: ``"block._orig_mod.fc.weight"`` ->
    ``"block.fc.weight"``, ``"_orig_mod"`` -> ``""`` (a submodule compiled in place of itself)."""
    if _WRAPPER not in name:
        return name
    return ".".join(part for part in name.split(".") if part != _WRAPPER)


def real_named_modules(model: nn.Module) -> dict[int, str]:
    """``id(module) -> path`` for the module hooks of a capture, under real paths. A compiled submodule's
    ``OptimizedModule`` and the module it wraps share one path; the wrapper keeps it, because its hooks
    always run eagerly (the wrapped module's may be traced by dynamo, where capture hooks do nothing)."""
    paths: dict[int, str] = {}
    taken: set[str] = set()
    for path, m in model.named_modules():
        path = real_name(path)
        if path not in taken:
            taken.add(path)
            paths[id(m)] = path
    return paths


def compiled_note(regions: int) -> str:
    """The graph-level note for a graph holding ``regions`` compiled regions."""
    what = "one compiled region" if regions == 1 else f"{regions} compiled regions"
    return (
        f"This graph holds {what} (torch.compile). Each is one opaque node, {COMPILED_OP}, drawn in the module "
        "whose forward was compiled: the operations inside it are not autograd nodes, so they cannot be shown. "
        "To see them, trace the model without compile (run the uncompiled module, e.g. `cm._orig_mod`, with the "
        "same input), or exclude a submodule from compilation with `torch.compiler.disable` (its ops then run "
        "eagerly and appear); `torch._dynamo.config` settings and TORCH_LOGS=graph_breaks show what was compiled."
    )


def annotate_compiled(g: Any) -> None:
    """Name each compiled region of a traced ``networkx`` graph and say what it hides (a graph note).

    A region's node keeps ``op`` (``CompiledFunctionBackward``) and gets ``label`` :data:`COMPILED_LABEL`
    and ``compiled=True``; its ``module`` is the call that holds it (set by attribution). A note saying the
    graph has no module boxes is dropped when compiled regions are all there is: the compiled note says why.
    """
    regions = [attrs for _, attrs in g.nodes(data=True) if attrs.get("op") == COMPILED_OP]
    if not regions:
        return
    for attrs in regions:
        attrs["label"] = COMPILED_LABEL
        attrs["compiled"] = True
    notes = g.graph.setdefault("notes", [])
    if not g.graph.get("captured"):
        notes[:] = [n for n in notes if not n.startswith("No module boxes")]
    notes.append(compiled_note(len(regions)))

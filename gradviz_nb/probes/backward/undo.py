"""What the user's own backward hooks do while :func:`gv.record_backward` runs the real backward is undone.

PyTorch's "optimizer step in backward" recipe registers a post-accumulate-grad hook on every parameter that
steps that parameter's own optimizer: a recorded backward would move the weights. When the backward can run
user code (a tensor hook or post-accumulate-grad hook on a leaf, a module's full backward hook), it runs in
the probes' sandbox (:func:`gradviz_nb.probes.sandbox.sandbox`): the leaves' values, ``.grad`` (the same
objects), the model's parameters and buffers, and the state of every optimizer holding one of the leaves
come back. A backward with none of those runs as it is: the sandbox's copy of the parameters would cost a
plain backward's time again on GPT-2 124M. Optimizers are found by a scan of the garbage collector's objects
(about 0.1 s per 300,000 objects), only when such a hook is there.

Not undone: what a hook does to objects the sandbox does not cover (see its docstring: a logger, a file,
a Python attribute), and hooks on intermediate tensors (``y.register_hook``) are not looked for.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from gradviz_nb.probes.sandbox import sandbox

__all__ = ["HOOK_NODE", "undone", "user_hooks"]

HOOK_NODE = "BackwardHookFunctionBackward"  # a module's full backward hook (register_full_backward_hook)


def user_hooks(leaves: Iterable[torch.Tensor], ops: Iterable[str]) -> bool:
    """Can this backward run the user's code: hooks on a leaf, or a module's full backward hook node?"""
    for t in leaves:
        if getattr(t, "_backward_hooks", None) or getattr(t, "_post_accumulate_grad_hooks", None):
            return True
    return any(HOOK_NODE in op for op in ops)


def _optimizers(leaves: list[torch.Tensor]) -> list[torch.optim.Optimizer]:
    ids = {id(t) for t in leaves}
    found = []
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads __class__, which raises on a dead weakref.proxy
        if issubclass(type(obj), torch.optim.Optimizer) and any(
                id(p) in ids for group in obj.param_groups for p in group["params"]):
            found.append(obj)
    return found


@contextmanager
def undone(leaves: list[torch.Tensor], model: nn.Module | None, *, hooked: bool, keep_grads: bool = False
           ) -> Iterator[None]:
    """Run the block (the real backward) so that what the user's backward hooks change comes back;
    ``hooked``: :func:`user_hooks` said there are some (else the block just runs). ``keep_grads``: ``.grad``
    keeps what the block accumulated (``record_backward(accumulate=True)``)."""
    if not hooked:
        yield
        return
    kept: list[tuple[torch.Tensor, Any]] = []
    versions = [t._version for t in leaves]
    try:
        with sandbox(model, optimizer=_optimizers(leaves), tensors=leaves):
            yield
            if keep_grads:
                kept = [(t, None if t.grad is None else t.grad.detach().clone()) for t in leaves]
    finally:
        # The hook's optimizer step and the sandbox's restore each wrote the leaves in place; their values
        # are what they were, so their version counters go back too: the graph, which saved them, stays
        # usable (the armed pass's full record and the user's own backward run over it again).
        reset = getattr(torch._C._autograd, "_unsafe_set_version_counter", None)
        if reset is not None:
            reset(tuple(leaves), tuple(versions))
    for t, g in kept:
        if g is None or t.grad is None or t.grad.shape != g.shape:
            t.grad = g
        else:
            t.grad.copy_(g)

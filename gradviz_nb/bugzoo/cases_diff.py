"""Bug-zoo cases: ``gv.diff``'s claims against PyTorch.

The truth is PyTorch's own: which parameters have ``.grad is None`` after a real ``backward()`` on each
side, and which parameters of a wrapped model are new tensors (by object identity, not by name).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from gradviz_nb.bugzoo.case import Case, Outcome

if TYPE_CHECKING:
    import torch

    import gradviz_nb as gv


def _names(items: Any) -> str:
    items = sorted(items)
    return "{" + ", ".join(items) + "}" if items else "{}"


def _traced(model: torch.nn.Module, run: Callable[[], torch.Tensor]) -> tuple[gv.AutogradGraph, set[str]]:
    """Trace ``run()``'s loss, then run the real backward: (graph, names of parameters with a ``.grad``)."""
    import gradviz_nb as gv

    with gv.capture(model) as cap, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "None of the inputs have requires_grad=True": the bug itself
        loss = run()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    return graph, {n for n, p in model.named_parameters() if p.grad is not None}


def reentrant_checkpoint_without_grad_input() -> Outcome:
    """Two branches under ``checkpoint(..., use_reentrant=True)``: one on the raw input (needs no grad, so
    PyTorch gives its weights no gradient and warns), one on an embedding's output (gradients flow)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    import gradviz_nb as gv

    class Branches(torch.nn.Module):
        def __init__(self, ckpt: bool) -> None:
            super().__init__()
            self.a, self.emb, self.b, self.head = (torch.nn.Linear(8, 8) for _ in range(4))
            self.ckpt = ckpt

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.ckpt:
                return self.head(self.a(x) + self.b(self.emb(x))).sum()
            ha = checkpoint(self.a, x, use_reentrant=True)
            hb = checkpoint(self.b, self.emb(x), use_reentrant=True)
            return self.head(ha + hb).sum()

    sides = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = Branches(ckpt)
        x = torch.randn(4, 8)
        sides.append(_traced(model, lambda m=model, x=x: m(x)))  # type: ignore[misc]
    (before, had), (after, has) = sides
    truth_lost = had - has
    d = gv.diff(before, after)
    alarms = [f"{n} claimed to still get gradients, but .grad is None" for n in d.hidden + d.unsure
              if n in truth_lost]
    alarms += [f"{n} claimed lost, but PyTorch gives it .grad" for n in d.lost if n in has]
    alarms += [f"{n} claimed gained" for n in d.gained]
    return Outcome(expected=f"lost (.grad None): {_names(truth_lost)}",
                   got=f"lost: {_names(d.lost)}; hidden: {_names(d.hidden)}",
                   ok=set(d.lost) == truth_lost and set(d.hidden) == has - set(after.leaves()),
                   false_alarms=tuple(alarms))


def peft_lora() -> Outcome:
    """A tiny transformers GPT-2 against the same model after ``peft.get_peft_model`` (LoRA on c_attn):
    every path gains ``base_model.model.``, c_attn's weights move under ``base_layer``, the base freezes."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import peft
    import torch
    import transformers

    import gradviz_nb as gv

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    before, _ = _traced(model, lambda: model(input_ids=ids, labels=ids).loss)
    old: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        old.setdefault(id(p), []).append(name)
        p.grad = None
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0, fan_in_fan_out=True)
    wrapped = peft.get_peft_model(model, lora)
    after, _ = _traced(wrapped, lambda: wrapped(input_ids=ids, labels=ids).loss)
    new = {n for n, p in wrapped.named_parameters() if id(p) not in old}  # tensors peft created
    lost = {n for p in wrapped.parameters() if id(p) in old and p.grad is None for n in old[id(p)]}
    d = gv.diff(before, after)
    alarms = [f"{n} reported added, but it is a tensor of the plain model" for n in d.added_leaves if n not in new]
    alarms += [f"{n} claimed lost, but PyTorch gives it .grad" for n in d.lost if n not in lost]
    base_ops_added = [n for n in d.added if "c_attn" not in after.nx.nodes[n]["module"]]
    alarms += [f"{len(base_ops_added)} nodes outside the LoRA layers reported added"] if base_ops_added else []
    return Outcome(expected=f"added: {_names(new)}; lost: {len(lost)} frozen base parameters",
                   got=f"added: {_names(d.added_leaves)}; lost: {len(d.lost)}; {len(d.same)} the same",
                   ok=set(d.added_leaves) == new and set(d.lost) == lost and len(d.same) > 0,
                   false_alarms=tuple(alarms))


@contextmanager
def _one_process_group() -> Iterator[None]:
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def _renamed(wrap: Callable[[torch.nn.Module], torch.nn.Module], boxes: bool = True) -> Callable[[], Outcome]:
    """``boxes=False``: the wrapped model's ops lose their module boxes (dynamo traces module hooks away), so
    ops are not compared by module; leaves and every claim about gradients still are."""

    def run() -> Outcome:
        import torch

        import gradviz_nb as gv
        from gradviz_nb.demo_models import MLP

        torch.manual_seed(0)
        plain = MLP()
        x = torch.randn(5, 4)
        before, had = _traced(plain, lambda: plain(x).pow(2).sum())
        for p in plain.parameters():
            p.grad = None
        wrapped = wrap(plain)
        after, has = _traced(wrapped, lambda: wrapped(x).pow(2).sum())
        same_tensors = {id(p) for p in plain.parameters()} == {id(p) for p in wrapped.parameters()}
        d = gv.diff(before, after)
        claims = d.added_leaves + d.removed_leaves + d.gained + d.lost + (d.added + d.removed if boxes else [])
        leaves_same = boxes or set(before.leaves()) == set(after.leaves())  # compiled: the very same names
        return Outcome(
            expected=f"the same {len(had)} parameter tensors, all with .grad ({len(has)}): nothing added or lost",
            got=f"{len(d.added)} added, {len(d.removed)} removed, {len(d.same)} the same; lost {_names(d.lost)}",
            ok=same_tensors and len(has) == len(had) and not claims and leaves_same
            and (len(d.same) == len(before) or not boxes),
            false_alarms=tuple(f"{n} reported added/removed/lost" for n in claims))
    return run


def _ddp(model: torch.nn.Module) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model)


def ddp_rename() -> Outcome:
    """DistributedDataParallel (one gloo process, in-process): every name gains ``module.``."""
    import torch.distributed as dist

    if dist.is_initialized():
        return Outcome("a fresh process group", "a process group is already running here", ok=False)
    with _one_process_group():
        return _renamed(_ddp)()


def _compiled(model: torch.nn.Module) -> torch.nn.Module:
    import torch

    compiled = cast(torch.nn.Module, torch.compile(model, backend="eager"))
    return compiled


def compile_rename() -> Outcome:
    """``torch.compile(model, backend="eager")``: ``named_parameters()`` gain ``_orig_mod.``; the trace names
    leaves without it. Dynamo traces capture's module hooks away (so they never split the compiled graph),
    so the compiled ops sit at top level: boxes differ, gradients do not."""
    import torch

    try:
        return _renamed(_compiled, boxes=False)()
    finally:
        torch._dynamo.reset()


CASES: list[Case] = [
    Case("diff-reentrant-checkpoint-no-grad-input", "diff-gradient-claims", reentrant_checkpoint_without_grad_input,
         description="gv.diff(plain, reentrant checkpoint whose input needs no grad): lost, not 'still gets grads'"),
    Case("diff-peft-lora", "diff-wrapper-names", peft_lora, needs=("transformers", "peft"),
         description="gv.diff(GPT-2, peft LoRA GPT-2): base matched through base_model.model., adapters added"),
    Case("diff-ddp-rename", "diff-wrapper-names", ddp_rename,
         description="gv.diff(model, DistributedDataParallel(model)): matched through module."),
    Case("diff-compile-rename", "diff-wrapper-names", compile_rename,
         description="gv.diff(model, torch.compile(model)): same leaves (no _orig_mod.), nothing lost or gained"),
]

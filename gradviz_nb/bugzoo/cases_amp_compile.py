"""Bug-zoo cases for mixed precision (autocast, GradScaler, low-precision weights) and ``torch.compile``.

Truths: the gradients of an unscaled backward, what one real SGD step does to low-precision weights, the
numbers the same model gives eagerly, and dynamo's own graph-break counter.
"""

from __future__ import annotations

import copy
import gc
import warnings
from typing import cast

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo.case import Case, Outcome, flag_outcome
from gradviz_nb.bugzoo.cases_healthy import Healthy, healthy_outcome
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, gpt2_loss
from gradviz_nb.tracing.compiled import COMPILED_OP


def _low_precision_gpt2(dtype: torch.dtype) -> Healthy:
    """GPT-2 (tiny) with every weight in ``dtype``: LayerNorm weights (1.0) sit under the dtype's resolution for
    their small gradients, but their zero biases move, so the layers learn (the old rule called them vanishing).
    Not float16: the healthy harness trains with AdamW, whose eps (1e-8) is 0 in float16, and the weights really
    turn NaN (the monitor and the doctor say so, rightly)."""
    model = GPT2(GPT2Config.small_test()).to(dtype)
    return Healthy(model, lambda: gpt2_loss(model, batch=2))


def scaled_without_scaler() -> Outcome:
    """``scaler.scale(loss).backward()``, then ``gradient_flow`` without ``scaler=``: the gradients are 65536x
    the truth. Expected: every exploding verdict says they look scaled by the live GradScaler (no bare
    "exploding"), and with ``scaler=`` nothing is flagged."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 4))
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))

    def loss() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return nn.functional.cross_entropy(model(x), y)

    loss().backward()
    truth = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(loss()).backward()
    scale = scaler.get_scale()
    really_scaled = all(torch.allclose(p.grad, truth[n] * scale, rtol=1e-3) for n, p in model.named_parameters())
    bare = gv.gradient_flow(model)
    silent = [f"{f.kind} {f.target}: no GradScaler hint" for f in bare.flags
              if f.kind == "exploding" and "look scaled by a GradScaler" not in f.reason]
    told = [f for f in bare.flags if "look scaled by a GradScaler" in f.reason and f"{scale:g}" in f.reason]
    given = gv.gradient_flow(model, scaler=scaler)
    del scaler
    gc.collect()
    return Outcome("exploding only with the GradScaler named; with scaler= no flag",
                   f"{len(told)} of {len(bare.flags)} flags name the GradScaler; {len(given.flags)} with scaler=",
                   really_scaled and bool(told) and not given.flags,
                   tuple(silent) + tuple(f"{f.kind} {f.target} with scaler=" for f in given.flags))


def bf16_under_resolution() -> Outcome:
    """``head(1e-4 * tanh(body(x)))`` with bfloat16 weights: body's gradient is far under bfloat16's resolution.
    Truth: one SGD step at lr 1 changes fewer than 1% of body's values (and over 90% in float32)."""
    torch.manual_seed(0)
    body, head = nn.Linear(16, 16), nn.Linear(16, 4)
    wide = nn.ModuleDict({"body": body, "head": head})
    narrow = copy.deepcopy(wide).to(torch.bfloat16)
    x = torch.randn(32, 16)
    expected: set[tuple[str, str]] = set()
    reported: set[tuple[str, str]] = set()
    for model, xin in ((wide, x), (narrow, x.to(torch.bfloat16))):
        model["head"](torch.tanh(model["body"](xin)) * 1e-4).pow(2).mean().backward()
        flow = gv.gradient_flow(model)
        before = model["body"].weight.detach().clone()
        torch.optim.SGD(model.parameters(), lr=1.0).step()
        moved = (model["body"].weight.detach() != before).float().mean().item()
        tag = "bf16" if model is narrow else "fp32"
        if moved < 0.01:
            expected.add(("vanishing", f"{tag} body"))
        reported |= {(f.kind, f"{tag} {f.target}") for f in flow.flags}
    return flag_outcome(expected, reported)


def _compiled(model: nn.Module) -> nn.Module:
    compiled = cast(nn.Module, torch.compile(model, backend="aot_eager", dynamic=False))
    return compiled


def compiled_flow_names() -> Outcome:
    """``gradient_flow(torch.compile(model))``: the flags and names must be the model's own (not
    ``_orig_mod.fc1``) and the numbers those of the same model run eagerly."""
    torch.manual_seed(0)
    eager = MLP()
    model = copy.deepcopy(eager)
    compiled = _compiled(model)
    x = torch.randn(5, 4)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled(x).pow(2).sum().backward()
        eager(x).pow(2).sum().backward()
        got, want = gv.gradient_flow(compiled), gv.gradient_flow(eager)
    finally:
        torch._dynamo.reset()
    names = [p.name for p in got.params]
    worst = max(abs(a.norm / b.norm - 1) for a, b in zip(got.params, want.params, strict=True))
    return Outcome(f"names {[p.name for p in want.params]}, norms equal", f"names {names}, worst {worst:.1e}",
                   names == [p.name for p in want.params] and worst < 1e-5)


def compiled_capture_keeps_the_graph() -> Outcome:
    """``with gv.capture(torch.compile(model))``: capture's module hooks read the autograd counter, which dynamo
    cannot trace; they used to split the compiled graph, so the model ran as eager ops under capture and the
    drawn graph was not the one the user runs. Truth: the model run without capture is one compiled region."""
    torch.manual_seed(0)
    model = MLP()
    compiled = _compiled(model)
    x = torch.randn(5, 4)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plain = compiled(x).sum()
            truth = sum(d["op"] == COMPILED_OP for _, d in gv.trace(plain).nx.nodes(data=True))
            torch._dynamo.utils.counters.clear()
            with gv.capture(compiled) as cap:
                loss = compiled(x).sum()
            breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
        g = gv.trace(loss, model=compiled, capture=cap)
    finally:
        torch._dynamo.reset()
    regions = sum(d["op"] == COMPILED_OP for _, d in g.nx.nodes(data=True))
    return Outcome(f"{truth} compiled region, no graph break", f"{regions} compiled regions, {breaks} graph breaks",
                   truth == 1 and regions == 1 and breaks == 0)


CASES: list[Case] = [
    Case("healthy-bf16-gpt2", "healthy", lambda: healthy_outcome(lambda: _low_precision_gpt2(torch.bfloat16)),
         description="GPT-2 with bfloat16 weights: LayerNorm ratios under bf16's resolution, but the layers learn"),
    Case("amp-scaled-without-scaler", "exploding", scaled_without_scaler,
         description="gradient_flow after scaler.scale(loss).backward() without scaler=: names the GradScaler"),
    Case("bf16-under-resolution", "vanishing", bf16_under_resolution,
         description="a gradient under bfloat16's resolution: vanishing in bf16 (the step rounds away), not in fp32"),
    Case("compile-flow-names", "wrong-figure", compiled_flow_names,
         description="gradient_flow(torch.compile(model)): the model's names (no _orig_mod.) and eager's numbers"),
    Case("compile-capture-keeps-graph", "compiled-graph", compiled_capture_keeps_the_graph,
         description="gv.capture on a compiled model: one compiled region, no graph break"),
]

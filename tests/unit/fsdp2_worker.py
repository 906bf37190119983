"""Run by tests/unit/test_fsdp2.py under `torchrun --nproc_per_node=2`: a tiny GPT-2 under FSDP2 (`fully_shard`
per block, then the root) on gloo/CPU.

Each rank traces a captured loss, runs `gv.gradient_flow`, `layer_histograms` and a `GradientMonitor`
(given the optimizer: it measures each update) on the sharded model, and compares every number with the
same function run on an unsharded copy whose parameters and `.grad` are the `full_tensor()`s. argv[2] is
"lora" (adapters on c_attn/c_proj, base frozen) or "full". Writes what it found as JSON to
argv[1]/rank<r>.json.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss
from gradviz_nb.probes.flow import layer_histograms


def _rel(a: float, b: float) -> float:
    if a == b:
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    return abs(a - b) / max(abs(b), 1e-30)


def _reference(model: nn.Module, lora: bool) -> nn.Module:
    """An unsharded GPT-2 holding the full (all-gathered) parameters and gradients of ``model``."""
    ref = GPT2(GPT2Config.small_test())
    if lora:
        add_lora(ref)
    ref.load_state_dict({k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model.state_dict().items()})
    sharded = dict(model.named_parameters())
    for name, p in ref.named_parameters():
        g = sharded[name].grad
        p.grad = None if g is None else g.full_tensor() if isinstance(g, DTensor) else g.clone()
    return ref


def main(out_dir: Path, mode: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    if mode == "lora":
        add_lora(model)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    trainable = {n for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    monitor = gv.GradientMonitor(model, optimizer=opt)
    result: dict[str, Any] = {"rank": rank, "world": world, "errors": {}, "dtensor_grads": 0}
    errors: dict[str, float] = Counter()

    # count the collectives gradviz makes (everything reduced, nothing gathered)
    calls: Counter[str] = Counter()
    real_all_reduce = dist.all_reduce

    def counting_all_reduce(tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, **kw: Any) -> Any:
        calls[str(op).rpartition(".")[2]] += 1
        return real_all_reduce(tensor, op, **kw)

    real_all_gather = dist.all_gather

    def counting_all_gather(out: list[torch.Tensor], tensor: torch.Tensor, **kw: Any) -> Any:
        calls["ALL_GATHER"] += 1
        calls["ALL_GATHER_FLOATS"] += tensor.numel()
        return real_all_gather(out, tensor, **kw)

    monitor_refs: list[list[float]] = []
    update_refs: list[list[float]] = []
    for step in range(3):
        with gv.capture(model) as cap:
            loss = gpt2_loss(model, batch=2, seq=8, seed=10 * step + rank)  # type: ignore[arg-type]
        if step == 0:
            graph = gv.trace(loss, model=model, capture=cap)
            leaves = graph.leaves()
            result["leaf_names"] = sorted(leaves)
            result["leaf_values"] = {name: graph.nx.nodes[v].get("value") for name, v in leaves.items()}
        loss.backward()
        result["dtensor_grads"] = sum(isinstance(p.grad, DTensor) for p in model.parameters())
        ref = _reference(model, mode == "lora")
        ref_params = dict(ref.named_parameters(remove_duplicate=False))
        layer_norms = {layer: 0.0 for layer in monitor.layers}
        for name in monitor._names:
            g = ref_params[name].grad
            layer_norms[name.rpartition(".")[0]] += 0.0 if g is None else float(g.double().square().sum())
        monitor_refs.append([math.sqrt(v) for v in layer_norms.values()])
        dist.all_reduce = counting_all_reduce  # type: ignore[assignment]
        dist.all_gather = counting_all_gather  # type: ignore[assignment]
        try:
            monitor.step()
            result["monitor_calls"] = dict(calls)
            calls.clear()
            if step == 2:
                flow = gv.gradient_flow(model)
                result["flow_calls"] = dict(calls)
                calls.clear()
                edges, hist = layer_histograms(model)
                result["hist_calls"] = dict(calls)
        finally:
            dist.all_reduce = real_all_reduce  # type: ignore[assignment]
            dist.all_gather = real_all_gather  # type: ignore[assignment]
        if step == 2:
            expect = gv.gradient_flow(ref)
            exp_params = {p.name: p for p in expect.params}
            for p in flow.params:
                e = exp_params[p.name]
                g = ref_params[p.name].grad
                full = math.nan if g is None else float(g.norm())
                for key in ("norm", "max_abs", "zero_frac", "weight_norm", "ratio"):
                    errors[f"param.{key}"] = max(errors[f"param.{key}"], _rel(getattr(p, key), getattr(e, key)))
                # a mean near 0 is a sum that cancels: its error relative to the largest |g|
                errors["param.mean"] = max(errors["param.mean"], abs(p.mean - e.mean) / max(e.max_abs, 1e-30))
                errors["param.norm_vs_full_tensor"] = max(errors["param.norm_vs_full_tensor"], _rel(p.norm, full))
                full_w = float(ref_params[p.name].detach().norm())
                errors["param.weight_vs_full_tensor"] = max(errors["param.weight_vs_full_tensor"],
                                                            _rel(p.weight_norm, full_w))
                assert (p.has_grad, p.shape, p.numel, p.nonfinite) == (e.has_grad, e.shape, e.numel, e.nonfinite)
            exp_modules = {m.path: m for m in expect.modules}
            for m in flow.modules:
                errors["module.norm"] = max(errors["module.norm"], _rel(m.norm, exp_modules[m.path].norm))
            result["flags"] = sorted((f.kind, f.target) for f in flow.flags)
            result["expected_flags"] = sorted((f.kind, f.target) for f in expect.flags)
            exp_edges, exp_hist = layer_histograms(ref)
            assert edges == exp_edges and hist.keys() == exp_hist.keys()
            errors["histogram"] = max(abs(a - b) for k in hist for a, b in zip(hist[k], exp_hist[k], strict=True))
            result["n_params"] = len(flow.params)
        calls.clear()
        dist.all_reduce = counting_all_reduce  # type: ignore[assignment]
        try:
            opt.step()  # the monitor's step hooks measure ||w_after - w_before|| / ||w_before|| per layer
            result["update_calls"] = dict(calls)
            calls.clear()
        finally:
            dist.all_reduce = real_all_reduce  # type: ignore[assignment]
        after = {n: p.detach().full_tensor() for n, p in model.named_parameters()}
        upd = {layer: [0.0, 0.0] for layer in monitor.layers}
        for name in monitor._names:
            before = ref_params[name].detach().double()
            upd[name.rpartition(".")[0]][0] += float((after[name].double() - before).square().sum())
            upd[name.rpartition(".")[0]][1] += float(before.square().sum())
        update_refs.append([math.sqrt(d) / math.sqrt(w) for d, w in upd.values()])
        opt.zero_grad()

    history = monitor.history().tolist()
    errors["monitor.norm"] = max(_rel(a, b) for rec, ref_rec in zip(history, monitor_refs, strict=True)
                                 for a, b in zip(rec, ref_rec, strict=True))
    errors["monitor.update"] = max(_rel(a, b) for rec, ref_rec in zip(monitor.history("update").tolist(),
                                                                     update_refs, strict=True)
                                   for a, b in zip(rec, ref_rec, strict=True))
    result.update(errors=dict(errors), names=names, trainable=sorted(trainable), steps=monitor.steps,
                  monitor_layers=monitor.layers)
    monitor.close()
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])

"""Run by tests/unit/test_distributed.py under `torchrun --nproc_per_node=2` (gloo, CPU): one launch, several
checks, each against what PyTorch really holds.

1. FSDP2 (`fully_shard` per block, then the root) and DDP, each on a tiny GPT-2 with LoRA: capture, trace,
   GraphWidget (its graph_data payload), what_if (against a real backward with the tensor detached),
   record_backward (its leaf gradients, averaged over ranks, against the engine's reduced `.grad`),
   Dashboard, memory_held and the doctor; a healthy GradientMonitor (per-rank statistics, no flags).
2. DTensor saved for backward: memory counts this rank's shard (`_local_tensor`'s storage).
3. DDP replicas that disagree (rank 1 scales its gradients by hand; backward under `no_sync()`): the
   monitor's `replica-mismatch` names rank 1 with both norms.
4. DDP with a branch rank 1 skips (`find_unused_parameters=True`): `unused-on-rank` names exactly its
   parameters.

Writes what it found as JSON to argv[1]/rank<r>.json.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from torch.nn.parallel import DistributedDataParallel

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora
from gradviz_nb.tracing.schema import schema_problems

RANK = 0
WORLD = 1


def _loss(model: nn.Module, seed: int) -> torch.Tensor:
    """Tiny GPT-2 loss on this rank's own tokens (DDP's wrapper has no `.config`: tokens made here)."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 101, (2, 8), generator=gen)
    out = model(idx, torch.randint(0, 101, (2, 8), generator=gen))
    loss: torch.Tensor = out[1]
    return loss


def _gpt2(engine: str, mesh: Any) -> nn.Module:
    torch.manual_seed(0)
    model = add_lora(GPT2(GPT2Config.small_test()))
    if engine == "fsdp2":
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    # find_unused_parameters: the what-if truth below really detaches a block's attention (unused adapters)
    return DistributedDataParallel(model, find_unused_parameters=True)


def _full(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _rel(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / max(abs(b), 1e-30)


def check_engine(engine: str, mesh: Any) -> dict[str, Any]:
    """Section 1: every tool on one engine's model."""
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    model = _gpt2(engine, mesh)
    params = dict(model.named_parameters())
    trainable = sorted(n for n, p in params.items() if p.requires_grad)
    out["trainable"] = trainable
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)

    # trace: leaves named, FSDP/DDP nodes labelled with a note, a graph note on where communication runs
    with gv.capture(model) as cap:
        loss = _loss(model, seed=RANK)
    graph = gv.trace(loss, model=model, capture=cap)
    g = graph.nx
    out["leaf_names"] = sorted(graph.leaves())
    out["engines"] = g.graph["distributed"]
    out["notes"] = graph.notes
    out["special"] = sorted({(d["op"], d["label"], d.get("note", ""), d.get("distributed", ""))
                             for _, d in g.nodes(data=True) if d.get("distributed")})
    out["schema_problems"] = schema_problems(g)
    out["unlabelled_ops"] = sorted({d["op"] for _, d in g.nodes(data=True) if d["kind"] == "op"
                                    and not d["op"].endswith(("Backward0", "Backward1")) and not d.get("note")})

    # GraphWidget: built, and its page payload carries the labels and the graph note
    widget = gv.GraphWidget(graph)
    payload = widget.graph_data
    out["payload_labels"] = sorted({n["label"] for n in payload["nodes"] if n["op"] in
                                    {o for o, *_ in out["special"]}})
    out["payload_notes"] = payload["meta"]["notes"]
    out["payload_leaves"] = sorted(n["label"] for n in payload["nodes"] if n["kind"] == "leaf")

    # memory_held, before backward: what each rank holds (FSDP2 frees resharded parameters after forward)
    mem = gv.memory_held(graph)
    out["mem_parameters"] = mem.parameters
    out["mem_activations"] = mem.activations
    saved_params = [(d["call"], s) for _, d in g.nodes(data=True) for s in d.get("saved", []) if s.get("param")]
    out["mem_block_param_bytes"] = sum(s["storage_bytes"] for call, s in saved_params if "blocks." in call)
    if engine == "fsdp2":  # truth: FSDP's unsharded parameters of the blocks are freed (resharded) now
        truth = 0
        for block in model.blocks:
            for fp in block._get_fsdp_state()._fsdp_param_group.fsdp_params:  # type: ignore[operator, union-attr]
                truth += fp._unsharded_param.untyped_storage().nbytes() if hasattr(fp, "_unsharded_param") else 0
        out["truth_block_param_bytes"] = truth
    else:  # DDP: every replica holds the full parameters
        out["truth_block_param_bytes"] = sum({s["storage"]: s["storage_bytes"] for call, s in saved_params
                                              if "blocks." in call}.values())

    # what_if: detaching blocks.1.attn's output (and freezing one adapter) predicts which leaves lose gradient
    prefix = "module." if engine.startswith("ddp") else ""
    call = next(c["id"] for c in graph.calls if c["path"] == f"{prefix}blocks.1.attn")
    frozen = f"{prefix}blocks.0.mlp.c_proj.lora_B"
    wi = graph.what_if(detach=[call], freeze=[frozen])
    out["what_if_lost"] = sorted(wi.lost)
    del graph, widget, loss, cap

    # truth for what_if: the same forward with that output really detached and the adapter frozen
    attn = (model.module if engine.startswith("ddp") else model).blocks[1].attn
    handle = attn.register_forward_hook(lambda m, i, o: o.detach())
    params[frozen].requires_grad_(False)
    try:
        _loss(model, seed=RANK).backward()
    finally:
        handle.remove()
        params[frozen].requires_grad_(True)
    out["truth_lost"] = sorted(n for n in trainable if params[n].grad is None)
    opt.zero_grad(set_to_none=True)

    # record_backward: each rank's leaf gradients, averaged over ranks, are what the engine leaves in .grad
    with gv.capture(model) as cap:
        loss = _loss(model, seed=RANK)
    before = {n: params[n].grad for n in trainable}
    rec = gv.record_backward(loss, model=model, capture=cap)
    out["record_grad_untouched"] = all(params[n].grad is before[n] for n in trainable)
    out["record_steps"] = len(rec.steps)
    recorded = {n: rec.leaf_grad(n).clone() for n in trainable}
    del rec, loss, cap
    _loss(model, seed=RANK).backward()
    err = 0.0
    for n in trainable:
        mean = recorded[n]
        dist.all_reduce(mean)
        mean /= WORLD
        truth = _full(params[n].grad)
        assert truth is not None
        err = max(err, float((mean - truth).abs().max() / truth.abs().max()))
    out["record_vs_reduced_grad"] = err

    # Dashboard (gradients from the real backward above): its flow's norms are the full gradients'
    with gv.capture(model) as cap:
        loss = _loss(model, seed=RANK)
    dash = gv.Dashboard(model, loss, capture=cap, histograms=False)
    full_norms = {n: float(g.norm()) for n in trainable if (g := _full(params[n].grad)) is not None}
    out["dashboard_norm_err"] = max(_rel(p.norm, full_norms[p.name]) for p in dash.flow.params if p.name in full_norms)
    out["dashboard_overlay"] = bool(dash.graph.overlay)
    out["dashboard_flags"] = [f.kind for f in dash.flow.flags]
    del dash, loss, cap
    opt.zero_grad(set_to_none=True)

    # doctor: a healthy step finds nothing, and every rank's state is put back exactly
    local_before = {n: _local(p.detach()).clone() for n, p in params.items()}

    def step() -> None:
        opt.zero_grad()
        _loss(model, seed=RANK).backward()
        opt.step()

    dx = gv.doctor(step, model, opt)
    out["doctor_ok"] = dx.ok
    out["doctor_findings"] = [(f.kind, f.target) for f in dx.findings]
    out["doctor_restored"] = all(torch.equal(_local(p.detach()), local_before[n]) for n, p in params.items())
    out["doctor_grads_none"] = all(params[n].grad is None for n in trainable)

    # a healthy monitor: per-rank statistics gathered to rank 0, no distributed flag
    monitor = gv.GradientMonitor(model, optimizer=opt)
    shard_norms: list[list[float]] = []
    for s in range(3):
        _loss(model, seed=10 * s + RANK).backward()
        monitor.step()
        sq = {layer: 0.0 for layer in monitor.layers}
        for n in monitor._names:
            g = params[n].grad
            sq[n.rpartition(".")[0]] += 0.0 if g is None else float(_local(g).double().square().sum())
        shard_norms.append([math.sqrt(v) for v in sq.values()])
        opt.step()
        opt.zero_grad()
    out["monitor_history"] = monitor.history().tolist()
    out["monitor_own"] = shard_norms  # this rank's own gradient (DDP) or shard (FSDP2) norms, per layer
    per_rank = monitor.per_rank()
    out["monitor_per_rank"] = None if per_rank is None else per_rank.tolist()
    out["monitor_flags"] = [(f.kind, f.target) for _, f in monitor.flags()]
    monitor.close()
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def check_dtensor_memory(mesh: Any) -> dict[str, Any]:
    """Section 2: DTensors saved for backward (two parameters, one activation): each counts this rank's
    shard, apart (a DTensor's own data_ptr() is 0 for all of them)."""
    torch.manual_seed(0)
    w1 = nn.Parameter(distribute_tensor(torch.randn(64, 32), mesh, [Shard(0)]))
    w2 = nn.Parameter(distribute_tensor(torch.randn(64, 32), mesh, [Shard(0)]))
    x = distribute_tensor(torch.randn(64, 32), mesh, [Shard(0)])
    loss = ((w1 * w2).sum() + (w1 * x).sum()).full_tensor()  # saves w2 and w1 (first mul), x (second)
    graph = gv.trace(loss, names={"w1": w1, "w2": w2})
    problems = schema_problems(graph.nx)
    saved = [s for _, d in graph.nx.nodes(data=True) for s in d.get("saved", []) if s.get("sharded")]
    mem = gv.memory_held(graph)
    return {
        "saved": sorted((s["name"], s["bytes"], s["storage_bytes"], s["param"], s["storage"]) for s in saved),
        "truth_local": [t._local_tensor.untyped_storage().nbytes() for t in (w1, w2, x)],
        "full_bytes": 64 * 32 * 4,
        "parameters": mem.parameters,
        "activations": mem.activations,
        "special": sorted({(d["op"], d["label"]) for _, d in graph.nx.nodes(data=True) if d.get("distributed")}),
        "schema_problems": problems,
    }


class Branchy(nn.Module):
    """A trunk, a branch some ranks skip, and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(4, 8)
        self.branch = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, use_branch: bool = True) -> torch.Tensor:
        h = torch.relu(self.trunk(x))
        if use_branch:
            h = h + self.branch(h)
        out: torch.Tensor = self.head(h)
        return out


def check_ddp_flags() -> dict[str, Any]:
    """Sections 3 and 4: an unsynchronised replica, and a branch rank 1 skips."""
    out: dict[str, Any] = {}
    torch.manual_seed(0)
    model = DistributedDataParallel(Branchy())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = gv.GradientMonitor(model, optimizer=opt)
    gen = torch.Generator().manual_seed(RANK)
    norms = []
    for step in range(1, 5):
        x = torch.randn(6, 4, generator=gen)
        if step == 4:
            with model.no_sync():  # this backward is not all-reduced: each rank keeps its own gradient
                model(x).pow(2).mean().backward()
        else:
            model(x).pow(2).mean().backward()
        if step == 2 and RANK == 1:
            for p in model.parameters():  # a per-rank change after DDP's all-reduce
                assert p.grad is not None
                p.grad.mul_(3.0)
        norms.append({layer: math.sqrt(sum(float(p.grad.double().square().sum())
                                           for n, p in model.named_parameters()
                                           if n.rpartition(".")[0] == layer and p.grad is not None))
                      for layer in monitor.layers})
        monitor.step()
        opt.step()
        opt.zero_grad()
    out["mismatch_flags"] = [(s, f.kind, f.target, f.reason) for s, f in monitor.flags()]
    out["mismatch_norms"] = norms
    out["layers"] = monitor.layers
    monitor.close()

    # rank 1 skips the branch on steps 2 and 3; DDP copes (find_unused_parameters=True)
    torch.manual_seed(0)
    model = DistributedDataParallel(Branchy(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = gv.GradientMonitor(model, optimizer=opt)
    with gv.capture(model) as cap:
        loss = model(torch.randn(6, 4, generator=gen)).pow(2).mean()
    graph = gv.trace(loss, model=model, capture=cap)
    out["sink"] = sorted({(d["op"], d["label"], d.get("note", "")) for _, d in graph.nx.nodes(data=True)
                          if d.get("distributed")})
    del graph, cap
    loss.backward()
    monitor.step()
    opt.step()
    opt.zero_grad()
    grads_on_skip = {}
    for _ in (2, 3):  # steps 2 and 3
        model(torch.randn(6, 4, generator=gen), use_branch=RANK != 1).pow(2).mean().backward()
        grads_on_skip = {n: p.grad is not None for n, p in model.named_parameters()}
        monitor.step()
        opt.step()
        opt.zero_grad()
    out["unused_flags"] = [(s, f.kind, f.target, f.reason, list(f.params)) for s, f in monitor.flags()]
    out["grad_present_after_skip"] = grads_on_skip  # what DDP left in .grad on this rank
    out["branch_params"] = sorted(n for n, _ in model.named_parameters() if ".branch." in n)
    monitor.close()
    return out


def main(out_dir: Path) -> None:
    global RANK, WORLD
    dist.init_process_group("gloo")
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (WORLD,))
    result: dict[str, Any] = {"rank": RANK, "world": WORLD, "seconds": {}}
    for name, check in (("fsdp2", lambda: check_engine("fsdp2", mesh)), ("ddp", lambda: check_engine("ddp", mesh)),
                        ("dtensor_memory", lambda: check_dtensor_memory(mesh)), ("ddp_flags", check_ddp_flags)):
        t0 = time.perf_counter()
        result[name] = check()
        result["seconds"][name] = round(time.perf_counter() - t0, 2)
        dist.barrier()
    (out_dir / f"rank{RANK}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

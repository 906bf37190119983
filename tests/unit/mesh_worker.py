"""Run by tests/unit/test_meshes.py under `torchrun` (gloo, CPU), one launch per mesh: argv[2] is "hsdp"
(`fully_shard` on a 2x2 (replicate, shard) mesh, 4 ranks), "tp" (`parallelize_module` with colwise and rowwise
Linear, 2 ranks) or "tp_fsdp" (tensor parallel on the inner dimension of a 2x2 mesh, FSDP2 on the outer).

Each rank checks, against what PyTorch holds (`full_tensor()`):
1. trace: leaves named by their parameters, with their full shapes; `gradient_flow` and a `GradientMonitor`:
   per-parameter and per-layer norms, max-abs and zero fractions;
2. the clip as applied: a healthy global clip, a hand-written per-shard clip and (HSDP) a norm summed over
   replicas, each under the doctor and the monitor;
3. why / prove, find_nonfinite, record_backward, memory_held: an answer or a one-line refusal;
4. the collectives gradviz adds (calls and bytes) beside a plain step, and the time of both.

Writes what it found as JSON to argv[1]/rank<r>.json.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import gradviz_nb as gv

RANK = 0
WORLD = 1
MAX_NORM = 0.03  # below every rank's pieces' norm: every clip bites on every rank


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)
        self.head = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))
        return out


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x.pow(2).mean()


def build(mode: str) -> nn.Module:
    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():  # dead units: rows of exact zeros in the gradients (zero fractions to compare)
        model.blocks[0].fc1.bias[:6] = -100.0
    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    if mode == "hsdp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(model, mesh=mesh)
    elif mode == "tp":
        mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("tp",))
        for b in model.blocks:
            parallelize_module(b, mesh, plan)
    else:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        for b in model.blocks:
            parallelize_module(b, mesh["tp"], plan)
            fully_shard(b, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return model


def batch(step: int = 0) -> torch.Tensor:
    """This rank's data: tensor parallel ranks of one group must see the same batch, data-parallel ones not."""
    group = RANK // 2 if MODE == "tp_fsdp" else (0 if MODE == "tp" else RANK)
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(100 * step + group))


def full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().double()


def local(t: torch.Tensor) -> torch.Tensor:
    return (t.to_local() if isinstance(t, DTensor) else t).detach().double()


def rel(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / max(abs(b), 1e-30)


@contextmanager
def counted(calls: Counter[str]) -> Iterator[None]:
    """Count the torch.distributed collectives made inside (calls, and bytes under "<name> bytes")."""
    names = ["all_reduce", "gather", "all_gather", "all_gather_object", "all_gather_into_tensor", "broadcast",
             "reduce_scatter_tensor", "gather_object"]
    real = {n: getattr(dist, n) for n in names}

    def wrap(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            calls[name] += 1
            t = args[1] if name == "all_gather" else args[0] if args else None
            t = t if isinstance(t, torch.Tensor) else None
            if t is not None:
                calls[f"{name} bytes"] += t.numel() * t.element_size()
            return real[name](*args, **kw)
        return call

    for n in names:
        setattr(dist, n, wrap(n))
    try:
        yield
    finally:
        for n, f in real.items():
            setattr(dist, n, f)


def check_norms(model: nn.Module) -> dict[str, Any]:
    """Item 1: names and shapes of the graph's leaves, and every statistic against full_tensor()."""
    out: dict[str, Any] = {}
    params = dict(model.named_parameters())
    out["shapes"] = {n: list(p.shape) for n, p in params.items()}
    out["dtensor_params"] = sorted(n for n, p in params.items() if isinstance(p, DTensor))
    with gv.capture(model) as cap:
        loss = model(batch())
    graph = gv.trace(loss, model=model, capture=cap)
    out["leaves"] = {name: graph.nx.nodes[v]["shape"] for name, v in graph.leaves().items()}
    out["distributed_ops"] = sorted({d["op"] for _, d in graph.nx.nodes(data=True) if d.get("distributed")})
    mem = gv.memory_held(graph)
    out["memory"] = [mem.parameters, mem.activations]
    del graph, cap
    loss.backward()
    grads = {n: full(p.grad) for n, p in params.items() if p.grad is not None}
    monitor = gv.GradientMonitor(model)
    calls: Counter[str] = Counter()
    with counted(calls):
        flow = gv.gradient_flow(model)
    out["flow_calls"] = dict(calls)
    calls.clear()
    with counted(calls):
        monitor.step()
    out["monitor_calls"] = dict(calls)
    errors: Counter[str] = Counter()
    for p in flow.params:
        g = grads[p.name]
        for key, truth in (("norm", float(g.norm())), ("max_abs", float(g.abs().max())),
                           ("zero_frac", float((g == 0).double().mean())),
                           ("weight_norm", float(full(params[p.name]).norm()))):
            errors[f"flow.{key}"] = max(errors[f"flow.{key}"], rel(getattr(p, key), truth))
    out["zero_fracs"] = {p.name: p.zero_frac for p in flow.params}
    history, maxes = monitor.history()[-1].tolist(), monitor.history("max_abs")[-1].tolist()
    for c, layer in enumerate(monitor.layers):
        mine = [g for n, g in grads.items() if n.rpartition(".")[0] == layer]
        errors["monitor.norm"] = max(errors["monitor.norm"], rel(history[c], math.sqrt(sum(float(g.square().sum())
                                                                                         for g in mine))))
        errors["monitor.max_abs"] = max(errors["monitor.max_abs"], rel(maxes[c], max(float(g.abs().max())
                                                                                    for g in mine)))
    out["errors"] = dict(errors)
    out["monitor_flags"] = [(f.kind, f.target) for _, f in monitor.flags()]
    monitor.close()
    model.zero_grad(set_to_none=True)
    return out


def clip_global(model: nn.Module) -> float:
    """A correct clip: torch's clip_grad_norm_ once per mesh (tensor parallel mixes meshes and plain tensors),
    with the total of the groups' norms."""
    groups: dict[Any, list[nn.Parameter]] = {}
    for p in model.parameters():
        groups.setdefault(p.device_mesh if isinstance(p, DTensor) else None, []).append(p)
    if len(groups) == 1:
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        return float(total.full_tensor() if isinstance(total, DTensor) else total)
    norms = []
    for ps in groups.values():
        n = torch.nn.utils.get_total_norm([p.grad for p in ps if p.grad is not None])
        norms.append(n.full_tensor() if isinstance(n, DTensor) else n)
    total = torch.stack(norms).norm()
    for ps in groups.values():
        torch.nn.utils.clip_grads_with_norm_(ps, MAX_NORM, total)
    return float(total)


def clip_per_shard(model: nn.Module) -> float:
    """The bug: each rank clips by the norm of the pieces it holds."""
    norm = math.sqrt(sum(float(local(p.grad).square().sum()) for p in model.parameters() if p.grad is not None))
    coef = min(1.0, MAX_NORM / (norm + 1e-6))
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(coef)  # the clipping line
    return norm


def clip_over_replicas(model: nn.Module) -> float:
    """The bug: the pieces' squares summed over every rank, replicas as if they were more shards."""
    sq = torch.tensor(sum(float(local(p.grad).square().sum()) for p in model.parameters() if p.grad is not None))
    dist.all_reduce(sq)
    total = sq.sqrt()
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), MAX_NORM, total)
    return float(total)


def check_clips(model: nn.Module) -> dict[str, Any]:
    """Item 2: each clip under the doctor and under the monitor."""
    out: dict[str, Any] = {}
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model(batch()).backward()  # the truth: the full gradients before any clip, and this rank's pieces' norm
    out["true_norm"] = math.sqrt(sum(float(full(p.grad).square().sum()) for p in model.parameters()))
    out["pieces_norm"] = math.sqrt(sum(float(local(p.grad).square().sum()) for p in model.parameters()))
    model.zero_grad(set_to_none=True)
    clips = {"global": clip_global, "per_shard": clip_per_shard}
    if MODE == "hsdp":
        clips["over_replicas"] = clip_over_replicas
    for name, clip in clips.items():
        def step(clip: Callable[[nn.Module], float] = clip) -> None:
            opt.zero_grad()
            model(batch()).backward()
            clip(model)
            opt.step()

        dx = gv.doctor(step, model, opt, steps=1)
        out[f"doctor_{name}"] = [(f.kind, f.target, f.message, f.evidence) for f in dx.findings]
        monitor = gv.GradientMonitor(model, optimizer=opt)
        before = {n: local(p).clone() for n, p in model.named_parameters()}
        opt.zero_grad()
        model(batch()).backward()
        used = clip(model)
        monitor.step(grad_norm=used, max_norm=MAX_NORM)
        out[f"monitor_{name}"] = [(f.kind, f.reason) for _, f in monitor.flags()]
        monitor.close()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():  # no step was taken: the weights are as before
            assert all(torch.equal(local(p), before[n]) for n, p in model.named_parameters())
    return out


def attempt(fn: Callable[[], Any]) -> list[str]:
    try:
        return ["answer", repr(fn())[:400]]
    except gv.GradvizError as e:
        return ["refused", str(e)]


def check_probes(model: nn.Module) -> dict[str, Any]:
    """Item 3: why / prove, find_nonfinite (NaN planted on rank 1), record_backward and a breakpoint."""
    out: dict[str, Any] = {}
    name = "blocks.0.fc1.weight"
    x = batch()
    out["why"] = attempt(lambda: gv.why(model, name, fn=lambda: model(x)))
    out["prove"] = attempt(lambda: gv.why(model, name, fn=lambda: model(x)).prove())
    bad = -1.0 if RANK == 1 else 1.0

    def nan_step() -> None:
        (model(x) * torch.log(torch.tensor(bad))).backward()

    nf = gv.find_nonfinite(nan_step, model)
    out["find_nonfinite"] = ["answer", repr(nf)] if nf is not None else ["answer", "None"]
    out["nonfinite_ranks"] = [nf.rank, list(nf.ranks)] if nf is not None else None
    model.zero_grad(set_to_none=True)

    def record() -> Any:
        with gv.capture(model) as cap:
            loss = model(x)
        rec = gv.record_backward(loss, model=model, capture=cap)
        stop = rec.find("zero")
        return {"steps": len(rec.steps), "ops": sorted({s.op for s in rec.steps}), "zero_stop": repr(stop)[:200]}

    out["record_backward"] = attempt(record)
    model.zero_grad(set_to_none=True)
    return out


def check_cost(model: nn.Module) -> dict[str, Any]:
    """Item 4: plain steps, then steps with a GradientMonitor recording every step (given the optimizer: its
    update hooks measure too), timed and counted: the collectives of the whole step, and gradviz's own."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    out: dict[str, Any] = {}
    monitor: Any = None
    for label in ("plain", "plain2", "monitored", "monitored2"):
        if label == "monitored":
            monitor = gv.GradientMonitor(model, optimizer=opt)
        calls: Counter[str] = Counter()
        dist.barrier()
        t0 = time.perf_counter()
        for s in range(5):
            with counted(calls):
                opt.zero_grad()
                model(batch(s)).backward()
                if monitor is not None:
                    monitor.step()
                opt.step()
        out[f"{label}_s"] = (time.perf_counter() - t0) / 5
        out[f"{label}_calls"] = {k: v / 5 for k, v in calls.items()}
    monitor.close()
    return out


MODE = ""


def main(out_dir: Path, mode: str) -> None:
    global RANK, WORLD, MODE
    MODE = mode
    dist.init_process_group("gloo")
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    model = build(mode)
    result: dict[str, Any] = {"rank": RANK, "world": WORLD, "mode": mode, "seconds": {}}
    for name, check in (("norms", check_norms), ("clips", check_clips), ("probes", check_probes),
                        ("cost", check_cost)):
        t0 = time.perf_counter()
        result[name] = check(model)
        result["seconds"][name] = round(time.perf_counter() - t0, 2)
        dist.barrier()
    result["cpu_s"] = time.process_time()
    (out_dir / f"rank{RANK}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])

# mypy: disable-error-code="no-untyped-call"
"""Training-loop recipes: warmup from zero and cosine schedules, one-cycle, warm restarts, a frozen backbone
in eval() under no_grad, partial freezing, mixed precision (GradScaler with unscale_ and clipping, bfloat16
autocast), gradient accumulation (plain and scaled), EMA teachers (mean teacher, SWA), and common losses."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from gradviz_nb.bugzoo.recipes.kit import IN, OUT, Recipe, Run, batch, ema_update, frozen_copy, mlp

__all__ = ["TRAINING"]


def _plain(model: nn.Module, opt: torch.optim.Optimizer, after: Any = None) -> Run:
    x, y = batch()

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if after is not None:
            after.step()
    return Run(model, opt, step)


def _warmup_cosine() -> Run:
    model = mlp(depth=3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    warm, total = 2, 20
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / warm if s < warm else 0.5 * (
        1 + math.cos(math.pi * (s - warm) / (total - warm))))  # starts at lr 0: the first step moves nothing
    return _plain(model, opt, sched)


def _linear_warmup_sequential() -> Run:
    model = mlp(depth=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=3),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)], milestones=[3])
    return _plain(model, opt, sched)


def _one_cycle() -> Run:
    model = mlp(depth=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return _plain(model, opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=20))


def _warm_restarts() -> Run:
    model = mlp(depth=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return _plain(model, opt, torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, eta_min=1e-4))


def _frozen_eval_backbone() -> Run:
    backbone = nn.Sequential(nn.Linear(IN, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 32))
    backbone.requires_grad_(False).eval()
    model = nn.ModuleDict({"backbone": backbone, "head": nn.Linear(32, OUT)})
    opt = torch.optim.AdamW(model["head"].parameters(), lr=1e-3)
    x, y = batch()

    def step() -> None:
        with torch.no_grad():
            feats = model["backbone"](x)
        opt.zero_grad()
        F.cross_entropy(model["head"](feats), y).backward()
        opt.step()
    return Run(model, opt, step)


def _partial_freeze() -> Run:
    model = mlp(depth=4)
    model[0].requires_grad_(False)
    model[2].requires_grad_(False)
    opt = torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=1e-3)
    return _plain(model, opt)


def _grad_scaler() -> Run:
    model = mlp(depth=3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    x, y = batch()

    def step() -> None:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
    return Run(model, opt, step)


def _bf16_autocast() -> Run:
    model = nn.Sequential(nn.Linear(IN, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, OUT))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = batch()

    def step() -> None:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return Run(model, opt, step)


def _accumulation() -> Run:
    model = mlp(depth=3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = batch(32)

    def step() -> None:
        for xs, ys in zip(x.chunk(4), y.chunk(4), strict=True):
            (F.cross_entropy(model(xs), ys) / 4).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
    return Run(model, opt, step)


def _accumulation_scaled() -> Run:
    model = mlp(depth=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x, y = batch(32)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        for xs, ys in zip(x.chunk(2), y.chunk(2), strict=True):
            scaler.scale(F.cross_entropy(model(xs), ys) / 2).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        scaler.step(opt)
        scaler.update()
    return Run(model, opt, step)


def _mean_teacher() -> Run:
    student = nn.Sequential(nn.Linear(IN, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, OUT))
    model = nn.ModuleDict({"student": student, "teacher": frozen_copy(student)})
    opt = torch.optim.Adam(student.parameters(), lr=1e-3)
    (x, y), (u, _) = batch(8), batch(16)

    def step() -> None:
        with torch.no_grad():
            target = F.softmax(model["teacher"](u + 0.05 * torch.randn_like(u)), -1)
        consistency = F.mse_loss(F.softmax(student(u), -1), target)
        opt.zero_grad()
        (F.cross_entropy(student(x), y) + 10 * consistency).backward()
        opt.step()
        ema_update(model["teacher"], student, 0.99)
    return Run(model, opt, step)


def _swa() -> Run:
    net = mlp(depth=3)
    avg = torch.optim.swa_utils.AveragedModel(net)
    model = nn.ModuleDict({"net": net, "swa": avg})
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.swa_utils.SWALR(opt, swa_lr=0.01, anneal_epochs=2)
    x, y = batch()

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
        avg.update_parameters(net)
        sched.step()
    return Run(model, opt, step)


def _gpt_weight_decay_groups() -> Run:
    model = nn.Sequential(nn.Embedding(50, 16), nn.LayerNorm(16), nn.Linear(16, 50))
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95))
    ids = torch.randint(0, 50, (4, 12))

    def step() -> None:
        logits = model(ids[:, :-1])
        opt.zero_grad()
        F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), label_smoothing=0.1).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return Run(model, opt, step)


def _uncertainty_multitask() -> Run:
    model = nn.ModuleDict({"trunk": mlp(o=32), "cls": nn.Linear(32, OUT), "reg": nn.Linear(32, 1)})
    model.register_parameter("log_vars", nn.Parameter(torch.zeros(2)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    (x, y), t = batch(), torch.randn(16, 1)

    def step() -> None:
        h = model["trunk"](x)
        losses = torch.stack([F.cross_entropy(model["cls"](h), y), F.mse_loss(model["reg"](h), t)])
        s = model.get_parameter("log_vars")
        opt.zero_grad()
        (torch.exp(-s) * losses + s).sum().backward()
        opt.step()
    return Run(model, opt, step)


def _triplet() -> Run:
    model = mlp(o=8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    a, _ = batch()
    p, n = a + 0.1 * torch.randn_like(a), torch.randn_like(a)

    def step() -> None:
        opt.zero_grad()
        F.triplet_margin_loss(model(a), model(p), model(n), margin=1.0).backward()
        opt.step()
    return Run(model, opt, step)


def _r_drop() -> Run:
    model = nn.Sequential(nn.Linear(IN, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, OUT))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = batch()

    def step() -> None:
        a, b = model(x), model(x)
        kl = (F.kl_div(F.log_softmax(a, -1), F.softmax(b, -1), reduction="batchmean")
              + F.kl_div(F.log_softmax(b, -1), F.softmax(a, -1), reduction="batchmean")) / 2
        opt.zero_grad()
        ((F.cross_entropy(a, y) + F.cross_entropy(b, y)) / 2 + kl).backward()
        opt.step()
    return Run(model, opt, step)


def _mixup() -> Run:
    model = mlp(depth=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    x, y = batch()

    def step() -> None:
        lam = float(torch.distributions.Beta(0.4, 0.4).sample())
        perm = torch.randperm(len(x))
        out = model(lam * x + (1 - lam) * x[perm])
        opt.zero_grad()
        (lam * F.cross_entropy(out, y) + (1 - lam) * F.cross_entropy(out, y[perm])).backward()
        opt.step()
    return Run(model, opt, step)


def _plateau() -> Run:
    model = mlp(depth=3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)
    x, y = batch()

    def step() -> None:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step(float(loss))
    return Run(model, opt, step)



TRAINING = [
    Recipe("warmup-from-zero-cosine", "transformers get_cosine_schedule_with_warmup (LambdaLR from lr 0)",
           _warmup_cosine),
    Recipe("linear-warmup-sequential", "torch SequentialLR(LinearLR, CosineAnnealingLR), Nesterov SGD",
           _linear_warmup_sequential),
    Recipe("one-cycle", "Smith & Topin 2019, OneCycleLR", _one_cycle),
    Recipe("warm-restarts", "Loshchilov & Hutter 2017, SGDR (CosineAnnealingWarmRestarts)", _warm_restarts),
    Recipe("frozen-eval-backbone", "torchvision fine-tuning: backbone frozen, in eval(), under no_grad",
           _frozen_eval_backbone),
    Recipe("partial-freeze", "ULMFiT-style: lower layers frozen, left out of the optimizer", _partial_freeze),
    Recipe("grad-scaler-clip", "torch.amp recipe: scale, unscale_, clip_grad_norm_, scaler.step", _grad_scaler),
    Recipe("bf16-autocast", "torch.autocast(bfloat16) on CPU", _bf16_autocast),
    Recipe("accumulation", "gradient accumulation over 4 micro-batches, loss / 4, clip, step", _accumulation),
    Recipe("accumulation-scaled", "accumulation under a GradScaler (unscale_ once before clipping)",
           _accumulation_scaled),
    Recipe("mean-teacher", "Tarvainen & Valpola 2017, mean teacher (EMA teacher, consistency)", _mean_teacher),
    Recipe("swa", "Izmailov et al. 2018, SWA (AveragedModel, SWALR)", _swa),
    Recipe("gpt-decay-groups", "nanoGPT: weight decay on matrices only, label smoothing, clip 1.0",
           _gpt_weight_decay_groups),
    Recipe("uncertainty-multitask", "Kendall et al. 2018, learned task weights (log variances)",
           _uncertainty_multitask),
    Recipe("triplet", "Schroff et al. 2015, triplet margin loss", _triplet),
    Recipe("r-drop", "Liang et al. 2021, R-Drop (two dropout passes, symmetric KL)", _r_drop),
    Recipe("mixup", "Zhang et al. 2018, mixup", _mixup),
    Recipe("reduce-on-plateau", "torch ReduceLROnPlateau on the step's loss", _plateau),
]

# mypy: disable-error-code="no-untyped-call"
"""Self-supervised and contrastive recipes: SimCLR, BYOL, SimSiam, MoCo v2, DINO, Barlow Twins, VICReg,
an online linear probe, a masked autoencoder and CLIP. Stop-gradients and EMA targets are their method."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from gradviz_nb.bugzoo.recipes.kit import Recipe, Run, batch, cosine_loss, ema_update, frozen_copy, mlp

__all__ = ["SSL"]


def _views() -> tuple[Tensor, Tensor]:
    x, _ = batch()
    return x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)


def _simclr() -> Run:
    model = nn.Sequential(mlp(o=32), nn.ReLU(), nn.Linear(32, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    a, b = _views()

    def step() -> None:
        z = F.normalize(model(torch.cat([a, b])), dim=-1)
        sim = z @ z.T / 0.5
        sim = sim.masked_fill(torch.eye(len(z), dtype=torch.bool), float("-inf"))
        n = len(a)
        target = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
        opt.zero_grad()
        F.cross_entropy(sim, target).backward()
        opt.step()
    return Run(model, opt, step)


def _byol() -> Run:
    online = nn.ModuleDict({"enc": mlp(o=32), "proj": mlp(32, 32, 16), "pred": mlp(16, 32, 16)})
    target = nn.ModuleDict({"enc": frozen_copy(online["enc"]), "proj": frozen_copy(online["proj"])})
    model = nn.ModuleDict({"online": online, "target": target})
    opt = torch.optim.AdamW(online.parameters(), lr=1e-3)
    a, b = _views()

    def step() -> None:
        p1, p2 = (online["pred"](online["proj"](online["enc"](v))) for v in (a, b))
        with torch.no_grad():
            t1, t2 = (target["proj"](target["enc"](v)) for v in (a, b))
        loss = 2 + cosine_loss(p1, t2) + cosine_loss(p2, t1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema_update(target["enc"], online["enc"])
        ema_update(target["proj"], online["proj"])
    return Run(model, opt, step)


def _simsiam() -> Run:
    model = nn.ModuleDict({"enc": mlp(o=32), "pred": mlp(32, 16, 32)})
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    a, b = _views()

    def step() -> None:
        z1, z2 = model["enc"](a), model["enc"](b)
        p1, p2 = model["pred"](z1), model["pred"](z2)
        loss = cosine_loss(p1, z2.detach()) / 2 + cosine_loss(p2, z1.detach()) / 2  # stop-gradient: the method
        opt.zero_grad()
        loss.backward()
        opt.step()
    return Run(model, opt, step)


def _moco() -> Run:
    q_enc = mlp(o=16)
    model = nn.ModuleDict({"q": q_enc, "k": frozen_copy(q_enc)})
    model.register_buffer("queue", F.normalize(torch.randn(64, 16), dim=-1))
    opt = torch.optim.SGD(q_enc.parameters(), lr=0.03, momentum=0.9)
    a, b = _views()

    def step() -> None:
        q = F.normalize(model["q"](a), dim=-1)
        with torch.no_grad():
            ema_update(model["k"], model["q"], 0.999)
            k = F.normalize(model["k"](b), dim=-1)
        queue = model.get_buffer("queue")
        logits = torch.cat([(q * k).sum(-1, keepdim=True), q @ queue.T], dim=1) / 0.2
        opt.zero_grad()
        F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long)).backward()
        opt.step()
        with torch.no_grad():
            queue.copy_(torch.cat([k, queue])[: len(queue)])
    return Run(model, opt, step)


def _dino() -> Run:
    student = nn.Sequential(mlp(o=32), nn.GELU(), nn.Linear(32, 24))
    model = nn.ModuleDict({"student": student, "teacher": frozen_copy(student)})
    model.register_buffer("center", torch.zeros(24))
    opt = torch.optim.AdamW(student.parameters(), lr=5e-4, weight_decay=0.04)
    a, b = _views()

    def step() -> None:
        center = model.get_buffer("center")
        with torch.no_grad():
            t = [F.softmax((model["teacher"](v) - center) / 0.04, dim=-1) for v in (a, b)]
        s = [F.log_softmax(student(v) / 0.1, dim=-1) for v in (a, b)]
        loss = -((t[0] * s[1]).sum(-1).mean() + (t[1] * s[0]).sum(-1).mean()) / 2
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema_update(model["teacher"], student, 0.996)
        with torch.no_grad():
            center.mul_(0.9).add_(0.1 * torch.cat([model["teacher"](a), model["teacher"](b)]).mean(0))
    return Run(model, opt, step)


def _barlow_twins() -> Run:
    model = nn.Sequential(mlp(o=32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    a, b = _views()

    def step() -> None:
        za, zb = model(a), model(b)
        za, zb = (za - za.mean(0)) / za.std(0), (zb - zb.mean(0)) / zb.std(0)
        c = za.T @ zb / len(a)
        off = c - torch.diag(torch.diagonal(c))
        loss = (torch.diagonal(c) - 1).pow(2).sum() + 5e-3 * off.pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return Run(model, opt, step)


def _vicreg() -> Run:
    model = mlp(o=16, depth=3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    a, b = _views()

    def step() -> None:
        za, zb = model(a), model(b)
        inv = F.mse_loss(za, zb)
        var = sum(F.relu(1 - torch.sqrt(z.var(0) + 1e-4)).mean() for z in (za, zb))
        cov = sum(((z - z.mean(0)).T @ (z - z.mean(0)) / (len(z) - 1)).fill_diagonal_(0).pow(2).sum() / 16
                  for z in (za, zb))
        opt.zero_grad()
        (25 * inv + 25 * var + cov).backward()
        opt.step()
    return Run(model, opt, step)


def _online_probe() -> Run:
    model = nn.ModuleDict({"enc": mlp(o=32), "proj": mlp(32, 32, 16), "probe": nn.Linear(32, 4)})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    (a, b), (_, y) = _views(), batch()

    def step() -> None:
        ha, hb = model["enc"](a), model["enc"](b)
        ssl = cosine_loss(model["proj"](ha), model["proj"](hb))
        probe = F.cross_entropy(model["probe"](ha.detach()), y)  # the probe must not train the encoder
        opt.zero_grad()
        (ssl + probe).backward()
        opt.step()
    return Run(model, opt, step)


class _MAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.mask_token = nn.Linear(4, 16), nn.Parameter(torch.zeros(16))
        self.enc = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.dec = nn.Linear(16, 4)

    def forward(self, patches: Tensor, keep: Tensor) -> Tensor:
        h = self.embed(patches)
        h = torch.where(keep[..., None], h, self.mask_token.expand_as(h))
        out: Tensor = self.dec(self.enc(h))
        return out


def _mae() -> Run:
    model = _MAE()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    patches = torch.randn(4, 8, 4)
    keep = torch.rand(4, 8) > 0.75

    def step() -> None:
        loss = F.mse_loss(model(patches, keep)[~keep], patches[~keep])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return Run(model, opt, step)


def _clip() -> Run:
    model = nn.ModuleDict({"image": mlp(o=16), "text": nn.EmbeddingBag(50, 16)})
    model.register_parameter("logit_scale", nn.Parameter(torch.tensor(2.659)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, _ = batch(8)
    tokens = torch.randint(0, 50, (8, 6))

    def step() -> None:
        i = F.normalize(model["image"](x), dim=-1)
        t = F.normalize(model["text"](tokens), dim=-1)
        logits = model.get_parameter("logit_scale").exp() * i @ t.T
        labels = torch.arange(len(x))
        opt.zero_grad()
        ((F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2).backward()
        opt.step()
        with torch.no_grad():
            model.get_parameter("logit_scale").clamp_(0, 4.6052)
    return Run(model, opt, step)


SSL = [
    Recipe("simclr", "Chen et al. 2020, SimCLR (NT-Xent)", _simclr),
    Recipe("byol", "Grill et al. 2020, BYOL (EMA target, predictor)", _byol),
    Recipe("simsiam", "Chen & He 2021, SimSiam (stop-gradient)", _simsiam),
    Recipe("moco-v2", "He et al. 2020, MoCo v2 (momentum key encoder, queue)", _moco),
    Recipe("dino", "Caron et al. 2021, DINO (EMA teacher, centering)", _dino),
    Recipe("barlow-twins", "Zbontar et al. 2021, Barlow Twins", _barlow_twins),
    Recipe("vicreg", "Bardes et al. 2022, VICReg", _vicreg),
    Recipe("online-linear-probe", "solo-learn / lightly: online probe on detached features", _online_probe),
    Recipe("mae", "He et al. 2022, masked autoencoder (mask token)", _mae),
    Recipe("clip", "Radford et al. 2021, CLIP (learnable temperature, clamped)", _clip),
]


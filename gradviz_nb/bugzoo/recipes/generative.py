# mypy: disable-error-code="no-untyped-call"
"""Generative and parameter-efficient recipes: VQ-VAE (straight-through), Gumbel-softmax, DDPM (with and
without an EMA of the weights), top-k mixture of experts, and adapters whose zero initialisation is their
method (hand-written LoRA, bottleneck adapters, prompt tuning, BitFit)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from gradviz_nb.bugzoo.recipes.kit import IN, OUT, Recipe, Run, batch, mlp

__all__ = ["GENERATIVE"]


class _VQVAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec, self.codebook = mlp(o=8), mlp(8, 32, IN), nn.Embedding(16, 8)

    def forward(self, x: Tensor) -> Tensor:
        z = self.enc(x)
        zq = self.codebook(torch.cdist(z, self.codebook.weight).argmin(-1))
        self.vq = F.mse_loss(zq, z.detach()) + 0.25 * F.mse_loss(z, zq.detach())
        out: Tensor = self.dec(z + (zq - z).detach())  # straight-through estimator
        return out


def _vqvae() -> Run:
    model = _VQVAE()
    opt = torch.optim.Adam(model.parameters(), lr=2e-4)
    x, _ = batch(32)

    def step() -> None:
        loss = F.mse_loss(model(x), x) + model.vq
        opt.zero_grad()
        loss.backward()
        opt.step()
    return Run(model, opt, step)


def _gumbel() -> Run:
    model = nn.ModuleDict({"enc": mlp(o=10), "dec": mlp(10, 32, IN)})
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, _ = batch()

    def step() -> None:
        code = F.gumbel_softmax(model["enc"](x), tau=0.5, hard=True)
        opt.zero_grad()
        F.mse_loss(model["dec"](code), x).backward()
        opt.step()
    return Run(model, opt, step)


class _Denoiser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.time = nn.Sequential(nn.Linear(8, 32), nn.SiLU(), nn.Linear(32, 32))
        self.inp, self.out = nn.Linear(IN, 32), nn.Sequential(nn.SiLU(), nn.Linear(32, IN))

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        freqs = torch.exp(-math.log(1000) * torch.arange(4) / 4)
        emb = torch.cat([torch.sin(t[:, None] * freqs), torch.cos(t[:, None] * freqs)], -1)
        out: Tensor = self.out(self.inp(x) + self.time(emb))
        return out


def _ddpm_loss(model: nn.Module, x0: Tensor, bars: Tensor) -> Tensor:
    t = torch.randint(0, len(bars), (len(x0),))
    noise = torch.randn_like(x0)
    a = bars[t][:, None]
    return F.mse_loss(model(a.sqrt() * x0 + (1 - a).sqrt() * noise, t.float()), noise)


def _ddpm() -> Run:
    model = _Denoiser()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4)
    x0, _ = batch(32)
    bars = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 100), 0)

    def step() -> None:
        opt.zero_grad()
        _ddpm_loss(model, x0, bars).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return Run(model, opt, step)


def _ddpm_ema() -> Run:
    net = _Denoiser()
    ema = torch.optim.swa_utils.AveragedModel(net, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.999))
    model = nn.ModuleDict({"net": net, "ema": ema})
    opt = torch.optim.AdamW(net.parameters(), lr=2e-4)
    x0, _ = batch(32)
    bars = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 100), 0)

    def step() -> None:
        opt.zero_grad()
        _ddpm_loss(net, x0, bars).backward()
        opt.step()
        ema.update_parameters(net)
    return Run(model, opt, step)


class _TopK(nn.Module):
    """Switch / GShard style: a router picks the top 2 of 4 experts per token; a load-balancing loss."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(IN, 4)
        self.experts = nn.ModuleList(mlp(o=IN) for _ in range(4))
        self.head = nn.Linear(IN, OUT)

    def forward(self, x: Tensor) -> Tensor:
        probs = self.router(x).softmax(-1)
        w, idx = probs.topk(2, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if len(rows):
                out = out.index_add(0, rows, w[rows, slot, None] * expert(x[rows]))
        load = F.one_hot(idx[:, 0], 4).float().mean(0)
        self.aux = 4 * (load * probs.mean(0)).sum()
        y: Tensor = self.head(out + x)
        return y


def _moe() -> Run:
    model = _TopK()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = batch(32)

    def step() -> None:
        logits = model(x)
        opt.zero_grad()
        (F.cross_entropy(logits, y) + 0.01 * model.aux).backward()
        opt.step()
    return Run(model, opt, step)


class _LowRank(nn.Module):
    """A hand-written LoRA: down starts random, up starts at zero (so down's first gradient is zero)."""

    def __init__(self, base: nn.Linear, r: int = 4) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.down = nn.Parameter(torch.randn(r, base.in_features) / r)
        self.up = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.base(x) + 2.0 * (x @ self.down.T) @ self.up.T
        return out


def _hand_lora() -> Run:
    model = nn.Sequential(_LowRank(nn.Linear(IN, 32)), nn.ReLU(), _LowRank(nn.Linear(32, OUT)))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    x, y = batch()

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return Run(model, opt, step)


class _Adapted(nn.Module):
    """Houlsby et al.: a bottleneck adapter after a frozen layer, its up-projection initialised to zero."""

    def __init__(self, base: nn.Module, dim: int) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.adapter_down, self.adapter_up = nn.Linear(dim, 4), nn.Linear(4, dim)
        nn.init.zeros_(self.adapter_up.weight)
        nn.init.zeros_(self.adapter_up.bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.base(x)
        out: Tensor = h + self.adapter_up(F.gelu(self.adapter_down(h)))
        return out


def _bottleneck_adapter() -> Run:
    model = nn.Sequential(_Adapted(nn.Sequential(nn.Linear(IN, 32), nn.ReLU()), 32), nn.Linear(32, OUT))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    x, y = batch()

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return Run(model, opt, step)


class _Prompted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(40, 16).requires_grad_(False)
        self.body = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).requires_grad_(False)
        self.prompt = nn.Parameter(torch.randn(4, 16) * 0.02)
        self.head = nn.Linear(16, OUT)

    def forward(self, ids: Tensor) -> Tensor:
        h = torch.cat([self.prompt.expand(len(ids), -1, -1), self.embed(ids)], dim=1)
        out: Tensor = self.head(self.body(h)[:, 0])
        return out


def _prompt_tuning() -> Run:
    model = _Prompted()
    opt = torch.optim.AdamW([model.prompt, *model.head.parameters()], lr=1e-3)
    ids, y = torch.randint(0, 40, (8, 6)), torch.randint(0, OUT, (8,))

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(ids), y).backward()
        opt.step()
    return Run(model, opt, step)


def _bitfit() -> Run:
    model = mlp(depth=3)
    for n, p in model.named_parameters():
        p.requires_grad_(n.endswith("bias"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    x, y = batch()

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return Run(model, opt, step)


GENERATIVE = [
    Recipe("vq-vae", "van den Oord et al. 2017, VQ-VAE (straight-through, codebook and commitment losses)", _vqvae),
    Recipe("gumbel-softmax", "Jang et al. 2017, straight-through Gumbel-softmax", _gumbel),
    Recipe("ddpm", "Ho et al. 2020, DDPM noise prediction (clip_grad_norm_ 1.0)", _ddpm),
    Recipe("ddpm-ema", "diffusers / Karras et al.: EMA of the weights (torch.optim.swa_utils.AveragedModel)",
           _ddpm_ema),
    Recipe("top-k-moe", "Fedus et al. 2021 / GShard: top-2 routing with a load-balancing loss", _moe),
    Recipe("hand-written-lora", "Hu et al. 2021, LoRA written by hand (up-projection zero at init)", _hand_lora),
    Recipe("bottleneck-adapter", "Houlsby et al. 2019, adapters (zero-initialised up-projection)",
           _bottleneck_adapter),
    Recipe("prompt-tuning", "Lester et al. 2021, prompt tuning (frozen backbone)", _prompt_tuning),
    Recipe("bitfit", "Ben Zaken et al. 2022, BitFit (biases only)", _bitfit),
]

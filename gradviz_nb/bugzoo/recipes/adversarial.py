# mypy: disable-error-code="no-untyped-call"
"""Adversarial, distillation and reinforcement-learning recipes: several optimizers each zeroing their own
gradients, inputs perturbed by their own gradient, a gradient-reversal layer, frozen teachers, and policy
gradients with detached advantages and targets."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from gradviz_nb.bugzoo.recipes.kit import IN, Recipe, Run, batch, frozen_copy, mlp

__all__ = ["ADVERSARIAL"]


def _gan() -> Run:
    model = nn.ModuleDict({"G": mlp(8, 32, IN), "D": mlp(IN, 32, 1)})
    opt_g = torch.optim.Adam(model["G"].parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(model["D"].parameters(), lr=2e-4, betas=(0.5, 0.999))
    real, _ = batch()
    ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)

    def step() -> None:
        fake = model["G"](torch.randn(len(real), 8))
        opt_d.zero_grad()
        d_loss = (F.binary_cross_entropy_with_logits(model["D"](real), ones)
                  + F.binary_cross_entropy_with_logits(model["D"](fake.detach()), zeros))
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        F.binary_cross_entropy_with_logits(model["D"](fake), ones).backward()
        opt_g.step()
    return Run(model, opt_g, step)


def _wgan_gp() -> Run:
    model = nn.ModuleDict({"G": mlp(8, 32, IN), "D": mlp(IN, 32, 1)})
    opt_g = torch.optim.Adam(model["G"].parameters(), lr=1e-4, betas=(0.0, 0.9))
    opt_d = torch.optim.Adam(model["D"].parameters(), lr=1e-4, betas=(0.0, 0.9))
    real, _ = batch()

    def step() -> None:
        for _ in range(2):  # n_critic
            fake = model["G"](torch.randn(len(real), 8)).detach()
            eps = torch.rand(len(real), 1)
            mid = (eps * real + (1 - eps) * fake).requires_grad_(True)
            (g,) = torch.autograd.grad(model["D"](mid).sum(), mid, create_graph=True)
            gp = ((g.norm(dim=1) - 1) ** 2).mean()
            opt_d.zero_grad()
            (model["D"](fake).mean() - model["D"](real).mean() + 10 * gp).backward()
            opt_d.step()
        opt_g.zero_grad()
        (-model["D"](model["G"](torch.randn(len(real), 8))).mean()).backward()
        opt_g.step()
    return Run(model, opt_g, step)


def _fgsm_training() -> Run:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = batch()

    def step() -> None:
        xa = x.clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(F.cross_entropy(model(xa), y), xa)
        x_adv = (x + 0.1 * gx.sign()).detach()
        opt.zero_grad()
        (0.5 * F.cross_entropy(model(x), y) + 0.5 * F.cross_entropy(model(x_adv), y)).backward()
        opt.step()
    return Run(model, opt, step)


class _Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, lam: float) -> Tensor:
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        return -ctx.lam * g, None


def _dann() -> Run:
    model = nn.ModuleDict({"feat": mlp(o=32), "label": nn.Linear(32, 4), "domain": mlp(32, 16, 2)})
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    (xs, ys), (xt, _) = batch(), batch()
    domain = torch.cat([torch.zeros(len(xs)), torch.ones(len(xt))]).long()

    def step() -> None:
        fs, ft = model["feat"](xs), model["feat"](xt)
        rev = _Reverse.apply(torch.cat([fs, ft]), 0.3)
        loss = F.cross_entropy(model["label"](fs), ys) + F.cross_entropy(model["domain"](rev), domain)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return Run(model, opt, step)


def _distillation() -> Run:
    teacher = mlp(h=64, depth=3)
    teacher.eval()
    model = nn.ModuleDict({"student": mlp(h=16), "teacher": frozen_copy(teacher)})
    opt = torch.optim.AdamW(model["student"].parameters(), lr=1e-3)
    x, y = batch()

    def step() -> None:
        with torch.no_grad():
            t = model["teacher"](x)
        s = model["student"](x)
        kd = F.kl_div(F.log_softmax(s / 4, -1), F.softmax(t / 4, -1), reduction="batchmean") * 16
        opt.zero_grad()
        (0.9 * kd + 0.1 * F.cross_entropy(s, y)).backward()
        opt.step()
    return Run(model, opt, step)


def _fitnets() -> Run:
    teacher = mlp(o=32, h=64)
    model = nn.ModuleDict({"student": mlp(o=16, h=16), "regressor": nn.Linear(16, 32), "head": nn.Linear(16, 4),
                           "teacher": frozen_copy(teacher)})
    model["teacher"].eval()
    opt = torch.optim.AdamW([p for k, m in model.items() if k != "teacher" for p in m.parameters()], lr=1e-3)
    x, y = batch()

    def step() -> None:
        with torch.no_grad():
            hint = model["teacher"](x)
        h = model["student"](x)
        loss = F.mse_loss(model["regressor"](h), hint) + F.cross_entropy(model["head"](h), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return Run(model, opt, step)


def _returns(r: Tensor, gamma: float = 0.99) -> Tensor:
    out, acc = torch.zeros_like(r), torch.zeros(())
    for t in reversed(range(len(r))):
        acc = r[t] + gamma * acc
        out[t] = acc
    return out


def _reinforce() -> Run:
    model = nn.ModuleDict({"policy": mlp(o=3), "baseline": mlp(o=1)})
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    states, rewards = torch.randn(12, IN), torch.randn(12)

    def step() -> None:
        dist = torch.distributions.Categorical(logits=model["policy"](states))
        actions = dist.sample()
        value = model["baseline"](states).squeeze(-1)
        ret = _returns(rewards)
        advantage = (ret - value).detach()
        loss = -(dist.log_prob(actions) * advantage).mean() + F.mse_loss(value, ret)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return Run(model, opt, step)


def _a2c() -> Run:
    model = nn.ModuleDict({"trunk": mlp(o=32), "pi": nn.Linear(32, 3), "v": nn.Linear(32, 1)})
    opt = torch.optim.RMSprop(model.parameters(), lr=7e-4, alpha=0.99, eps=1e-5)
    states, next_states, rewards = torch.randn(12, IN), torch.randn(12, IN), torch.randn(12)

    def step() -> None:
        h = model["trunk"](states)
        dist = torch.distributions.Categorical(logits=model["pi"](h))
        a = dist.sample()
        v = model["v"](h).squeeze(-1)
        with torch.no_grad():
            target = rewards + 0.99 * model["v"](model["trunk"](next_states)).squeeze(-1)
        adv = target - v.detach()
        loss = -(dist.log_prob(a) * adv).mean() + 0.5 * F.mse_loss(v, target) - 0.01 * dist.entropy().mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    return Run(model, opt, step)


def _ppo() -> Run:
    model = nn.ModuleDict({"pi": mlp(o=3), "v": mlp(o=1)})
    opt = torch.optim.Adam(model.parameters(), lr=3e-4, eps=1e-5)
    states, returns = torch.randn(16, IN), torch.randn(16)
    with torch.no_grad():
        old = torch.distributions.Categorical(logits=model["pi"](states))
        actions = old.sample()
        old_logp = old.log_prob(actions)
        adv = returns - model["v"](states).squeeze(-1)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)

    def step() -> None:
        dist = torch.distributions.Categorical(logits=model["pi"](states))
        ratio = (dist.log_prob(actions) - old_logp).exp()
        pg = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
        loss = pg + 0.5 * F.mse_loss(model["v"](states).squeeze(-1), returns) - 0.01 * dist.entropy().mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    return Run(model, opt, step)


def _dqn() -> Run:
    q = mlp(o=3)
    model = nn.ModuleDict({"q": q, "target": frozen_copy(q)})
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    s, s2, r = torch.randn(16, IN), torch.randn(16, IN), torch.randn(16)
    a, done = torch.randint(0, 3, (16,)), (torch.rand(16) < 0.1).float()

    def step() -> None:
        with torch.no_grad():
            target = r + 0.99 * (1 - done) * model["target"](s2).max(-1).values
        pred = q(s).gather(1, a[:, None]).squeeze(1)
        opt.zero_grad()
        F.smooth_l1_loss(pred, target).backward()
        torch.nn.utils.clip_grad_norm_(q.parameters(), 10.0)
        opt.step()
    return Run(model, opt, step)


ADVERSARIAL = [
    Recipe("gan", "Radford et al. 2016, DCGAN training loop (two optimizers, fake.detach() for D)", _gan),
    Recipe("wgan-gp", "Gulrajani et al. 2017, WGAN-GP (n_critic, gradient penalty, create_graph)", _wgan_gp),
    Recipe("fgsm-adversarial-training", "Goodfellow et al. 2015, adversarial training with FGSM", _fgsm_training),
    Recipe("dann", "Ganin & Lempitsky 2015, gradient reversal layer (DANN)", _dann),
    Recipe("knowledge-distillation", "Hinton et al. 2015, distillation with temperature", _distillation),
    Recipe("fitnets", "Romero et al. 2015, FitNets hint regression", _fitnets),
    Recipe("reinforce-baseline", "Williams 1992, REINFORCE with a learned baseline (detached advantage)",
           _reinforce),
    Recipe("a2c", "Mnih et al. 2016 / Stable-Baselines3 A2C (shared trunk, bootstrapped target)", _a2c),
    Recipe("ppo", "Schulman et al. 2017 / CleanRL PPO clipped objective", _ppo),
    Recipe("dqn", "Mnih et al. 2015, DQN with a target network", _dqn),
]

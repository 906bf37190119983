"""The host models mutants are planted in: small, ordinary training setups.

Each host builder returns a :class:`Host`: a model, the optimizer a user would build for it, one batch,
and the forward and loss split in two (``forward`` gives the prediction, ``criterion`` the loss, with any
auxiliary term kept on a module), so the step closure in :mod:`.plan` reads like a normal training loop.
Builders draw every initial value from torch's global RNG: seed it and two builds are bit-identical.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["HOSTS", "Host"]

Batch = tuple[Tensor, Tensor]


@dataclass
class Host:
    """``relu_fed``: module paths whose output goes straight into a ReLU (dead-ReLU sites);
    ``lora``: whether the model carries peft LoRA adapters."""

    name: str
    model: nn.Module
    batch: Batch
    forward: Callable[[nn.Module, Tensor], Tensor]
    criterion: Callable[[nn.Module, Tensor, Tensor], Tensor]
    make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer]
    relu_fed: tuple[str, ...] = ()
    lora: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _call(model: nn.Module, x: Tensor) -> Tensor:
    out: Tensor = model(x)
    return out


def _ce(model: nn.Module, pred: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(pred.flatten(0, -2), y.flatten())


def _sgd(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _adam(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3)


def _adamw(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-3)


def _data(*shape: int, classes: int = 0) -> Tensor:
    gen = torch.Generator().manual_seed(7 + sum(shape))
    if classes:
        return torch.randint(0, classes, shape, generator=gen)
    return torch.randn(*shape, generator=gen)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 32)])
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(32, 4)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = self.drop(self.act(layer(x)))
        out: Tensor = self.head(x)
        return out


def mlp() -> Host:
    return Host("mlp", MLP(), (_data(16, 16), _data(16, classes=4)), _call, _ce, _sgd,
                relu_fed=("layers.0", "layers.1", "layers.2"))


def cnn() -> Host:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    return Host("cnn", model, (_data(8, 3, 8, 8), _data(8, classes=5)), _call, _ce, _sgd, relu_fed=("1", "4"))


class GRUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(30, 16)
        self.rnn = nn.GRU(16, 24, batch_first=True)
        self.proj = nn.Linear(24, 24)
        self.head = nn.Linear(24, 30)

    def forward(self, ids: Tensor) -> Tensor:
        h, _ = self.rnn(self.embed(ids))
        out: Tensor = self.head(torch.tanh(self.proj(h)))
        return out


def gru() -> Host:
    ids = _data(4, 10, classes=30)
    return Host("gru", GRUNet(), (ids, ids.roll(-1, dims=1)), _call, _ce, _adam)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        out: Tensor = self.out(y)
        return out


class ViTBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2 = nn.LayerNorm(d), Attention(d, 2), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Dropout(0.1), nn.Linear(2 * d, d))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        out: Tensor = x + self.mlp(self.norm2(x))
        return out


class TinyViT(nn.Module):
    def __init__(self, d: int = 24, patch: int = 4) -> None:
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(3 * patch * patch, d)
        self.pos = nn.Parameter(torch.randn(1, 4, d) * 0.02)
        self.blocks = nn.ModuleList([ViTBlock(d), ViTBlock(d)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 5)

    def forward(self, img: Tensor) -> Tensor:
        p = self.patch
        x = img.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2)
        x = self.embed(x) + self.pos
        for block in self.blocks:
            x = block(x)
        out: Tensor = self.head(self.norm(x).mean(1))
        return out


def vit() -> Host:
    return Host("vit", TinyViT(), (_data(6, 3, 8, 8), _data(6, classes=5)), _call, _ce, _adamw)


def gpt() -> Host:
    from gradviz_nb.demo_models import GPT2, GPT2Config

    model = GPT2(GPT2Config(n_layer=2, n_head=2, d_model=32, vocab=61, block_size=16, dropout=0.1))
    ids = _data(4, 12, classes=61)
    return Host("gpt", model, (ids, ids.roll(-1, dims=1)), _call, _ce, _adamw)


def _hf_forward(model: nn.Module, ids: Tensor) -> Tensor:
    logits: Tensor = model(input_ids=ids).logits
    return logits


def hf_lora() -> Host:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import peft
    import transformers

    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=61, n_positions=16,
                                     bos_token_id=0, eos_token_id=0)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_fc"], lora_dropout=0.0,
                           fan_in_fan_out=True)
    model = peft.get_peft_model(transformers.GPT2LMHeadModel(config), lora)
    ids = _data(4, 12, classes=61)

    def optimizer(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.AdamW([p for p in params if p.requires_grad], lr=1e-3)

    return Host("hf-lora", model, (ids, ids.roll(-1, dims=1)), _hf_forward, _ce, optimizer, lora=True)


class MoE(nn.Module):
    """Soft top-2 routing over four experts; the load-balancing loss of the last call is kept as ``aux``."""

    def __init__(self, d: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, d))
                                      for _ in range(experts)])
        self.aux = torch.zeros(())

    def forward(self, x: Tensor) -> Tensor:
        probs = self.router(x).softmax(-1)
        top, idx = probs.topk(2, dim=-1)
        gate = torch.zeros_like(probs).scatter(-1, idx, top)
        out = torch.stack([e(x) for e in self.experts], -1)
        self.aux = len(self.experts) * (probs.mean(0) * (gate > 0).float().mean(0)).sum()
        y: Tensor = (out * gate.unsqueeze(-2)).sum(-1)
        return y


class MoENet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.moe, self.head = nn.Linear(12, 16), MoE(), nn.Linear(16, 3)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(self.moe(torch.relu(self.inp(x))))
        return out


def _moe_loss(model: nn.Module, pred: Tensor, y: Tensor) -> Tensor:
    aux = model.get_submodule("moe").aux
    assert isinstance(aux, Tensor)
    return F.cross_entropy(pred, y) + 0.01 * aux


def moe() -> Host:
    return Host("moe", MoENet(), (_data(16, 12), _data(16, classes=3)), _call, _moe_loss, _adam, relu_fed=("inp",))


class AutoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 12), nn.ReLU(), nn.Linear(12, 4))
        self.decoder = nn.Sequential(nn.Linear(4, 12), nn.ReLU(), nn.Linear(12, 20))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.decoder(self.encoder(x))
        return out


def _mse(model: nn.Module, pred: Tensor, y: Tensor) -> Tensor:
    return F.mse_loss(pred, y)


def autoencoder() -> Host:
    x = _data(16, 20)
    return Host("autoencoder", AutoEncoder(), (x, x.clone()), _call, _mse, _sgd,
                relu_fed=("encoder.0", "decoder.0"))


HOSTS: dict[str, Callable[[], Host]] = {
    "mlp": mlp, "cnn": cnn, "gru": gru, "vit": vit, "gpt": gpt, "hf-lora": hf_lora, "moe": moe,
    "autoencoder": autoencoder,
}

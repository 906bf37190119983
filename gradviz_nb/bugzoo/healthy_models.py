"""More healthy models for :mod:`gradviz_nb.bugzoo.cases_healthy`: the choices a careful user makes on
purpose (a frozen backbone left out of the optimizer, LoRA at initialisation, sparse embeddings, low
precision weights, clipping), each of which a careless tool mistakes for a bug.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from gradviz_nb.bugzoo.healthy import Healthy
from gradviz_nb.bugzoo.mutants import hosts
from gradviz_nb.tracing import typed_torch

__all__ = ["MODELS"]


def _from_host(make: hosts.Host) -> Healthy:
    """A mutant host as written, unmutated: its own optimizer, one batch."""
    model, (x, y) = make.model, make.batch
    return Healthy(model, lambda: make.criterion(model, make.forward(model, x), y), optimizer=make.make_optimizer)


class LSTMClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.rnn, self.head = nn.Embedding(50, 16), nn.LSTM(16, 32, batch_first=True), nn.Linear(32, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(ids))
        logits: torch.Tensor = self.head(out[:, -1])
        return logits


def lstm() -> Healthy:
    model = LSTMClassifier()
    ids, y = torch.randint(0, 50, (8, 10)), torch.randint(0, 3, (8,))
    return Healthy(model, lambda: F.cross_entropy(model(ids), y))


class SkipGram(nn.Module):
    """word2vec's two sparse embedding tables: only the rows a batch touches get a gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.center, self.context = nn.Embedding(200, 16, sparse=True), nn.Embedding(200, 16, sparse=True)

    def forward(self, center: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        score: torch.Tensor = (self.center(center) * self.context(context)).sum(-1)
        return score


def sparse_embeddings() -> Healthy:
    model = SkipGram()
    center, context = torch.randint(0, 200, (64,)), torch.randint(0, 200, (64,))
    label = torch.randint(0, 2, (64,)).float()
    return Healthy(model, lambda: F.binary_cross_entropy_with_logits(model(center, context), label),
                   optimizer=lambda ps: torch.optim.SparseAdam(ps, lr=1e-2))


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.mix, self.head = nn.Embedding(60, 24), nn.Linear(24, 24), nn.Linear(24, 60, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.head(torch.tanh(self.mix(self.embed(ids))))
        return logits


def tied_weights() -> Healthy:
    model = TiedLM()
    ids = torch.randint(0, 60, (4, 12))
    return Healthy(model, lambda: F.cross_entropy(model(ids).flatten(0, 1), ids.roll(-1, 1).flatten()))


def frozen_backbone() -> Healthy:
    """Fine-tuning a head: the backbone is frozen on purpose and left out of the optimizer."""
    backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
    model = nn.Sequential(backbone, nn.Linear(32, 4))
    backbone.requires_grad_(False)
    x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))
    return Healthy(model, lambda: F.cross_entropy(model(x), y),
                   optimizer=lambda ps: torch.optim.AdamW(model[1].parameters(), lr=1e-3))


def demo_lora_at_init() -> Healthy:
    """The demo GPT-2 with LoRA adapters as built: B is zero, so A's first gradient is exactly zero."""
    from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss

    model = GPT2(GPT2Config(n_layer=2, n_head=2, d_model=32, vocab=61, block_size=16))
    add_lora(model)
    return Healthy(model, lambda: gpt2_loss(model, batch=2, seq=12))


def _low_precision(dtype: torch.dtype) -> Healthy:
    """Weights stored in ``dtype``. fp16 trains with SGD: AdamW's eps=1e-8 is 0 in fp16, so its first step
    divides 0 by 0 wherever a gradient is exactly zero (a real bug, not a healthy model)."""
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4)).to(dtype)
    x, y = torch.randn(32, 32, dtype=dtype), torch.randint(0, 4, (32,))
    sgd = (lambda ps: torch.optim.SGD(ps, lr=1e-2)) if dtype == torch.float16 else None
    return Healthy(model, lambda: F.cross_entropy(model(x).float(), y), optimizer=sgd)


def clipped() -> Healthy:
    """clip_grad_norm_ after every backward, as most training loops do."""
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
    x, y = torch.randn(32, 16), torch.randint(0, 2, (32,))

    def backward(loss: torch.Tensor) -> None:
        typed_torch.backward(loss)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)

    return Healthy(model, lambda: F.cross_entropy(model(x), y), backward)


MODELS = [
    ("healthy-lstm", lstm, ()),
    ("healthy-gru", lambda: _from_host(hosts.gru()), ()),
    ("healthy-sparse-embeddings", sparse_embeddings, ()),
    ("healthy-tied-weights", tied_weights, ()),
    ("healthy-moe-aux-loss", lambda: _from_host(hosts.moe()), ()),
    ("healthy-frozen-backbone", frozen_backbone, ()),
    ("healthy-demo-lora-at-init", demo_lora_at_init, ()),
    ("healthy-bf16-weights", lambda: _low_precision(torch.bfloat16), ()),
    ("healthy-fp16-weights", lambda: _low_precision(torch.float16), ()),
    ("healthy-grad-clipping", clipped, ()),
    ("healthy-tiny-vit", lambda: _from_host(hosts.vit()), ()),
    ("healthy-autoencoder", lambda: _from_host(hosts.autoencoder()), ()),
]

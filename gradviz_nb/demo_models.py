"""Small plain-PyTorch models used by the notebooks, tests and benchmarks.

Nothing here depends on the rest of :mod:`gradviz_nb`; these are ordinary ``nn.Module`` s
whose autograd graphs exercise the interesting cases: tied weights (:class:`GPT2`),
activation checkpointing (``GPT2Config.checkpoint``), fused attention
(``F.scaled_dot_product_attention``), ``nn.MultiheadAttention`` (:class:`MHAModel`),
BatchNorm and residual adds (:class:`ResNet18Like`), and a submodule called twice plus
functional ops inside ``forward`` (:class:`TwiceCalled`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

__all__ = [
    "GPT2",
    "GPT2MLP",
    "MLP",
    "BasicBlock",
    "Block",
    "CausalSelfAttention",
    "CheckpointMode",
    "GPT2Config",
    "LoRALinear",
    "MHAModel",
    "ResNet18Like",
    "TwiceCalled",
    "add_lora",
    "gpt2_loss",
]

CheckpointMode = Literal["reentrant", "non_reentrant"]


class MLP(nn.Module):
    """Two-layer perceptron ``d_in -> d_hidden -> d_out`` with a ReLU in between."""

    def __init__(self, d_in: int = 4, d_hidden: int = 8, d_out: int = 3) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: Tensor) -> Tensor:
        """Map ``(..., d_in)`` to ``(..., d_out)``."""
        out: Tensor = self.fc2(self.act(self.fc1(x)))
        return out


# --------------------------------------------------------------------------------------
# GPT-2
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPT2Config:
    """Hyper-parameters of :class:`GPT2`. The defaults are the 124M-parameter GPT-2.

    ``checkpoint`` selects activation checkpointing of every block: ``None`` (off),
    ``"reentrant"`` or ``"non_reentrant"`` (``torch.utils.checkpoint.checkpoint`` with
    ``use_reentrant`` set accordingly).
    """

    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    vocab: int = 50257
    block_size: int = 1024
    dropout: float = 0.0
    bias: bool = True
    checkpoint: CheckpointMode | None = None

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.checkpoint not in (None, "reentrant", "non_reentrant"):
            raise ValueError(f"checkpoint must be None, 'reentrant' or 'non_reentrant', got {self.checkpoint!r}")

    @classmethod
    def small_test(cls, checkpoint: CheckpointMode | None = None) -> GPT2Config:
        """A tiny configuration (2 layers, width 32, vocab 101) for fast tests."""
        return cls(
            n_layer=2,
            n_head=4,
            d_model=32,
            vocab=101,
            block_size=16,
            checkpoint=checkpoint,
        )

    def with_checkpoint(self, checkpoint: CheckpointMode | None) -> GPT2Config:
        """Return a copy of this configuration with another checkpoint mode."""
        return replace(self, checkpoint=checkpoint)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused ``c_attn`` projection to q, k, v."""

    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.d_model = cfg.d_model
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """Attend causally over ``x`` of shape ``(batch, seq, d_model)``."""
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(self.d_model, dim=2)
        hd = c // self.n_head
        q = q.view(b, t, self.n_head, hd).transpose(1, 2)
        k = k.view(b, t, self.n_head, hd).transpose(1, 2)
        v = v.view(b, t, self.n_head, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        out: Tensor = self.resid_dropout(self.c_proj(y))
        return out


class GPT2MLP(nn.Module):
    """The transformer feed-forward block: ``c_fc`` (4x wider), GELU (tanh), ``c_proj``."""

    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=cfg.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the feed-forward block position-wise."""
        out: Tensor = self.dropout(self.c_proj(self.gelu(self.c_fc(x))))
        return out


class Block(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))``."""

    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block to ``(batch, seq, d_model)``."""
        x = x + self.attn(self.ln_1(x))
        out: Tensor = x + self.mlp(self.ln_2(x))
        return out


class GPT2(nn.Module):
    """GPT-2 in plain PyTorch, with ``lm_head.weight`` tied to ``wte.weight``.

    ``forward(idx)`` returns logits ``(batch, seq, vocab)``; ``forward(idx, targets)``
    returns ``(logits, loss)`` with the mean cross-entropy over all positions.

    Example::

        >>> model = GPT2(GPT2Config.small_test())
        >>> model(torch.zeros(1, 5, dtype=torch.long)).shape
        torch.Size([1, 5, 101])
    """

    def __init__(self, cfg: GPT2Config | None = None) -> None:
        super().__init__()
        self.config = cfg = cfg if cfg is not None else GPT2Config()
        self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.block_size, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_parameters(self) -> int:
        """Number of distinct parameters (the tied weight is counted once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """Return logits, or ``(logits, loss)`` when ``targets`` is given."""
        _, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.config.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        mode = self.config.checkpoint
        for block in self.blocks:
            x = block(x) if mode is None else checkpoint(block, x, use_reentrant=mode == "reentrant")
        logits: Tensor = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def gpt2_loss(model: GPT2, batch: int = 1, seq: int = 16, seed: int = 0) -> Tensor:
    """Run ``model`` on deterministic random tokens and return the scalar loss.

    The tokens come from a private ``torch.Generator`` seeded with ``seed``, so the global
    RNG is left untouched.

    Example::

        >>> model = GPT2(GPT2Config.small_test())
        >>> gpt2_loss(model, batch=2, seq=8).shape
        torch.Size([])
    """
    cfg = model.config
    if seq > cfg.block_size:
        raise ValueError(f"seq={seq} exceeds block_size={cfg.block_size}")
    gen = torch.Generator().manual_seed(seed)
    device = model.wte.weight.device
    idx = torch.randint(0, cfg.vocab, (batch, seq), generator=gen).to(device)
    targets = torch.randint(0, cfg.vocab, (batch, seq), generator=gen).to(device)
    out = model(idx, targets)
    assert isinstance(out, tuple), "GPT2.forward with targets returns (logits, loss)"
    loss: Tensor = out[1]
    return loss


# --------------------------------------------------------------------------------------
# ResNet-18
# --------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv/BN layers and a (possibly projected) shortcut."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block to ``(batch, in_planes, h, w)``."""
        h = self.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        out: Tensor = self.relu(h + self.shortcut(x))
        return out


class ResNet18Like(nn.Module):
    """A CIFAR-style ResNet-18: 3x3 stem, ``BasicBlock`` x [2, 2, 2, 2], global pooling.

    Works for any input of shape ``(batch, 3, H, W)`` with ``H, W >= 8`` (e.g. 32x32 or 64x64).
    """

    def __init__(self, num_classes: int = 10, width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        planes = [width, 2 * width, 4 * width, 8 * width]
        in_planes = width
        layers: list[nn.Sequential] = []
        for i, p in enumerate(planes):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(in_planes, p, stride), BasicBlock(p, p, 1)))
            in_planes = p
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Return class logits ``(batch, num_classes)``."""
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        out: Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return out


# --------------------------------------------------------------------------------------
# Small models for edge cases
# --------------------------------------------------------------------------------------


class MHAModel(nn.Module):
    """``nn.MultiheadAttention`` (self-attention, batch first) followed by a Linear head."""

    def __init__(self, d_model: int = 8, n_head: int = 2, d_out: int = 3) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_head, batch_first=True)
        self.head = nn.Linear(d_model, d_out)

    def forward(self, x: Tensor) -> Tensor:
        """Map ``(batch, seq, d_model)`` to ``(batch, seq, d_out)``."""
        y, _ = self.attn(x, x, x, need_weights=False)
        out: Tensor = self.head(y)
        return out


class TwiceCalled(nn.Module):
    """Calls the same ``block`` twice and uses functional ops inside ``forward``.

    ``forward(x) = head(tanh(block(relu(block(x)))))``: ``block``'s parameters get two
    gradient contributions, and ``relu``/``tanh`` belong to no submodule (top level).
    """

    def __init__(self, d: int = 4, d_out: int = 2) -> None:
        super().__init__()
        self.block = nn.Linear(d, d)
        self.head = nn.Linear(d, d_out)

    def forward(self, x: Tensor) -> Tensor:
        """Map ``(..., d)`` to ``(..., d_out)``."""
        h = F.relu(self.block(x))
        h = torch.tanh(self.block(h))
        out: Tensor = self.head(h)
        return out


# --------------------------------------------------------------------------------------
# LoRA adapters
# --------------------------------------------------------------------------------------


class LoRALinear(nn.Module):
    """``base(x) + scale * x @ lora_A.T @ lora_B.T``: a low-rank adapter beside a Linear.

    As in LoRA, ``lora_B`` starts at zero, so the adapter changes nothing at first (and ``lora_A``'s
    first gradient is exactly zero: a real, not a bug, "dead" signal).
    """

    def __init__(self, base: nn.Linear, rank: int = 4, alpha: float = 8.0) -> None:
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) / base.in_features**0.5)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x: Tensor) -> Tensor:
        """Base projection plus the scaled low-rank update."""
        out: Tensor = self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale
        return out


def add_lora(model: nn.Module, targets: tuple[str, ...] = ("c_attn", "c_proj"), rank: int = 4,
             freeze_base: bool = True) -> nn.Module:
    """Wrap every ``nn.Linear`` whose name ends with one of ``targets`` in a :class:`LoRALinear`.

    With ``freeze_base`` every parameter except the adapters' gets ``requires_grad=False``.
    Modifies ``model`` in place and returns it.
    """
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name in targets:
                setattr(module, child_name, LoRALinear(child, rank=rank))
    if freeze_base:
        for name, p in model.named_parameters():
            p.requires_grad_("lora_" in name)
    return model

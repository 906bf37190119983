"""Healthy models: every verdict the library prints about them is a false alarm.

Each case runs one real training step's forward and backward under ``gv.capture``, checks PyTorch's
truth that the model is healthy (every trainable parameter has a finite gradient), then asks
``gv.gradient_flow`` (with the traced graph), ``gv.GradientMonitor`` (over a few optimizer steps) and
``gv.doctor`` (two real steps), both with the case's own optimizer (AdamW unless it names one).
Expected: no flag at all.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo.case import Case, Outcome
from gradviz_nb.bugzoo.healthy import Healthy
from gradviz_nb.bugzoo.healthy_models import MODELS as MORE

__all__ = ["CASES", "Healthy", "healthy_outcome"]


def _unhealthy(model: nn.Module) -> list[str]:
    def finite(g: torch.Tensor) -> bool:
        return bool(torch.isfinite(g.coalesce().values() if g.is_sparse else g).all())

    return [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not finite(p.grad))]


def _monitor_flags(h: Healthy, steps: int = 4) -> list[str]:
    opt = h.make_optimizer()
    with gv.GradientMonitor(h.model, optimizer=opt) as monitor:
        for _ in range(steps):
            h.backward(h.loss())
            monitor.step()
            opt.step()
            opt.zero_grad()
    return [f"monitor {f.kind} {f.target or '(model)'}" for _, f in monitor.flags()]


def _doctor_findings(h: Healthy) -> list[str]:
    opt = h.make_optimizer()

    def step() -> None:
        opt.zero_grad()
        h.backward(h.loss())
        opt.step()

    return [f"doctor {f.kind} {f.target}: {f.evidence[:80]}" for f in gv.doctor(step, h.model, opt).findings]


def healthy_outcome(make: Callable[[], Healthy]) -> Outcome:
    """Run ``make()``'s step, confirm it is healthy in PyTorch, and collect every flag (all false alarms)."""
    torch.manual_seed(0)
    h = make()
    with gv.capture(h.model) as cap:
        loss = h.loss()
    graph = gv.trace(loss, model=h.model, capture=cap)
    h.backward(loss)
    broken = _unhealthy(h.model)
    if broken:
        return Outcome("no flag", f"not a healthy case: no finite gradient for {broken[:3]}", False)
    flow = gv.gradient_flow(h.model, graph=graph, capture=cap)
    alarms = [f"{f.kind} {f.target or '(model)'}: {f.reason[:90]}" for f in flow.flags]
    h.model.zero_grad(set_to_none=True)
    alarms += _monitor_flags(h)
    alarms += _doctor_findings(h)
    return Outcome("no flag", "no flag" if not alarms else f"{len(alarms)} flags", True, tuple(alarms))


# -- the models -------------------------------------------------------------------------------------


def _ids(vocab: int = 100, shape: tuple[int, int] = (2, 12)) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(1))


def plain_mlp() -> Healthy:
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
    x, y = torch.randn(32, 20), torch.randint(0, 5, (32,))
    return Healthy(model, lambda: nn.functional.cross_entropy(model(x), y))


def cnn() -> Healthy:
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    return Healthy(model, lambda: nn.functional.cross_entropy(model(x), y))


def resnet() -> Healthy:
    from gradviz_nb.demo_models import ResNet18Like

    model = ResNet18Like()
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    return Healthy(model, lambda: nn.functional.cross_entropy(model(x), y))


def _transformer(norm_first: bool) -> Healthy:
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=norm_first)
    model = nn.Sequential(nn.Embedding(100, 64), nn.TransformerEncoder(layer, 6, enable_nested_tensor=False),
                          nn.LayerNorm(64), nn.Linear(64, 100))
    ids = _ids()
    return Healthy(model, lambda: nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten()))


def deep_residual_mlp() -> Healthy:
    """Notebook 04's fix: 20 sigmoid blocks with LayerNorm and a residual path, and a final LayerNorm
    (without it the residual stream grows with depth and the head's gradient explodes: see cases_flow)."""

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.fc = nn.LayerNorm(16), nn.Linear(16, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.sigmoid(self.fc(self.norm(x)))

    model = nn.Sequential(*[Block() for _ in range(20)], nn.LayerNorm(16), nn.Linear(16, 1))
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    return Healthy(model, lambda: nn.functional.mse_loss(model(x), y))


def _hf(make_model: Callable[[], nn.Module], seq2seq: bool = False) -> Healthy:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = make_model()
    ids = _ids()
    return Healthy(model, lambda: model(input_ids=ids, labels=ids).loss)


def hf_gpt2() -> Healthy:
    import transformers

    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    return _hf(lambda: transformers.GPT2LMHeadModel(config))


def hf_llama() -> Healthy:
    import transformers

    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, vocab_size=100,
                                      max_position_embeddings=32, bos_token_id=0, eos_token_id=0)
    return _hf(lambda: transformers.LlamaForCausalLM(config))


def hf_bert() -> Healthy:
    import transformers

    config = transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=2, vocab_size=100, max_position_embeddings=32)
    return _hf(lambda: transformers.BertForMaskedLM(config))


def hf_t5() -> Healthy:
    import transformers

    config = transformers.T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=100)
    config.decoder_start_token_id = 0
    return _hf(lambda: transformers.T5ForConditionalGeneration(config))


def peft_lora() -> Healthy:
    import peft
    import transformers

    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0, fan_in_fan_out=True)
    return _hf(lambda: peft.get_peft_model(transformers.GPT2LMHeadModel(config), lora))


def amp_grad_scaler() -> Healthy:
    """bfloat16 autocast on CPU with a GradScaler, unscaled before anything reads the gradients."""
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 4))
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    scaler = torch.amp.GradScaler("cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # unscale_ needs the optimizer; lr 0: nothing moves

    def loss() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return nn.functional.cross_entropy(model(x), y)

    def backward(value: torch.Tensor) -> None:
        scaler.scale(value).backward()
        scaler.unscale_(opt)
        scaler.update()  # resets the per-optimizer state, as the user's scaler.step + update would

    return Healthy(model, loss, backward)


def checkpointed_gpt2() -> Healthy:
    from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss

    model = GPT2(GPT2Config(n_layer=4, n_head=4, d_model=32, vocab=101, block_size=16, checkpoint="non_reentrant"))
    return Healthy(model, lambda: gpt2_loss(model, batch=2))


def grad_accumulation() -> Healthy:
    """Four micro-batches summed into .grad before one optimizer step (each loss divided by four)."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    batches = [(torch.randn(8, 16), torch.randn(8, 1)) for _ in range(4)]

    def loss() -> torch.Tensor:
        return nn.functional.mse_loss(model(batches[0][0]), batches[0][1]) / 4

    def backward(first: torch.Tensor) -> None:
        first.backward()
        for x, y in batches[1:]:
            (nn.functional.mse_loss(model(x), y) / 4).backward()

    return Healthy(model, loss, backward)


_MODELS: list[tuple[str, Callable[[], Healthy], tuple[str, ...]]] = [
    ("healthy-mlp", plain_mlp, ()),
    ("healthy-cnn", cnn, ()),
    ("healthy-resnet18", resnet, ()),
    ("healthy-pre-ln-transformer", lambda: _transformer(True), ()),
    ("healthy-post-ln-transformer", lambda: _transformer(False), ()),
    ("healthy-deep-residual-mlp", deep_residual_mlp, ()),
    ("healthy-hf-gpt2", hf_gpt2, ("transformers",)),
    ("healthy-hf-llama", hf_llama, ("transformers",)),
    ("healthy-hf-bert", hf_bert, ("transformers",)),
    ("healthy-hf-t5", hf_t5, ("transformers",)),
    ("healthy-peft-lora", peft_lora, ("transformers", "peft")),
    ("healthy-amp-grad-scaler", amp_grad_scaler, ()),
    ("healthy-checkpointed-gpt2", checkpointed_gpt2, ()),
    ("healthy-grad-accumulation", grad_accumulation, ()),
]

def _case(name: str, make: Callable[[], Healthy], needs: tuple[str, ...]) -> Case:
    return Case(name, "healthy", lambda: healthy_outcome(make), needs=needs)


CASES: list[Case] = [_case(name, make, needs) for name, make, needs in [*_MODELS, *MORE]]

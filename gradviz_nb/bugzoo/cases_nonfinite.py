"""Bug-zoo cases for ``gv.find_nonfinite``: where a NaN/Inf was born, against PyTorch's truth.

Each bug case builds the truth op by op in plain PyTorch (the module input that really is finite, the op
that really turns it into Inf or NaN, the loss or gradient that really ends up non-finite) and expects
``find_nonfinite`` to name that op: ``"<phase> <aten op> in <module>: <cause>"``. The healthy cases (every
model of ``cases_healthy``, Hugging Face models with padding masks, ``-inf`` and ``finfo.min`` attention
masks) expect no origin: their masks' infinities never reach the loss or a gradient.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo import cases_healthy
from gradviz_nb.bugzoo.case import Case, Outcome

__all__ = ["CASES"]

NONE = "no origin (None)"


def _said(nf: gv.NonFinite | None) -> str:
    if nf is None:
        return NONE
    node = f" [{nf.node}]" if nf.node else ""
    return f"{nf.phase} {nf.op}{node} in {nf.module or '(top level)'}: {nf.cause}"


def _bug(expected: str, nf: gv.NonFinite | None) -> Outcome:
    return Outcome(expected, _said(nf), _said(nf) == expected)


def _invalid(why: str) -> Outcome:
    return Outcome("a scenario PyTorch confirms", f"not a valid case: {why}", False)


def _anomaly(step: Callable[[], Any]) -> str:
    """What ``torch.autograd.detect_anomaly()`` says about the same step (for the record)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autograd.detect_anomaly():
                step()
        except RuntimeError as exc:
            return str(exc).split(" returned")[0].replace("Function ", "").strip("'")
    return "nothing"


# -- bugs -----------------------------------------------------------------------------------------------------


class LogFeatures(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x**2)


class LogNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.features = LogFeatures()
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(self.encoder(x)))


def forward_log() -> Outcome:
    """ReLU zeros reach ``log``: -inf, then NaN in the head's matmul. detect_anomaly() names
    LogSoftmaxBackward0, the loss's backward."""
    torch.manual_seed(0)
    model = LogNet()
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    with torch.no_grad():
        enc = model.encoder(x)
        sq = enc**2
        if not (torch.isfinite(sq).all() and torch.isinf(torch.log(sq)).any()):
            return _invalid("log of the encoder's output is not where the first Inf appears")
        if not torch.isnan(nn.functional.cross_entropy(model(x), y)):
            return _invalid("the loss is finite")

    def step() -> None:
        nn.functional.cross_entropy(model(x), y).backward()

    nf = gv.find_nonfinite(step, model=model)
    model.zero_grad(set_to_none=True)
    out = _bug("forward aten.log in features: log(0)", nf)
    return Outcome(out.expected, f"{out.got} (detect_anomaly: {_anomaly(step)})", out.ok)


class Normalize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=-1, keepdim=True)


def zero_over_zero() -> Outcome:
    """``x / x.norm()`` of an all-zero vector (every ReLU unit dead)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Normalize(), nn.Linear(4, 2))
    with torch.no_grad():
        model[0].bias.fill_(-10.0)
    x = torch.randn(3, 4)
    with torch.no_grad():
        h = model[1](model[0](x))
        if not ((h == 0).all() and torch.isnan(h / h.norm(dim=-1, keepdim=True)).all()):
            return _invalid("the normalised vector is not 0/0")
    return _bug("forward aten.div in 2: 0/0", gv.find_nonfinite(lambda: model(x).pow(2).mean().backward(), model))


class Energy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.fc(x))


def exp_overflow() -> Outcome:
    """An energy ``exp(fc(x))`` whose logit reaches 160 (float32 overflows above 88.7)."""
    model = nn.Sequential(nn.Linear(4, 4), Energy())
    with torch.no_grad():
        model[0].weight.copy_(torch.eye(4))
        model[0].bias.zero_()
        model[1].fc.weight.fill_(40.0)
        model[1].fc.bias.zero_()
    x = torch.ones(5, 4)
    with torch.no_grad():
        z = model[1].fc(model[0](x))
        if not (torch.isfinite(z).all() and torch.isinf(torch.exp(z)).all()):
            return _invalid("exp of a finite logit does not overflow")
    return _bug("forward aten.exp in 1: exp overflow", gv.find_nonfinite(lambda: model(x).mean().backward(), model))


class SqrtNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt((x * x).sum(-1))


def backward_sqrt() -> Outcome:
    """A norm written as ``sqrt(sum(x * x))`` at x = 0: the forward is 0, the derivative 1/(2*0) = Inf.
    detect_anomaly() (NaN only) names the next node, MulBackward0."""
    model = nn.Sequential(nn.Linear(3, 3, bias=False), SqrtNorm())
    with torch.no_grad():
        model[0].weight.zero_()
    x = torch.randn(4, 3)
    loss = model(x).sum()
    loss.backward()
    if not torch.isfinite(loss) or torch.isfinite(model[0].weight.grad).all():
        return _invalid("the loss is not finite or the gradient is")
    model.zero_grad(set_to_none=True)

    def step() -> None:
        model(x).sum().backward()

    nf = gv.find_nonfinite(step, model=model)
    model.zero_grad(set_to_none=True)
    out = _bug("backward aten.div [SqrtBackward0] in 1: division by zero", nf)
    return Outcome(out.expected, f"{out.got} (detect_anomaly: {_anomaly(step)})", out.ok)


def where_log_gradient() -> Outcome:
    """``torch.where(w > 0, log(w), 0)``: the forward -inf is masked (not a finding), the backward of log
    gives 0/0 = NaN at w = 0."""
    w = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)

    def step() -> torch.Tensor:
        loss = torch.where(w > 0, torch.log(w), torch.zeros_like(w)).sum()
        loss.backward()
        return loss

    loss = step()
    if not (torch.isfinite(loss) and torch.isnan(w.grad).any()):
        return _invalid("the loss is not finite or the gradient has no NaN")
    w.grad = None
    return _bug("backward aten.div [LogBackward0] in (top level): 0/0", gv.find_nonfinite(step))


# -- healthy -----------------------------------------------------------------------------------------------------


def _healthy(model: nn.Module, step: Callable[[], Any]) -> Outcome:
    """PyTorch's truth first (finite loss and gradients), then find_nonfinite on the same step."""
    torch.manual_seed(0)
    returned = step()
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    loss = getattr(returned, "loss", returned)
    if bad or (isinstance(loss, torch.Tensor) and not torch.isfinite(loss).all()):
        return Outcome(NONE, f"not a healthy case: non-finite loss or gradients {bad[:3]}", False)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    nf = gv.find_nonfinite(step, model=model)
    return Outcome(NONE, _said(nf), nf is None, (nf.summary(),) if nf is not None else ())


def _from_healthy_zoo(make: Callable[[], cases_healthy.Healthy]) -> Outcome:
    torch.manual_seed(0)
    h = make()

    def step() -> torch.Tensor:
        loss = h.loss()
        h.backward(loss)
        return loss

    return _healthy(h.model, step)


def _hf_padded(name: str, attn: str) -> Outcome:
    import transformers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    model: Any
    extra: dict[str, Any] = {"attn_implementation": attn}
    if name == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0, **extra))
    elif name == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            vocab_size=100, max_position_embeddings=32, bos_token_id=0, eos_token_id=0, **extra))
    else:
        model = transformers.BertForMaskedLM(transformers.BertConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, vocab_size=100,
            max_position_embeddings=32, **extra))
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :5] = 0  # left padding: finfo.min (eager) or -inf (inside SDPA) in the attention scores
    labels = ids.masked_fill(mask == 0, -100)

    def step() -> Any:
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        return out

    return _healthy(model, step)


def mha_causal_minus_inf() -> Outcome:
    """``nn.TransformerEncoder`` with ``generate_square_subsequent_mask`` (a float mask of -inf)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    mask = nn.Transformer.generate_square_subsequent_mask(6)
    x = torch.randn(2, 6, 16)

    def step() -> torch.Tensor:
        loss = model(x, mask=mask).pow(2).mean()
        loss.backward()
        return loss

    return _healthy(model, step)


class _FinfoMinAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qk = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, -1)
        t = x.shape[1]
        mask = torch.full((t, t), torch.finfo(x.dtype).min).triu(1)  # its sum overflows; it is finite
        return torch.softmax(q @ k.transpose(-1, -2) / 4 + mask, -1) @ x


def finfo_min_mask() -> Outcome:
    torch.manual_seed(0)
    model = _FinfoMinAttention()
    x = torch.randn(2, 8, 16)

    def step() -> torch.Tensor:
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    return _healthy(model, step)


CASES: list[Case] = [
    Case("nonfinite-forward-log", "nan-origin", forward_log, description=forward_log.__doc__ or ""),
    Case("nonfinite-zero-over-zero", "nan-origin", zero_over_zero, description=zero_over_zero.__doc__ or ""),
    Case("nonfinite-exp-overflow", "nan-origin", exp_overflow, description=exp_overflow.__doc__ or ""),
    Case("nonfinite-backward-sqrt", "nan-origin", backward_sqrt, description=backward_sqrt.__doc__ or ""),
    Case("nonfinite-where-log-gradient", "nan-origin", where_log_gradient,
         description=where_log_gradient.__doc__ or ""),
    Case("nonfinite-healthy-minus-inf-causal-mask", "healthy", mha_causal_minus_inf),
    Case("nonfinite-healthy-finfo-min-mask", "healthy", finfo_min_mask),
    *[Case(f"nonfinite-healthy-hf-{name}-{attn}-padding", "healthy",
           lambda name=name, attn=attn: _hf_padded(name, attn), needs=("transformers",))  # type: ignore[misc]
      for name in ("gpt2", "llama", "bert") for attn in ("eager", "sdpa")],
    *[Case(f"nonfinite-{name}", "healthy", lambda make=make: _from_healthy_zoo(make), needs=needs)  # type: ignore[misc]
      for name, make, needs in cases_healthy._MODELS],
]

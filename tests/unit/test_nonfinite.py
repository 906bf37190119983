"""gv.find_nonfinite against what PyTorch really does.

Every bug case first establishes PyTorch's truth independently (the module input that really reaches 0,
the loss that is really NaN, the gradient that is really Inf, what detect_anomaly() really reports) and
then checks the origin find_nonfinite names; healthy models (masks filled with -inf or finfo.min, a CNN,
Hugging Face models) must give None.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo.cases_nonfinite import LogFeatures, LogNet  # the zoo's model: ReLU zeros reach a log
from gradviz_nb.probes.nonfinite.find import _finite, _watched_run


def _line_of(obj: Any, text: str) -> str:
    """``file:line`` of the first line of ``obj``'s source containing ``text`` (relative to the working
    directory, as every source location reads)."""
    lines, start = inspect.getsourcelines(obj)
    for i, line in enumerate(lines):
        if text in line:
            return f"{os.path.relpath(str(inspect.getsourcefile(obj)))}:{start + i}"
    raise AssertionError(f"{text!r} not in the source of {obj}")


def _anomaly(step: Callable[[], Any]) -> str | None:
    """What PyTorch's own detect_anomaly() says: its error message, or None if it raised nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autograd.detect_anomaly():
                step()
        except RuntimeError as exc:
            return str(exc)
    return None


def _state() -> tuple[Any, ...]:
    """Global state find_nonfinite touches: module hooks, the autograd entry points, the mode stack."""
    from torch.nn.modules import module as m

    return (len(m._global_forward_pre_hooks), len(m._global_forward_hooks), torch.autograd.backward,
            torch.autograd.grad, torch._C._len_torch_dispatch_stack())


# -- models with a known bug --------------------------------------------------------------------------------


def _log_case() -> tuple[LogNet, Callable[[], None], torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = LogNet()
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    return model, lambda: nn.functional.cross_entropy(model(x), y).backward(), x, y


def test_forward_log_origin_named_where_anomaly_mode_names_a_backward_node() -> None:
    model, step, x, y = _log_case()
    # PyTorch's truth, op by op: the encoder's output is finite with exact zeros, x**2 keeps them finite,
    # torch.log of them is -inf, and the loss is NaN.
    with torch.no_grad():
        enc = model.encoder(x)
        sq = enc**2
        assert torch.isfinite(enc).all() and (enc == 0).any() and torch.isfinite(sq).all()
        assert torch.isinf(torch.log(sq)).any()
        assert torch.isnan(nn.functional.cross_entropy(model(x), y))
    nf = gv.find_nonfinite(step, model=model)
    assert nf is not None
    assert (nf.phase, nf.op, nf.module, nf.module_type, nf.cause, nf.kind) == (
        "forward", "aten.log", "features", "LogFeatures", "log(0)", "Inf")
    assert nf.line == _line_of(LogFeatures.forward, "torch.log")
    assert nf.inputs[0].shape == (32, 16) and not nf.inputs[0].nonfinite
    assert nf.inputs[0].zeros == int((sq == 0).sum()) and nf.inputs[0].min == 0.0
    assert nf.became_nan is not None and nf.became_nan.module == "head" and nf.became_nan.op == "aten.addmm"
    assert "loss (a root of backward)" in nf.reached and "gradient of encoder.0.weight" in nf.reached
    # PyTorch's own answer is a backward node of the loss, far from the log.
    model.zero_grad(set_to_none=True)
    said = _anomaly(step)
    assert said is not None and "LogSoftmaxBackward0" in said and "LogBackward0" not in said


def test_result_formats() -> None:
    model, step, _, _ = _log_case()
    nf = gv.find_nonfinite(step, model=model)
    assert nf is not None
    assert repr(nf).startswith("<NonFinite Inf forward aten.log in features at ")
    text = nf.summary()
    assert "log(0)" in text and "became NaN in forward aten.addmm" in text and "input 0: [32, 16]" in text
    d = json.loads(json.dumps(nf.to_dict()))
    assert d["phase"] == "forward" and d["inputs"][0]["nonfinite"] is False and d["became_nan"]["module"] == "head"


def test_earliest_of_several_reached_births_wins() -> None:
    """A hand-written cross-entropy over a saturated softmax: log(0) in forward, then more NaN born in
    backward (LogBackward0's grad / 0). Both reach the gradients; the forward one came first."""
    torch.manual_seed(0)
    z = torch.randn(8, 3, requires_grad=True)
    onehot = nn.functional.one_hot(torch.randint(0, 3, (8,)), 3).float()

    def step() -> torch.Tensor:
        logp = torch.log(torch.softmax(z * 1000, -1))
        loss = -(onehot * logp).sum(1).mean()
        loss.backward()
        return loss

    watch, loss = _watched_run(step, None)
    assert torch.isnan(loss) and torch.isnan(z.grad).any()  # PyTorch's truth
    reached = sorted({r for b in watch.reached for r in (watch.births[b].parents or {b})})
    assert len(reached) >= 2 and {watch.births[b].site.phase for b in reached} == {"forward", "backward"}
    z.grad = None
    nf = gv.find_nonfinite(step)
    assert nf is not None and (nf.phase, nf.op, nf.cause) == ("forward", "aten.log", "log(0)")
    assert nf.others == len(reached) - 1


class Normalize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=-1, keepdim=True)


def test_zero_over_zero_norm() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Normalize(), nn.Linear(4, 2))
    with torch.no_grad():
        model[0].bias.fill_(-10.0)  # every ReLU output is 0 -> a zero vector
    x = torch.randn(3, 4)
    with torch.no_grad():
        h = model[1](model[0](x))
        assert (h == 0).all() and (h.norm(dim=-1) == 0).all() and torch.isnan(h / h.norm(dim=-1, keepdim=True)).all()
    nf = gv.find_nonfinite(lambda: model(x).pow(2).mean().backward(), model=model)
    assert nf is not None
    assert (nf.phase, nf.op, nf.module, nf.cause, nf.kind) == ("forward", "aten.div", "2", "0/0", "NaN")
    assert nf.line == _line_of(Normalize.forward, "x.norm")
    assert nf.inputs[1].zeros == 3 and nf.became_nan is None


class Energy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.fc(x))


def test_exp_overflow() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Energy())
    with torch.no_grad():
        model[0].weight.copy_(torch.eye(4))
        model[0].bias.zero_()
        model[1].fc.weight.fill_(40.0)  # the logit reaches 160: exp(160) > float32's max (exp(88.7))
    x = torch.ones(5, 4)
    with torch.no_grad():
        z = model[1].fc(model[0](x))
        assert torch.isfinite(z).all() and z.max() > math.log(torch.finfo(torch.float32).max)
        assert torch.isinf(torch.exp(z)).any()
    nf = gv.find_nonfinite(lambda: model(x).mean().backward(), model=model)
    assert nf is not None
    assert (nf.phase, nf.op, nf.module, nf.module_type, nf.cause, nf.kind) == (
        "forward", "aten.exp", "1", "Energy", "exp overflow", "Inf")
    assert nf.line == _line_of(Energy.forward, "torch.exp")
    assert nf.inputs[0].max_abs == pytest.approx(float(z.abs().max()))


class SqrtNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt((x * x).sum(-1))


def test_backward_only_inf_sqrt_at_zero() -> None:
    """sqrt(0) = 0 is fine in forward; its derivative 1 / (2 sqrt(0)) is Inf: born in backward."""
    model = nn.Sequential(nn.Linear(3, 3, bias=False), SqrtNorm())
    with torch.no_grad():
        model[0].weight.zero_()
    x = torch.randn(4, 3)
    loss_value: list[float] = []

    def step() -> None:
        loss = model(x).sum()
        loss_value.append(float(loss.detach()))
        loss.backward()

    step()  # truth: the loss is finite, the weight's gradient is not, and anomaly mode (NaN only) says nothing
    assert math.isfinite(loss_value[0]) and not torch.isfinite(model[0].weight.grad).all()
    model.zero_grad(set_to_none=True)
    nf = gv.find_nonfinite(step, model=model)
    assert nf is not None and model[0].weight.grad is None  # the step's gradient was put back to None
    assert (nf.phase, nf.op, nf.node, nf.module, nf.cause) == (
        "backward", "aten.div", "SqrtBackward0", "1", "division by zero")
    assert nf.line == _line_of(SqrtNorm.forward, "torch.sqrt")
    assert nf.reached == ("gradient of 0.weight",)
    # anomaly mode looks for NaN only: it names the next node, where Inf * 0 made the first NaN
    model.zero_grad(set_to_none=True)
    said = _anomaly(step)
    assert said is not None and "MulBackward0" in said and "SqrtBackward0" not in said


def test_where_masked_log_nan_is_born_in_backward() -> None:
    """torch.where hides log's -inf in forward (not a finding); log's backward makes 0/0 = NaN."""
    w = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)

    def step() -> torch.Tensor:
        loss = torch.where(w > 0, torch.log(w), torch.zeros_like(w)).sum()
        loss.backward()
        return loss

    watch, loss = _watched_run(step, None)
    assert torch.isfinite(loss) and torch.isnan(w.grad).any()  # PyTorch's truth
    assert any(b.site.op == "aten.log" for b in watch.births)  # the forward -inf was seen...
    nf = gv.find_nonfinite(step)
    assert nf is not None  # ... but the origin is the backward one that reached the gradient
    assert (nf.phase, nf.op, nf.node, nf.cause, nf.kind) == ("backward", "aten.div", "LogBackward0", "0/0", "NaN")
    assert nf.line == _line_of(test_where_masked_log_nan_is_born_in_backward, "torch.where(w > 0")


def test_intentional_mask_not_blamed_for_a_later_nan() -> None:
    """A -inf causal mask (healthy) then a log(0) in the head: the origin is the log."""
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(8, 2, batch_first=True)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    assert torch.isinf(mask).any()
    x = torch.randn(2, 5, 8)

    def step() -> None:
        h = attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        (torch.log(torch.relu(h)) * 0.1).mean().backward()

    nf = gv.find_nonfinite(step, model=attn)
    assert nf is not None and (nf.op, nf.cause) == ("aten.log", "log(0)") and nf.others == 0


def test_fully_masked_row_nan_traced_to_the_mask() -> None:
    scores = torch.randn(2, 4, 4, requires_grad=True)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[2] = True  # row 2 sees nothing

    def step() -> torch.Tensor:
        loss = torch.softmax(scores.masked_fill(mask, float("-inf")), -1).sum()
        loss.backward()
        return loss

    nf = gv.find_nonfinite(step)
    assert nf is not None and (nf.op, nf.cause, nf.kind) == ("aten.masked_fill", "constant", "Inf")
    assert nf.became_nan is not None and nf.became_nan.op == "aten._softmax"
    assert nf.reached == ("loss (a root of backward)", "the value fn returned")
    # PyTorch's truth: the loss is NaN; masked_fill's backward zeroes the NaN row, so the gradient is finite
    scores.grad = None
    assert torch.isnan(step()) and torch.isfinite(scores.grad).all()


# -- other ways a value reaches the training state ------------------------------------------------------------


def test_nan_in_the_data_is_already_nonfinite() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(6, 4)
    x[2, 1] = float("nan")
    nf = gv.find_nonfinite(lambda: model(x).mean().backward(), model=model)
    assert nf is not None and (nf.cause, nf.op, nf.module) == ("already non-finite", "aten.addmm", "0")
    assert any(i.nan == 1 for i in nf.inputs)


def test_parameter_broken_before_the_run() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    with torch.no_grad():
        model[2].weight[0, 0] = float("inf")
    nf = gv.find_nonfinite(lambda: model(torch.randn(3, 4)).mean().backward(), model=model)
    assert nf is not None and nf.cause == "already non-finite" and nf.module == "2"
    assert nf.detail.startswith("2.weight (a view of it) already held Inf")


def test_optimizer_step_writes_inf_into_a_parameter() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e38)
    x = torch.full((8, 4), 100.0)

    def step() -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    before = copy.deepcopy(model)
    plain = copy.deepcopy(model)  # PyTorch's truth, from a plain run of the same step on a copy
    plain_opt = torch.optim.SGD(plain.parameters(), lr=1e38)
    plain_opt.zero_grad()
    plain(x).sum().backward()
    plain_opt.step()
    assert all(torch.isfinite(p.grad).all() for p in plain.parameters())  # gradients were finite
    assert not torch.isfinite(plain.weight).all() and torch.isfinite(before.weight).all()  # the step overflowed
    nf = gv.find_nonfinite(step, model=model, optimizer=opt)
    assert torch.equal(model.weight, before.weight) and not opt.state  # the step was undone, momenta too
    assert nf is not None and nf.cause == "overflow" and nf.phase == "forward"
    assert any(r.startswith("parameter weight") for r in nf.reached)


def test_returned_value_and_item_are_sinks() -> None:
    x = torch.tensor([0.0, 1.0])
    nf = gv.find_nonfinite(lambda: torch.log(x).sum())
    assert nf is not None and nf.reached == ("the value fn returned",) and nf.cause == "log(0)"
    nf = gv.find_nonfinite(lambda: float(torch.log(x).sum()))
    assert nf is not None and nf.reached == ("read into Python (.item())",)
    def made_never_used() -> None:
        torch.log(x).sum()

    assert gv.find_nonfinite(made_never_used) is None


def test_autograd_grad_results_are_sinks() -> None:
    w = torch.tensor([0.0, 4.0], requires_grad=True)
    got: list[torch.Tensor] = []
    nf = gv.find_nonfinite(lambda: got.extend(torch.autograd.grad(torch.sqrt(w).sum(), [w])))
    assert torch.isinf(got[0]).any() and w.grad is None
    assert nf is not None and nf.phase == "backward" and nf.reached == ("a gradient returned by torch.autograd.grad",)


# -- healthy models: no origin ----------------------------------------------------------------------------------


def test_healthy_cnn() -> None:
    from gradviz_nb.demo_models import ResNet18Like

    torch.manual_seed(0)
    model = ResNet18Like()
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    nn.functional.cross_entropy(model(x), y).backward()  # PyTorch's truth: finite gradients
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    model.zero_grad(set_to_none=True)
    assert gv.find_nonfinite(lambda: nn.functional.cross_entropy(model(x), y).backward(), model=model) is None


def test_minus_inf_causal_mask_is_healthy() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    mask = nn.Transformer.generate_square_subsequent_mask(6)
    x = torch.randn(2, 6, 16)

    def step() -> None:
        model(x, mask=mask).pow(2).mean().backward()

    watch, _ = _watched_run(step, model)
    assert watch.births and not watch.reached  # the mask's -inf was seen and did not reach
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())  # the plain run's truth
    model.zero_grad(set_to_none=True)
    assert gv.find_nonfinite(step, model=model) is None


def test_finfo_min_mask_and_sum_overflow_are_healthy() -> None:
    """finfo.min is finite; a mask of it makes t.sum() overflow to -inf: the check must confirm, not trust."""
    scores = torch.randn(2, 64, 64, requires_grad=True)
    mask = torch.full((64, 64), torch.finfo(torch.float32).min).triu(1)
    assert torch.isinf(mask.sum()) and torch.isfinite(mask).all()

    def step() -> None:
        torch.softmax(scores + mask, -1).pow(2).sum().backward()

    watch, _ = _watched_run(step, None)
    assert not watch.births
    assert gv.find_nonfinite(step) is None and torch.isfinite(scores.grad).all()


HF_MODELS = ["gpt2", "llama", "bert"]


def _hf_model(name: str, attn: str) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    if name == "gpt2":
        cfg: Any = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                           bos_token_id=0, eos_token_id=0, attn_implementation=attn)
        return transformers.GPT2LMHeadModel(cfg)
    if name == "llama":
        cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=2, num_key_value_heads=1, vocab_size=100,
                                       max_position_embeddings=32, bos_token_id=0, eos_token_id=0,
                                       attn_implementation=attn)
        return transformers.LlamaForCausalLM(cfg)
    cfg = transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  vocab_size=100, max_position_embeddings=32, attn_implementation=attn)
    return transformers.BertForMaskedLM(cfg)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("name", HF_MODELS)
def test_hugging_face_models_with_padding_masks_are_healthy(name: str, attn: str) -> None:
    model = _hf_model(name, attn)
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    am = torch.ones(2, 12, dtype=torch.long)
    am[0, :5] = 0  # left padding: masked positions (finfo.min in eager, -inf inside SDPA)
    labels = ids.masked_fill(am == 0, -100)

    def step() -> Any:
        out = model(input_ids=ids, attention_mask=am, labels=labels)
        out.loss.backward()
        return out

    out = step()  # PyTorch's truth: finite loss and gradients
    assert torch.isfinite(out.loss) and all(torch.isfinite(p.grad).all() for p in model.parameters()
                                             if p.grad is not None)
    model.zero_grad(set_to_none=True)
    assert gv.find_nonfinite(step, model=model) is None  # the returned ModelOutput is checked too


# -- size, state, errors ----------------------------------------------------------------------------------------


def test_million_element_tensors() -> None:
    x = torch.rand(1000, 1000) + 0.5
    x[123, 456] = 0.0
    w = torch.ones(1000, requires_grad=True)
    nf = gv.find_nonfinite(lambda: (torch.log(x) * w).mean().backward())
    assert nf is not None and nf.cause == "log(0)" and nf.inputs[0].shape == (1000, 1000) and nf.inputs[0].zeros == 1
    # huge finite values: their sum overflows, they are still finite
    big = torch.full((1_000_000,), 1e35, requires_grad=True)
    assert torch.isinf((big * 1.0).sum()) and torch.isfinite(big * 1.0).all()
    assert gv.find_nonfinite(lambda: ((big * 1.0) * 1e-35).mean().backward()) is None
    assert torch.isfinite(big.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64])
def test_finite_check_agrees_with_isfinite(dtype: torch.dtype) -> None:
    big = torch.finfo(dtype).max / 2  # 1000 of them sum past the dtype's range
    cases = [torch.ones(10, dtype=dtype), torch.full((1000,), big, dtype=dtype), torch.full((1000,), -big, dtype=dtype),
             torch.tensor([1.0, float("nan")], dtype=dtype), torch.tensor([float("inf"), 1.0], dtype=dtype),
             torch.tensor([float("-inf"), float("inf")], dtype=dtype), torch.zeros(3, dtype=dtype)]
    assert not torch.isfinite(cases[1].sum()).all()  # the plain sum alone would be fooled
    for t in cases:
        assert _finite(t) == bool(torch.isfinite(t).all()), (dtype, t)


def test_state_left_alone_and_grads_put_back() -> None:
    model, step, x, y = _log_case()
    plain = copy.deepcopy(model)
    nn.functional.cross_entropy(model(x), y).backward()  # the user's gradients before the check
    grads = {n: p.grad for n, p in model.named_parameters()}
    values = {n: g.clone() for n, g in grads.items() if g is not None}
    before = _state()
    nf = gv.find_nonfinite(step, model=model)  # fn runs for real, in the sandbox
    assert nf is not None and _state() == before
    for (n, p), q in zip(model.named_parameters(), plain.parameters(), strict=True):
        assert p.grad is grads[n]  # the very same gradient objects, with their old values
        torch.testing.assert_close(p.grad, values[n], rtol=0, atol=0, equal_nan=True, msg=n)
        assert torch.equal(p, q) and p.requires_grad


def test_exception_propagates_with_a_note_and_cleans_up() -> None:
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    before = _state()

    def step() -> None:
        loss = torch.log(x).sum()
        loss.backward()
        raise ValueError("loss is not finite")

    with pytest.raises(ValueError, match="loss is not finite") as info:
        gv.find_nonfinite(step)
    assert _state() == before
    assert any("aten.log" in note and "log(0)" in note for note in getattr(info.value, "__notes__", []))


@pytest.mark.parametrize("bad", [torch.zeros(2), 3, None, nn.Linear(2, 2)])
def test_not_a_function(bad: Any) -> None:
    with pytest.raises(gv.GradvizError, match="lambda"):
        gv.find_nonfinite(bad)


def test_model_must_be_a_module() -> None:
    with pytest.raises(gv.GradvizError, match=r"nn\.Module"):
        gv.find_nonfinite(lambda: None, model="model")  # type: ignore[arg-type]

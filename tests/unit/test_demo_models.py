"""Quick shape / forward / backward tests of :mod:`gradviz_nb.demo_models`."""

from __future__ import annotations

import pytest
import torch

from gradviz_nb.demo_models import (
    GPT2,
    MLP,
    GPT2Config,
    MHAModel,
    ResNet18Like,
    TwiceCalled,
    gpt2_loss,
)


def _tiny_gpt2(checkpoint: str | None = None, seed: int = 0) -> GPT2:
    torch.manual_seed(seed)
    return GPT2(GPT2Config.small_test(checkpoint=checkpoint))  # type: ignore[arg-type]


def test_mlp_shapes_and_backward() -> None:
    model = MLP()
    out = model(torch.randn(5, 4))
    assert out.shape == (5, 3)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_gpt2_default_config_is_124m() -> None:
    cfg = GPT2Config()
    assert (cfg.n_layer, cfg.n_head, cfg.d_model, cfg.vocab, cfg.block_size) == (
        12,
        12,
        768,
        50257,
        1024,
    )
    # Parameter count of the tied 124M model, computed from the config without building it.
    d, v, n, L = cfg.d_model, cfg.vocab, cfg.block_size, cfg.n_layer
    per_block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert v * d + n * d + L * per_block + 2 * d == 124_439_808


def test_gpt2_forward_shapes() -> None:
    model = _tiny_gpt2()
    idx = torch.randint(0, 101, (2, 16))
    logits = model(idx)
    assert isinstance(logits, torch.Tensor)
    assert logits.shape == (2, 16, 101)
    logits2, loss = model(idx, idx)
    assert torch.equal(logits, logits2)
    assert loss.dim() == 0


def test_gpt2_rejects_long_sequence() -> None:
    model = _tiny_gpt2()
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_gpt2_structure_names() -> None:
    model = _tiny_gpt2()
    names = {n for n, _ in model.named_modules()}
    for expected in (
        "wte",
        "wpe",
        "drop",
        "blocks.0.ln_1",
        "blocks.0.attn.c_attn",
        "blocks.0.attn.c_proj",
        "blocks.1.ln_2",
        "blocks.1.mlp.c_fc",
        "blocks.1.mlp.c_proj",
        "ln_f",
        "lm_head",
    ):
        assert expected in names
    c_attn = model.get_submodule("blocks.0.attn.c_attn")
    assert isinstance(c_attn, torch.nn.Linear)
    assert c_attn.out_features == 3 * 32


def test_gpt2_weight_tied() -> None:
    model = _tiny_gpt2()
    assert model.lm_head.weight is model.wte.weight
    # named_parameters() lists the shared tensor once, under its first name.
    params = dict(model.named_parameters())
    assert "wte.weight" in params
    assert "lm_head.weight" not in params
    loss = gpt2_loss(model)
    torch.autograd.backward(loss)
    grad = model.wte.weight.grad
    assert grad is not None
    assert model.lm_head.weight.grad is grad
    # The gradient includes the lm_head contribution: every row gets some (the embedding
    # alone would only touch the 16 sampled token rows).
    assert int((grad.abs().sum(dim=1) > 0).sum()) == 101


def test_gpt2_loss_deterministic() -> None:
    model = _tiny_gpt2()
    state = torch.random.get_rng_state()
    a = gpt2_loss(model, batch=2, seq=8, seed=3)
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched
    b = gpt2_loss(model, batch=2, seq=8, seed=3)
    c = gpt2_loss(model, batch=2, seq=8, seed=4)
    assert a.dim() == 0
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # Roughly ln(vocab) at initialisation.
    assert abs(a.item() - torch.log(torch.tensor(101.0)).item()) < 1.0


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_gpt2_checkpoint_modes_match(mode: str) -> None:
    plain = _tiny_gpt2(None)
    ckpt = _tiny_gpt2(mode)
    ckpt.load_state_dict(plain.state_dict())
    loss_p = gpt2_loss(plain, batch=2, seq=16)
    loss_c = gpt2_loss(ckpt, batch=2, seq=16)
    torch.testing.assert_close(loss_c, loss_p)
    torch.autograd.backward([loss_p, loss_c])
    grads_c = dict(ckpt.named_parameters())
    for name, p in plain.named_parameters():
        assert p.grad is not None, name
        g = grads_c[name].grad
        assert g is not None, name
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)


def test_gpt2_checkpoint_shows_in_graph() -> None:
    loss = gpt2_loss(_tiny_gpt2("reentrant"))
    names: set[str] = set()
    visited: set[object] = set()
    stack = [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in visited:
            continue
        visited.add(fn)
        names.add(fn.name())
        stack.extend(f for f, _ in fn.next_functions)
    assert "CheckpointFunctionBackward" in names


def test_gpt2_config_validation() -> None:
    with pytest.raises(ValueError):
        GPT2Config(d_model=30, n_head=4)
    with pytest.raises(ValueError):
        GPT2Config(checkpoint="bogus")  # type: ignore[arg-type]
    assert GPT2Config.small_test().with_checkpoint("reentrant").checkpoint == "reentrant"


@pytest.mark.parametrize("size", [32, 64])
def test_resnet18like(size: int) -> None:
    torch.manual_seed(0)
    model = ResNet18Like(num_classes=10, width=8)
    out = model(torch.randn(2, 3, size, size))
    assert out.shape == (2, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_resnet18like_default_shape() -> None:
    model = ResNet18Like()
    n_bn = sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    n_conv = sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    assert n_conv == 1 + 16 + 3  # stem, 8 blocks x 2, 3 projection shortcuts
    assert n_bn == n_conv
    assert 11_000_000 < sum(p.numel() for p in model.parameters()) < 11_300_000


def test_mha_model() -> None:
    model = MHAModel()
    out = model(torch.randn(2, 5, 8))
    assert out.shape == (2, 5, 3)
    out.sum().backward()
    assert model.attn.in_proj_weight.grad is not None
    assert model.head.weight.grad is not None


def test_twice_called() -> None:
    model = TwiceCalled()
    calls = 0

    def hook(*_: object) -> None:
        nonlocal calls
        calls += 1

    handle = model.block.register_forward_hook(hook)
    out = model(torch.randn(3, 4))
    handle.remove()
    assert calls == 2
    assert out.shape == (3, 2)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())

"""The healthy set covers the choices a tool must not mistake for bugs (each case itself runs in test_zoo)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from gradviz_nb.bugzoo import cases_healthy
from gradviz_nb.bugzoo.healthy import Healthy

MODELS: list[tuple[str, Callable[[], Healthy], tuple[str, ...]]] = [*cases_healthy._MODELS, *cases_healthy.MORE]


def _built() -> dict[str, Healthy]:
    torch.manual_seed(0)
    return {name: make() for name, make, _ in MODELS}


def test_twenty_distinct_healthy_models_cover_the_deliberate_choices() -> None:
    built = _built()
    assert len(built) >= 20 and len({type(h.model).__name__ + n for n, h in built.items()}) == len(built)

    def some(pred: Callable[[Healthy], bool]) -> list[str]:
        return [n for n, h in built.items() if pred(h)]

    def has(h: Healthy, kind: type[nn.Module] | tuple[type[nn.Module], ...]) -> bool:
        return any(isinstance(m, kind) for m in h.model.modules())

    def not_optimized(h: Healthy) -> bool:
        held = {id(p) for g in h.make_optimizer().param_groups for p in g["params"]}
        return any(not p.requires_grad and id(p) not in held for p in h.model.parameters())

    checks: dict[str, Callable[[Healthy], bool]] = {
        "BatchNorm": lambda h: has(h, nn.modules.batchnorm._BatchNorm),
        "an RNN": lambda h: has(h, nn.RNNBase),
        "sparse embeddings + SparseAdam": lambda h: isinstance(h.make_optimizer(), torch.optim.SparseAdam),
        "tied weights": lambda h: len(list(h.model.parameters())) < len(list(h.model.named_parameters(
            remove_duplicate=False))),
        "an aux loss kept on a module": lambda h: any(isinstance(getattr(m, "aux", None), torch.Tensor)
                                                      for m in h.model.modules()),
        "a frozen part left out of the optimizer": not_optimized,
        "bf16 weights": lambda h: any(p.dtype == torch.bfloat16 for p in h.model.parameters()),
        "fp16 weights": lambda h: any(p.dtype == torch.float16 for p in h.model.parameters()),
        "LoRA B at zero": lambda h: any("lora_B" in n and bool((p == 0).all())
                                        for n, p in h.model.named_parameters()),
    }
    missing = [what for what, pred in checks.items() if not some(pred)]
    assert not missing, missing

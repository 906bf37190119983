"""The layer-health rules fed numbers: each verdict needs a measured consequence, a comparison is context."""

from __future__ import annotations

import math

from gradviz_nb.analysis.layer_health import HORIZON_MOVE, HORIZON_STEPS, LayerHealth, Thresholds, check_layers

T = Thresholds()


def _layer(path: str, norm: float, weight_norm: float = 1.0, numel: int = 100, **step: object) -> LayerHealth:
    return LayerHealth(path, norm, norm / 10, weight_norm, numel, "float32", **step)  # type: ignore[arg-type]


def _kinds(layers: list[LayerHealth], **kw: object) -> dict[str, str]:
    return {v.path: v.kind for v in check_layers(layers, T, set(), **kw)}  # type: ignore[arg-type]


def test_a_head_that_stands_out_is_not_exploding_and_the_layers_under_it_are_named() -> None:
    lr = 1e-3
    below = _layer("body", 1e-6, lr=lr)  # one step moves it by 1e-9: a million move it by 0.1%
    head = _layer("head", 10.0, lr=lr)  # 1e7x the body, one step moves it by 0.01 of its norm
    verdicts = check_layers([below, head], T, set())
    assert [(v.kind, v.path) for v in verdicts] == [("vanishing", "body")]
    assert "at your lr 0.001" in verdicts[0].reason and "head above gets a gradient norm 10" in verdicts[0].reason
    assert "not because it explodes" in verdicts[0].reason
    assert _kinds([_layer("body", 1e-3, lr=lr), head]) == {}  # the body learns: nothing at all


def test_the_step_at_the_users_lr_decides_exploding() -> None:
    layer = _layer("fc", 50.0)  # ratio 50
    assert _kinds([layer]) == {}  # at lr 1e-3 one step moves it by 0.05 of its norm
    assert _kinds([_layer("fc", 50.0, lr=0.1, optimizer="SGD")]) == {"fc": "exploding"}  # by 5x
    adaptive = _layer("fc", 5e4, lr=0.1, adaptive_eps=1e-8, optimizer="Adam")
    assert _kinds([adaptive]) == {}  # Adam's step does not grow with the gradient


def test_an_adaptive_step_vanishes_only_under_its_eps() -> None:
    rms_under_eps = 1e-14 * math.sqrt(100)  # rms(g) 1e-14, eps 1e-8: each element moves by lr * 1e-6
    tiny = _layer("fc", rms_under_eps, lr=1e-3, adaptive_eps=1e-8, optimizer="Adam")
    assert _kinds([tiny]) == {"fc": "vanishing"}
    small_but_seen = _layer("fc", 1e-6 * math.sqrt(100), lr=1e-3, adaptive_eps=1e-8, optimizer="Adam")
    assert _kinds([small_but_seen]) == {}


def test_the_horizon_at_a_guessed_lr_needs_the_depth_trend() -> None:
    # at the default lr (no optimizer), a small ratio alone is not enough ...
    assert _kinds([_layer("a", 1e-6), _layer("b", 1.0)]) == {}
    # ... a steady fall with depth over 8 layers is: the layers a million steps would not move are named
    chain = [_layer(str(i), 10.0 ** (i - 8)) for i in range(8)]
    found = check_layers(chain, T, set())
    horizon = {m.path for m in chain if T.lr * m.norm * HORIZON_STEPS < HORIZON_MOVE}
    assert {v.path for v in found} == horizon and 0 < len(horizon) < 8
    assert all("falls steadily with depth" in v.reason for v in found)


def test_a_standing_out_layer_whose_own_step_raises_the_loss_is_exploding() -> None:
    body, head = _layer("body", 0.01), _layer("head", 20.0)  # head 2000x the body, one step moves it by 0.02
    asked: list[str] = []

    def loss_step(path: str) -> tuple[float, float]:
        asked.append(path)
        return (3.5, 12.0)

    verdicts = check_layers([body, head], T, set(), loss_step=loss_step)
    assert [(v.kind, v.path) for v in verdicts] == [("exploding", "head")] and asked == ["head"]
    assert "raises the loss from 3.5 to 12" in verdicts[0].reason
    assert _kinds([body, head], loss_step=lambda path: (3.5, 3.4)) == {}  # the loss falls: nothing
    assert _kinds([body, head], loss_step=lambda path: (3.5, math.nan)) == {"head": "exploding"}

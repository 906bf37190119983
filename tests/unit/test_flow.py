"""gv.gradient_flow: statistics against direct computation, flags on constructed bugs, none on healthy
models, the graph overlay, the charts and the dashboard's linking (Python side)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.analysis.layer_health import HORIZON_MOVE, HORIZON_STEPS
from gradviz_nb.bugzoo.cases_flow import relative_moves
from gradviz_nb.demo_models import GPT2, MLP, GPT2Config, add_lora, gpt2_loss
from gradviz_nb.probes.flow import layer_histograms
from gradviz_nb.widgets import page


def _mlp_chain(depth: int = 6, width: int = 16, seed: int = 0, act: type[nn.Module] = nn.Tanh,
               xavier: bool = True) -> nn.Sequential:
    """A Linear/activation chain; ``xavier``: initialised for tanh (gain 5/3), so the gradient keeps its size."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        linear = nn.Linear(width, width)
        if xavier:
            nn.init.xavier_uniform_(linear.weight, gain=nn.init.calculate_gain("tanh"))
        layers += [linear, act()]
    return nn.Sequential(*layers)


def _grads(model: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


def _kinds(flow: gv.probes.flow.GradientFlow) -> dict[str, list[str]]:  # type: ignore[name-defined]
    out: dict[str, list[str]] = {}
    for f in flow.flags:
        out.setdefault(f.kind, []).append(f.target)
    return out


def test_stats_equal_direct_computation() -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    gpt2_loss(model, batch=2).backward()
    flow = gv.gradient_flow(model)
    for name, p in model.named_parameters():
        s = flow.param(name)
        g = p.grad
        assert g is not None
        assert s.norm == pytest.approx(g.norm().item(), rel=1e-5)
        assert s.max_abs == pytest.approx(g.abs().max().item(), rel=1e-6)
        assert s.mean == pytest.approx(g.mean().item(), rel=1e-4, abs=1e-9)
        assert s.zero_frac == pytest.approx((g == 0).float().mean().item())
        assert s.nonfinite == 0 and s.has_grad
        w = p.detach().norm().item()
        assert s.ratio == (pytest.approx(g.norm().item() / w, rel=1e-5) if w else math.inf)
    # modules aggregate every parameter under their path
    block = flow.module("blocks.0")
    grads = [p.grad for n, p in model.named_parameters() if n.startswith("blocks.0.") and p.grad is not None]
    assert block.norm == pytest.approx(torch.cat([g.flatten() for g in grads]).norm().item(), rel=1e-5)
    assert block.max_abs == pytest.approx(max(g.abs().max().item() for g in grads), rel=1e-6)
    assert block.n_params == len(grads) == block.n_with_grad
    assert flow.module("").norm == pytest.approx(
        torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).norm().item(), rel=1e-5)
    # the tied weight is one parameter with both names, counted in both modules
    tied = flow.param("lm_head.weight")
    assert set(tied.names) == {"wte.weight", "lm_head.weight"}
    assert flow.module("lm_head").norm == pytest.approx(flow.module("wte").norm)


def test_explicit_grads_and_no_side_effects() -> None:
    model = MLP()
    x = torch.randn(5, 4)
    model(x).pow(2).sum().backward()
    before = _grads(model)
    flags = [p.requires_grad for p in model.parameters()]
    flow = gv.gradient_flow(model)
    after = _grads(model)
    assert all(torch.equal(before[n], after[n]) for n in before)  # type: ignore[arg-type]
    assert flags == [p.requires_grad for p in model.parameters()]
    given = {"fc1.weight": torch.ones(8, 4)}
    flow2 = gv.gradient_flow(model, grads=given)
    assert flow2.param("fc1.weight").norm == pytest.approx(math.sqrt(32))
    assert not flow2.param("fc2.weight").has_grad
    assert flow.param("fc1.weight").norm != flow2.param("fc1.weight").norm
    with pytest.raises(gv.GradvizError):
        gv.gradient_flow(model, grads={"nope": torch.ones(1)})


def test_healthy_models_raise_no_flags() -> None:
    torch.manual_seed(0)
    gpt = GPT2(GPT2Config.small_test())
    gpt2_loss(gpt, batch=2).backward()
    assert gv.gradient_flow(gpt).flags == []
    lora = add_lora(GPT2(GPT2Config.small_test()))
    gpt2_loss(lora, batch=2).backward()  # lora_A's first gradient is exactly zero (B = 0): not a bug
    flow = gv.gradient_flow(lora)
    assert flow.flags == [], flow.summary()
    chain = _mlp_chain()
    chain(torch.randn(8, 16)).pow(2).mean().backward()
    assert gv.gradient_flow(chain).flags == []
    assert "nothing looks wrong" in gv.gradient_flow(chain).summary()


def test_a_depth_trend_alone_is_no_verdict_what_one_step_does_decides() -> None:
    """PyTorch's default Linear init shrinks a tanh chain's gradient layer by layer: SGD moves the first layer
    more than 10x less than the top, and it still learns, so no flag. At a learning rate where a million real
    SGD steps would move a layer by less than 10% of its norm, that layer (and only it) is vanishing, with the
    trend named as context."""
    torch.manual_seed(100)
    x = torch.randn(8, 16)
    chain = _mlp_chain(depth=8, xavier=False)
    chain(x).pow(2).mean().backward()
    assert gv.gradient_flow(chain).flags == []
    moves = relative_moves(_mlp_chain(depth=8, xavier=False), lambda m: m(x).pow(2).mean(), steps=20)
    assert moves["14"] > 10 * moves["0"] > 0, moves  # the trend is real; the first layer moves anyway
    lr = 5e-6
    flow = gv.gradient_flow(chain, optimizer=torch.optim.SGD(chain.parameters(), lr=lr))
    before = {n: p.detach().clone() for n, p in chain.named_parameters()}
    torch.optim.SGD(chain.parameters(), lr=lr).step()  # the truth: one real step, measured
    truth = set()
    for layer in {n.rpartition(".")[0] for n in before}:
        names = [n for n in before if n.rpartition(".")[0] == layer]
        w0 = torch.cat([before[n].flatten() for n in names])
        w1 = torch.cat([chain.get_parameter(n).detach().flatten() for n in names])
        if (w1 - w0).norm() / w0.norm() * HORIZON_STEPS < HORIZON_MOVE:
            truth.add(layer)
    assert 0 < len(truth) < 8, truth  # the rule splits the chain: the test can fail either way
    assert _kinds(flow) == {"vanishing": sorted(truth, key=int)}, flow.summary()
    assert all("at your lr 5e-06" in f.reason for f in flow.flags)
    # the same chain initialised for tanh: no trend, and SGD moves first and last layers alike
    chain = _mlp_chain(depth=8)
    chain(x).pow(2).mean().backward()
    assert gv.gradient_flow(chain).flags == []
    moves = relative_moves(_mlp_chain(depth=8), lambda m: m(x).pow(2).mean(), steps=20)
    assert moves["14"] < 3 * moves["0"], moves


def _cut_lora() -> tuple[nn.Module, torch.Tensor, gv.Capture]:
    torch.manual_seed(0)
    model = add_lora(GPT2(GPT2Config.small_test()))
    attn = model.blocks[1].attn
    original = attn.forward
    attn.forward = lambda h: original(h).detach()  # the injected bug
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=2)
    return model, loss, cap


def test_detached_adapter_is_flagged_dead_with_the_cause() -> None:
    model, loss, cap = _cut_lora()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    flow = gv.gradient_flow(model, graph=graph, capture=cap)
    kinds = _kinds(flow)
    assert sorted(kinds["dead-adapter"]) == ["blocks.1.attn.c_attn", "blocks.1.attn.c_proj"]
    assert set(kinds) == {"dead-adapter", "no-grad"}
    dead = flow.flags_for("blocks.1.attn.c_attn")
    # the cause names the detach that was recorded: the module whose forward ran it, and the source line
    assert any("detach() in module 'blocks.1.attn' at " in f.reason and "test_flow.py:" in f.reason
               for f in dead), dead
    assert all(f.target.startswith("blocks.1.") for f in flow.flags)
    # without graph or capture: what was observed (backward reached other parameters) and how to see more
    reason = gv.gradient_flow(model).flags_for("blocks.1.attn.c_attn.lora_A")[0].reason
    assert "backward ran but never reached it" in reason and "gv.trace(" in reason
    # the capture alone is evidence enough
    assert "detach() in module 'blocks.1.attn'" in gv.gradient_flow(model, capture=cap).flags_for(
        "blocks.1.attn.c_attn.lora_A")[0].reason


def test_data_use_is_flagged_and_named() -> None:
    model = MLP()

    def forward(x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x @ model.fc1.weight.data.T + model.fc1.bias)  # .data: no gradient for the weight
        return model.fc2(h)

    with gv.capture(model) as cap:
        loss = forward(torch.randn(3, 4)).sum()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    flow = gv.gradient_flow(model, graph=graph, capture=cap)
    assert [(f.kind, f.target) for f in flow.flags] == [("no-grad", "fc1.weight")]
    assert ".data" in flow.flags[0].reason


def test_exploding_layer_from_scaled_init_and_vanishing() -> None:
    torch.manual_seed(0)
    # Linear -> LayerNorm blocks: LayerNorm undoes the scale of the forward, and the layer whose init was
    # scaled down 1e4 times gets a 1e4 times larger gradient (the classic badly scaled init).
    chain = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(16, 16), nn.LayerNorm(16, eps=1e-12), nn.ReLU())])
    with torch.no_grad():
        chain[6].weight.mul_(1e-4)
        chain[6].bias.mul_(1e-4)
    (chain(torch.randn(8, 16)) - 1).pow(2).mean().backward()
    flow = gv.gradient_flow(chain)
    assert _kinds(flow) == {"exploding": ["6"]}, flow.summary()
    assert "one SGD step at lr 0.001 would move these weights by" in flow.flags[0].reason
    # absolute thresholds, set by the user (the ratio and peer rules switched off)
    flow = gv.gradient_flow(chain, lr=1e-12, peer=1e12, abs_exploding=10 * flow.module("0").norm)
    assert _kinds(flow)["exploding"] == ["6"]
    assert "absolute limit" in flow.flags[0].reason
    # vanishing: a deep sigmoid chain
    torch.manual_seed(0)
    deep = nn.Sequential(*[m for _ in range(30) for m in (nn.Linear(8, 8), nn.Sigmoid())])
    deep(torch.randn(4, 8)).sum().backward()
    vanished = _kinds(gv.gradient_flow(deep)).get("vanishing", [])
    assert "0" in vanished and "58" not in vanished


def test_nan_injection_is_flagged() -> None:
    model = MLP()
    out = model(torch.randn(3, 4))
    out.register_hook(lambda g: g * torch.tensor(float("nan")))
    out.sum().backward()
    flow = gv.gradient_flow(model)
    nan = [f.target for f in flow.flags if f.kind == "nan"]
    assert set(nan) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert flow.param("fc2.bias").nonfinite == 3


def test_tabular_results() -> None:
    pd = pytest.importorskip("pandas")
    model = MLP()
    model(torch.randn(3, 4)).sum().backward()
    flow = gv.gradient_flow(model)
    df = flow.to_pandas()
    assert isinstance(df, pd.DataFrame) and list(df["name"]) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert list(flow.to_pandas("layers")["path"]) == ["fc1", "fc2"]
    assert "GradientFlow" in repr(flow)


def test_overlay_follows_the_payload_contract() -> None:
    model, loss, cap = _cut_lora()
    graph = gv.trace(loss, model=model, capture=cap)
    loss.backward()
    flow = gv.gradient_flow(model, graph=graph, capture=cap)
    ov = page.overlay(flow, graph=graph)
    assert set(ov) == {"title", "values", "scale", "encoding", "marks", "unit", "detail"}
    assert ov["scale"] == "log" and ov["encoding"] == "color"
    leaves = graph.leaves()
    a0 = leaves["blocks.0.attn.c_attn.lora_B"]
    assert ov["values"][a0] == pytest.approx(flow.param("blocks.0.attn.c_attn.lora_B").norm)
    call_ids = {c["id"] for c in graph.calls}
    assert "call:blocks.0" in ov["values"] and all(k in graph.nx or k[5:] in call_ids for k in ov["values"])
    assert all(v in ("no-grad", "nan", "flag") for v in ov["marks"].values())
    assert all(k in graph.nx for k in ov["marks"])


def test_histograms_are_fractions() -> None:
    model = MLP()
    model(torch.randn(3, 4)).sum().backward()
    edges, hists = layer_histograms(model, bins=16)
    assert len(edges) == 17 and set(hists) == {"fc1", "fc2"}
    assert sum(hists["fc1"]) == pytest.approx(1.0)


def test_dashboard_links_selection_both_ways() -> None:
    model, loss, cap = _cut_lora()
    loss.backward()
    dash = gv.Dashboard(model, loss, capture=cap)
    assert dash.graph.overlay["values"]
    assert "blocks.1.attn.c_attn" in dash.layers and "blocks.0.attn.c_attn.base" not in dash.layers  # frozen
    dash.select("blocks.0.attn.c_attn")  # as a tap in the chart does, through BokehModel
    assert dash.graph.selected == "blocks.0.attn.c_attn"
    dash.select("blocks.1.attn.c_attn")  # cut off: not in the graph; its first dead parameter is selected, which
    assert dash.graph.selected == "p:blocks.1.attn.c_attn.lora_A"  # the page reaches through the cut that left it
    assert "dead-adapter" in dash.info.value
    dash.graph.selected = "blocks.0"  # as a click in the graph does
    assert dash.selected_layers == ["blocks.0.attn.c_attn", "blocks.0.attn.c_proj", "blocks.0.mlp.c_proj"]
    leaf = dash.graph.graph.leaves()["blocks.0.attn.c_proj.lora_A"]
    dash.graph.selected = leaf
    assert dash.selected_layers == ["blocks.0.attn.c_proj"]
    # names from the model reach the page as text
    assert "<script" not in dash.info.value

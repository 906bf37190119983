"""Bug-zoo cases for ``gv.doctor``: one broken training loop per finding kind, each with PyTorch's truth.

The truth is measured by running the same loop without the doctor: the parameter that really never
moves, the gradient that really doubles, the error PyTorch really raises.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.bugzoo.case import Case, Outcome, flag_outcome


def _findings(dx: gv.Diagnosis) -> set[tuple[str, str]]:
    return {(f.kind, f.target) for f in dx.findings}


def _never_moved(model: nn.Module, step: Callable[[], Any], steps: int = 2) -> set[str]:
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(steps):
        step()
    return {n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])}


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _training_step(opt: torch.optim.Optimizer, loss: Callable[[], torch.Tensor]) -> Callable[[], None]:
    """The usual loop body: zero_grad, loss, backward, optimizer step."""

    def step() -> None:
        opt.zero_grad()
        loss().backward()
        opt.step()

    return step


_X, _Y = torch.randn(16, 8, generator=torch.Generator().manual_seed(3)), torch.randn(16, 1)


def stale_grad() -> Outcome:
    """No zero_grad in the loop. Truth: step 2's .grad is step 1's gradient plus step 2's own."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        nn.functional.mse_loss(model(_X), _Y).backward()
        opt.step()

    dx = gv.doctor(step, model, opt)
    step()
    first = model[0].weight.grad.clone()
    fresh = copy.deepcopy(model)
    fresh.zero_grad(set_to_none=True)
    nn.functional.mse_loss(fresh(_X), _Y).backward()  # step 2's own gradient, at the moved weights
    step()
    summed = torch.allclose(model[0].weight.grad, first + fresh[0].weight.grad, atol=1e-6)
    return flag_outcome({("stale-grad", "(model)")} if summed else set(), _findings(dx))


def _missing_from_optimizer(zero: str) -> Outcome:
    model = _mlp()
    opt = torch.optim.SGD([*model[0].parameters(), model[2].weight], lr=0.1)  # 2.bias forgotten

    def step() -> None:
        (opt if zero == "opt" else model).zero_grad()
        nn.functional.mse_loss(model(_X), _Y).backward()
        opt.step()

    dx = gv.doctor(step, model, opt)
    dx_blind = gv.doctor(step, model)  # without the optimizer: from what the step did
    truth = {("not-in-optimizer", n) for n in _never_moved(model, step)}
    both = flag_outcome(truth, _findings(dx))
    blind = flag_outcome(truth, _findings(dx_blind))
    return Outcome(f"{both.expected} (with and without optimizer=)", f"{both.got} | {blind.got}",
                   both.ok and blind.ok, both.false_alarms + blind.false_alarms)


def not_in_optimizer_opt_zero_grad() -> Outcome:
    """A parameter missing from the optimizer, loop calling opt.zero_grad(): not blamed on zero_grad."""
    return _missing_from_optimizer("opt")


def not_in_optimizer_model_zero_grad() -> Outcome:
    """The same with model.zero_grad(): its gradient is cleared, yet it never moves."""
    return _missing_from_optimizer("model")


class _PlainAttrs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 1)
        self.scale = torch.ones(1, requires_grad=True)  # the bug: not an nn.Parameter
        self.experts = [nn.Linear(8, 8), nn.Linear(8, 8)]  # the bug: a plain list

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = sum(e(x) for e in self.experts)
        return self.fc(h) * self.scale


def not_a_parameter() -> Outcome:
    """A plain tensor attribute that requires grad and modules in a plain list. Truth: model.parameters()
    misses them (so the optimizer built from it does too)."""
    model = _PlainAttrs()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    step = _training_step(opt, lambda: nn.functional.mse_loss(model(_X), _Y))

    dx = gv.doctor(step, model, opt)
    ids = {id(p) for p in model.parameters()}
    truth = set()
    if id(model.scale) not in ids:
        truth.add(("not-a-parameter", "scale"))
    if all(id(p) not in ids for e in model.experts for p in e.parameters()):
        truth.add(("not-a-parameter", "experts"))
    return flag_outcome(truth, _findings(dx))


def frozen_module() -> Outcome:
    """The optimizer holds a module frozen by mistake. Truth: its parameters never move."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model[0].requires_grad_(False)

    step = _training_step(opt, lambda: nn.functional.mse_loss(model(_X), _Y))

    dx = gv.doctor(step, model, opt)
    still = _never_moved(model, step)
    truth = {("frozen", "0")} if still == {"0.weight", "0.bias"} else set()
    return flag_outcome(truth, _findings(dx))


class _Cut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).detach())  # the bug


def detached() -> Outcome:
    """A detach() between body and head. Truth: body's .grad stays None; the finding names the line."""
    torch.manual_seed(0)
    model = _Cut()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    step = _training_step(opt, lambda: nn.functional.mse_loss(model(_X), _Y))

    dx = gv.doctor(step, model, opt)
    step()
    truth = {("detached", n) for n, p in model.named_parameters() if p.grad is None}
    out = flag_outcome(truth, _findings(dx))
    lined = all("cases_doctor.py:" in f.evidence for f in dx.of_kind("detached"))
    return Outcome(out.expected + " (with the source line)", out.got, out.ok and lined, out.false_alarms)


class _Inplace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(self.a(x))
        h.mul_(2)  # the bug: sigmoid saved its output for backward
        return self.b(h)


def inplace() -> Outcome:
    """An in-place op on a tensor backward needs. Truth: PyTorch raises; the doctor names mul_ and its line."""
    torch.manual_seed(0)
    model = _Inplace()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    step = _training_step(opt, lambda: model(_X).sum())

    try:
        step()
        raised = False
    except RuntimeError as err:
        raised = "inplace" in str(err)
    dx = gv.doctor(step, model, opt)
    out = flag_outcome({("inplace", "mul_")} if raised else set(), _findings(dx))
    lined = all("cases_doctor.py:" in f.message for f in dx.of_kind("inplace"))
    return Outcome(out.expected + " (with the source line)", out.got, out.ok and lined, out.false_alarms)


def eval_mode() -> Outcome:
    """Training in eval() mode: dropout is off. Truth: model.training is False while the weights move."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.eval()  # the bug (left over from an evaluation)

    step = _training_step(opt, lambda: nn.functional.mse_loss(model(_X), _Y))

    dx = gv.doctor(step, model, opt)
    truth = {("mode", "(model)")} if not model.training else set()
    return flag_outcome(truth, _findings(dx))


def submodule_eval() -> Outcome:
    """The model trains but its dropout was left in eval() (model.train() then model[2].eval()). Truth: the
    same batch gives the same output twice in training mode (no unit dropped) while the weights move."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    model[2].eval()  # the bug

    step = _training_step(opt, lambda: nn.functional.mse_loss(model(_X), _Y))

    dx = gv.doctor(step, model, opt)
    with torch.no_grad():
        same = torch.equal(model(_X), model(_X))
    moved = _never_moved(model, step) == set()
    truth = {("mode", "(model)")} if model.training and same and moved else set()
    return flag_outcome(truth, _findings(dx))


def train_mode_evaluation() -> Outcome:
    """An evaluation step left in train() mode. Truth: dropout makes two evaluations of the same batch
    differ, and batch norm's running mean moves."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 1))
    scores: list[float] = []

    def evaluate() -> None:
        with torch.no_grad():
            scores.append(nn.functional.mse_loss(model(_X), _Y).item())

    dx = gv.doctor(evaluate, model)
    mean = model[1].running_mean.clone()
    evaluate()
    evaluate()
    truth = {("mode", "(model)")} if scores[-1] != scores[-2] and not torch.equal(mean, model[1].running_mean) \
        else set()
    return flag_outcome(truth, _findings(dx))


def dead_adapter() -> Outcome:
    """LoRA adapters, base frozen, blocks.1.attn's output detached. Truth: those adapters' .grad stays None."""
    from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss

    torch.manual_seed(0)
    model = add_lora(GPT2(GPT2Config.small_test()))
    attn = model.blocks[1].attn
    original = attn.forward
    attn.forward = lambda h: original(h).detach()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    step = _training_step(opt, lambda: gpt2_loss(model, batch=2))

    dx = gv.doctor(step, model, opt)
    step()
    dead = {n.split(".lora_")[0] for n, p in model.named_parameters() if p.requires_grad and p.grad is None}
    cut = {(f.kind, f.target) for f in dx.findings if f.kind in ("detached", "unused-parameter")}
    return flag_outcome({("dead-adapter", d) for d in dead}, _findings(dx), allowed=cut)


def vanishing() -> Outcome:
    """A 20-layer sigmoid MLP through the doctor: its first layers vanishing, judged as gradient_flow does."""
    from gradviz_nb.bugzoo.cases_flow import deep_sigmoid

    model = deep_sigmoid()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 16, generator=torch.Generator().manual_seed(1)), torch.zeros(64, 1)

    step = _training_step(opt, lambda: nn.functional.mse_loss(model(x), y))

    dx = gv.doctor(step, model, opt)
    # the truth, from the real gradients: layers no step at lr 1 can move at float32 resolution must be
    # named; layers more than 10x under the output layers' gradient/weight ratio may be
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    ratios = {n.rpartition(".")[0]: (p.grad.norm() / p.norm()).item()
              for n, p in model.named_parameters() if n.endswith("weight")}
    top = statistics.median(list(ratios.values())[-5:])
    eps = torch.finfo(torch.float32).eps
    return flag_outcome({("vanishing", k) for k, r in ratios.items() if r < eps}, _findings(dx),
                        allowed={("vanishing", k) for k, r in ratios.items() if r < top / 10})


def healthy_evaluation() -> Outcome:
    """An evaluation in eval() mode under no_grad: ok."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 1))
    model.eval()

    def evaluate() -> None:
        with torch.no_grad():
            nn.functional.mse_loss(model(_X), _Y).item()

    return flag_outcome(set(), _findings(gv.doctor(evaluate, model)))


class _DataRead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(nn.functional.linear(x, self.a.weight.data, self.a.bias)))  # the bug


def data_access() -> Outcome:
    """A weight read through .data. Truth: its .grad stays None while its bias gets one."""
    torch.manual_seed(0)
    model = _DataRead()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    step = _training_step(opt, lambda: nn.functional.mse_loss(model(_X), _Y))

    dx = gv.doctor(step, model, opt)
    step()
    truth = {("data-access", n) for n, p in model.named_parameters() if p.grad is None}
    return flag_outcome(truth, _findings(dx))


def unused_parameter() -> Outcome:
    """A head that is built but never used. Truth: its .grad stays None (DDP without
    find_unused_parameters fails on it)."""
    torch.manual_seed(0)
    model = nn.ModuleDict({"body": nn.Linear(8, 1), "aux": nn.Linear(8, 1)})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    step = _training_step(opt, lambda: nn.functional.mse_loss(model["body"](_X), _Y))

    dx = gv.doctor(step, model, opt)
    step()
    truth = {("unused-parameter", n) for n, p in model.named_parameters() if p.grad is None}
    return flag_outcome(truth, _findings(dx))


def spike() -> Outcome:
    """The second batch holds an outlier 1000x the others. Truth: the gradient norm of the first layer
    really jumps more than 10x between the two steps."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    batches = iter([(_X, _Y), (_X * 1000, _Y)])
    norms: list[float] = []

    def step() -> None:
        x, y = next(batches)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        norms.append(model[0].weight.grad.norm().item())
        opt.step()

    dx = gv.doctor(step, model, opt, steps=2)
    truth = {("spike", layer) for layer in ("0", "2")} if norms[1] > 10 * norms[0] else set()
    return flag_outcome(truth, _findings(dx))


class _LogHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.relu(self.fc(h)))  # the bug: log of a value that reaches 0


def nan_origin() -> Outcome:
    """A forward log(0) in module 'head'. Truth: relu really outputs zeros there and log(0) is -inf, so the
    loss is not finite; the doctor names the forward log in 'head' (anomaly mode would name a backward node)."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("body", nn.Linear(8, 16))
    model.add_module("head", _LogHead())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    step = _training_step(opt, lambda: model(_X).mean())

    with torch.no_grad():
        zeros = bool((torch.relu(model.head.fc(model.body(_X))) == 0).any())
        finite = bool(torch.isfinite(model(_X).mean()))
    dx = gv.doctor(step, model, opt)
    truth = {("nan-origin", "aten.log in head")} if zeros and not finite else set()
    got = {(f.kind, f.target.replace(".default", "")) for f in dx.findings}
    return flag_outcome(truth, got)


def healthy_loop() -> Outcome:
    """A correct loop (AdamW, zero_grad, train mode, dropout): ok, no finding."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    step = _training_step(opt, lambda: nn.functional.mse_loss(model(_X), _Y))

    return flag_outcome(set(), _findings(gv.doctor(step, model, opt)) | _findings(gv.doctor(step, model)))


CASES: list[Case] = [
    Case("doctor-stale-grad", "stale-grad", stale_grad),
    Case("doctor-not-in-optimizer-opt-zero", "not-in-optimizer", not_in_optimizer_opt_zero_grad),
    Case("doctor-not-in-optimizer-model-zero", "not-in-optimizer", not_in_optimizer_model_zero_grad),
    Case("doctor-not-a-parameter", "not-a-parameter", not_a_parameter),
    Case("doctor-frozen-module", "frozen", frozen_module),
    Case("doctor-detached", "detached", detached),
    Case("doctor-inplace", "inplace", inplace),
    Case("doctor-eval-mode", "mode", eval_mode),
    Case("doctor-unused-parameter", "unused-parameter", unused_parameter),
    Case("doctor-train-mode-evaluation", "mode", train_mode_evaluation),
    Case("doctor-submodule-eval", "mode", submodule_eval),
    Case("doctor-data-access", "data-access", data_access),
    Case("doctor-healthy-evaluation", "healthy", healthy_evaluation),
    Case("doctor-dead-adapter", "dead-adapter", dead_adapter),
    Case("doctor-vanishing", "vanishing", vanishing),
    Case("doctor-spike", "spike", spike),
    Case("doctor-nan-origin", "nan-origin", nan_origin),
    Case("doctor-healthy-loop", "healthy", healthy_loop),
]

"""The one sandbox (gradviz_nb/probes/sandbox.py), and the bugs it fixed in the probes that run user code.

Each probe test runs twice: the user's code succeeding, and raising. Before the sandbox, ``verify`` and
``GraphWidget.from_fn`` moved BatchNorm statistics (and from_fn the torch RNG), ``gv.gradcheck(..., model=m)``
moved BatchNorm statistics, and ``gv.doctor`` put every ``.grad`` back as a new tensor object.
"""

from __future__ import annotations

import gc
import random
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import gradviz_nb as gv
from gradviz_nb.probes.rerun import Rerunnable
from gradviz_nb.probes.sandbox import sandbox


def _bn_model() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    nn.functional.cross_entropy(model(x), y).backward()  # the user holds gradients
    return model, opt, x, y


def _stats(model: nn.Module) -> list[torch.Tensor]:
    bn = model[1]
    return [bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


class Boom(RuntimeError):
    pass


def _fails(fn: Callable[[], Any], after: int) -> Callable[[], Any]:
    """``fn`` that raises on its ``after``-th call (0: never), after its forward ran."""
    calls = [0]

    def wrapped() -> Any:
        calls[0] += 1
        out = fn()
        if calls[0] == after:
            raise Boom("the user's code failed")
        return out

    return wrapped


# -- the bugs --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "raises"])
def test_verify_leaves_batchnorm_statistics(fail: bool) -> None:
    model, _, x, y = _bn_model()
    rerun = Rerunnable(lambda: nn.functional.cross_entropy(model(x), y), model)
    stats, rng = _stats(model), torch.get_rng_state()
    rerun.fn = _fails(rerun.fn, 1 if fail else 0)
    if fail:
        with pytest.raises(Boom):
            rerun.verify(freeze=[rerun.graph.find("0.weight")])
    else:
        assert rerun.verify(freeze=[rerun.graph.find("0.weight")])["agree"]
    assert _same(stats, _stats(model)), "verify moved the BatchNorm statistics"
    assert torch.equal(rng, torch.get_rng_state())


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "raises"])
def test_from_fn_leaves_batchnorm_statistics_and_rng(fail: bool) -> None:
    model, _, x, y = _bn_model()
    stats, rng = _stats(model), torch.get_rng_state()
    fn = _fails(lambda: nn.functional.cross_entropy(model(x), y), 1 if fail else 0)
    if fail:
        with pytest.raises(Boom):
            gv.GraphWidget.from_fn(fn, model=model)
    else:
        w = gv.GraphWidget.from_fn(fn, model=model)
        w.toggles = {"detach": [], "freeze": [w.graph.find("4.weight")]}
        assert w.verify()["agree"]
    moved = [what for what, same in (("BatchNorm statistics", _same(stats, _stats(model))),
                                     ("torch RNG (dropout)", torch.equal(rng, torch.get_rng_state()))) if not same]
    assert moved == [], f"from_fn moved: {moved}"


def test_widget_verify_that_raises_leaves_state() -> None:
    model, _, x, y = _bn_model()
    fn = _fails(lambda: nn.functional.cross_entropy(model(x), y), 2)  # the construction runs, the re-run fails
    w = gv.GraphWidget.from_fn(fn, model=model)
    stats, rng = _stats(model), torch.get_rng_state()
    assert "the user's code failed" in w.verify()["error"]
    assert _same(stats, _stats(model)) and torch.equal(rng, torch.get_rng_state())


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "raises"])
def test_gradcheck_with_a_model_leaves_batchnorm_statistics(fail: bool) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh()).double()
    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    stats = _stats(model)
    fn = _fails(lambda: model(x).sum(), 3 if fail else 0)
    if fail:
        with pytest.raises(Boom):
            gv.gradcheck(lambda _: fn(), (x,), model=model)
    else:
        assert gv.gradcheck(lambda v: model(v).sum(), (x,), model=model).ok
    assert _same(stats, _stats(model)), "gradcheck moved the BatchNorm statistics"


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "raises"])
def test_doctor_puts_back_the_same_grad_objects(fail: bool) -> None:
    model, opt, x, y = _bn_model()
    grads = {n: p.grad for n, p in model.named_parameters()}
    values = {n: g.clone() for n, g in grads.items() if g is not None}
    momenta = {n: opt.state[p]["exp_avg"] for n, p in model.named_parameters()}

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    if fail:
        with pytest.raises(Boom):
            gv.doctor(_fails(step, 2), model, opt)
    else:
        gv.doctor(step, model, opt)
    for n, p in model.named_parameters():
        assert p.grad is grads[n], f".grad of {n} is a new object"
        assert torch.equal(p.grad, values[n])
        assert opt.state[p]["exp_avg"] is momenta[n]


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "raises"])
def test_find_nonfinite_leaves_the_step_undone(fail: bool) -> None:
    model, opt, x, y = _bn_model()
    weight, stats, grad = model[0].weight.clone(), _stats(model), model[0].weight.grad

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    if fail:
        with pytest.raises(Boom):
            gv.find_nonfinite(_fails(step, 1), model=model, optimizer=opt)
    else:
        assert gv.find_nonfinite(step, model=model, optimizer=opt) is None
    assert torch.equal(weight, model[0].weight) and _same(stats, _stats(model))
    assert model[0].weight.grad is grad


# -- the sandbox itself ----------------------------------------------------------------------------------------


def test_everything_comes_back_after_a_keyboard_interrupt() -> None:
    model, opt, x, y = _bn_model()
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    weight, w_data, grad, grad_value = model[0].weight, model[0].weight.data_ptr(), model[0].weight.grad, \
        model[0].weight.grad.clone()
    bias = model[4].bias
    exp_avg = opt.state[weight]["exp_avg"]
    stats, rngs = _stats(model), (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    hook = model[0].register_forward_hook(lambda *a: None)  # the user's own hook: must survive
    grad_mode, anomaly = torch.is_grad_enabled(), torch.is_anomaly_enabled()
    modes = torch._C._len_torch_function_stack()
    with pytest.raises(KeyboardInterrupt), sandbox(model, optimizer=opt, schedulers=[sched]):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
        model[0].weight.grad = torch.zeros_like(weight)  # a replaced .grad object
        model[4].bias = nn.Parameter(torch.zeros(2))  # a replaced parameter
        weight.data = torch.ones_like(weight)  # a swapped storage
        weight.register_hook(lambda g: g)
        weight.requires_grad_(False)
        hook.remove()
        model[1].register_forward_pre_hook(lambda *a: None)
        nn.modules.module.register_module_forward_hook(lambda *a: None)
        opt.register_step_pre_hook(lambda *a: None)
        model.eval()
        random.random(), np.random.rand(), torch.rand(1)
        torch.set_grad_enabled(False)
        torch.set_anomaly_enabled(True)
        TorchFunctionMode().__enter__()  # a mode left pushed
        raise KeyboardInterrupt
    assert model[0].weight is weight and weight.data_ptr() == w_data and weight.requires_grad
    assert weight.grad is grad and torch.equal(grad, grad_value)
    assert model[4].bias is bias and opt.state[weight]["exp_avg"] is exp_avg
    assert opt.param_groups[0]["lr"] == 1e-2 and sched.last_epoch == 0
    assert _same(stats, _stats(model)) and model.training and all(m.training for m in model.modules())
    assert torch.equal(rngs[0], torch.get_rng_state()) and rngs[1] == random.getstate()
    assert np.array_equal(rngs[2], np.random.get_state()[1])
    assert len(model[0]._forward_hooks) == 1 and not model[1]._forward_pre_hooks and not weight._backward_hooks
    assert not nn.modules.module._global_forward_hooks and not opt._optimizer_step_pre_hooks
    assert (torch.is_grad_enabled(), torch.is_anomaly_enabled(), torch._C._len_torch_function_stack()) == (
        grad_mode, anomaly, modes)
    hook.remove()


def test_no_reference_is_kept_after_exit() -> None:
    model, opt, x, _ = _bn_model()
    with sandbox(model, optimizer=opt, tensors=[x]) as box:
        model(x).sum().backward()
    ref = weakref.ref(model)
    del model, opt
    gc.collect()
    assert ref() is None, "the sandbox kept the model alive"
    assert box is not None  # the sandbox object itself is still held here


def test_unchanged_tensors_are_not_written() -> None:
    """A graph the user still holds stays usable: nothing unchanged is copied back (version counters)."""
    model, _, x, y = _bn_model()
    model.eval()
    loss = nn.functional.cross_entropy(model(x), y)  # saves the eval-mode BatchNorm statistics
    with sandbox(model):
        model(x)
    loss.backward()  # would raise "modified by an inplace operation" had the statistics been written


# -- the lazy sandbox (find_nonfinite): copies on write, verifies the rest ------------------------------------------


def test_lazy_sandbox_puts_back_what_was_announced_before_the_write() -> None:
    model = _bn_model()[0]
    weight, grad, grad_value = model[0].weight.detach().clone(), model[0].weight.grad, model[0].weight.grad.clone()
    with sandbox(model, lazy=True) as box:
        box.before_write(model[0].weight.data[0])  # a view of the weight: the storage decides
        box.before_write(grad)
        with torch.no_grad():
            model[0].weight.data[0].add_(1.0)
            grad.mul_(3.0)
    assert torch.equal(model[0].weight, weight)
    assert model[0].weight.grad is grad and torch.equal(grad, grad_value)


def test_lazy_sandbox_refuses_a_write_it_was_not_told_about() -> None:
    """A write outside torch (no version bump, no dispatch) is caught by the sum and named, never silent."""
    model = _bn_model()[0]
    with pytest.raises(gv.GradvizError, match=r"4\.bias"), sandbox(model, lazy=True):
        model[4].bias.detach().numpy()[:] = 5.0
    with pytest.raises(gv.GradvizError, match=r"0\.weight"), sandbox(model, lazy=True), torch.no_grad():
        model[0].weight.mul_(2.0)  # an in-place torch op nobody announced: the version counter moved


def test_find_nonfinite_puts_back_batchnorm_statistics_it_writes_undeclared() -> None:
    """native_batch_norm writes its running statistics without declaring it in its schema."""
    model, _, x, y = _bn_model()
    stats = _stats(model)
    assert gv.find_nonfinite(lambda: nn.functional.cross_entropy(model(x), y).backward(), model=model) is None
    assert _same(stats, _stats(model))


# -- restoring by version counters: exact, and only what changed is compared or written ----------------------------


def _full_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """A deep copy of everything a step can change, to compare the sandbox's in-place restore against."""
    return {"model": {k: v.clone() for k, v in model.state_dict().items()},
            "grads": {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()},
            "opt": {i: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
                    for i, s in enumerate(opt.state.values())},
            "rng": torch.get_rng_state().clone()}


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def test_restore_by_version_counters_is_exact_against_a_full_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors whose version counter moved are written back at once (no comparison first); the others are
    compared, so writes no counter sees (``.data``, a numpy view) come back too. The result equals a full
    copy taken before: parameters, BatchNorm statistics, ``.grad``, Adam's state, the RNG."""
    import gradviz_nb.probes.sandbox as sandbox_module

    model, opt, x, y = _bn_model()
    before = _full_state(model, opt)
    aside = torch.arange(4.0)  # a tensor only a numpy view writes: its counter never moves
    untouched = model[4].bias
    version = untouched._version
    compared: list[tuple[int, ...]] = []
    real_same = sandbox_module._same

    def counting(a: torch.Tensor, b: torch.Tensor) -> bool:
        compared.append(tuple(a.shape))
        return real_same(a, b)

    monkeypatch.setattr(sandbox_module, "_same", counting)
    with sandbox(model, optimizer=opt, tensors=[aside]):
        nn.functional.cross_entropy(model(x), y).backward()  # BatchNorm statistics, dropout's RNG, .grad added to
        opt.step()  # every parameter and Adam's state written by torch ops: version counters move
        with torch.no_grad():
            untouched.copy_(before["model"]["4.bias"])  # written by torch, same values
        model[0].weight.data.mul_(3.0)  # no version counter moves for this write
        view = model[1].running_mean.numpy()
        view += 1.0  # nor for this one
        aside.numpy()[:] = 5.0
    after = _full_state(model, opt)
    for part in before:
        assert _equal(before[part], after[part]), part
    assert torch.equal(aside, torch.arange(4.0))
    assert untouched._version > version
    # Compared: only the tensors whose counters never moved; the rest were written back without a comparison.
    # BatchNorm's kernel updates its running mean and variance without moving their counters (torch 2.13).
    assert sorted(compared) == [(4,), (8,), (8,)]


def test_a_tensor_nothing_wrote_is_compared_not_written() -> None:
    model, opt, x, _ = _bn_model()
    head = model[4].weight
    version, grad_version = head._version, head.grad._version if head.grad is not None else -1
    with sandbox(model, optimizer=opt):
        model(x)  # BatchNorm statistics move, the head is only read
    assert head._version == version and (head.grad is None or head.grad._version == grad_version)

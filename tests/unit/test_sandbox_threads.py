"""The sandbox undoes only what its own thread changed: torch's process-wide hook dicts are shared by every
thread, so a snapshot written back by one thread lost or resurrected another thread's hooks.

Each test orders two threads with events, so the interleaving that used to break is forced, not hoped for."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.modules.module as module_globals
import torch.optim.optimizer as optimizer_globals
from torch import nn

import gradviz_nb as gv
from gradviz_nb.probes.owned import Journal, for_this_thread
from gradviz_nb.probes.sandbox import sandbox


def _global_hooks() -> dict[str, int]:
    names = [n for n in dir(module_globals) if n.startswith("_global_") and n.endswith("hooks")]
    out = {n: len(getattr(module_globals, n)) for n in names}
    out.update({n: len(getattr(optimizer_globals, n)) for n in ("_global_optimizer_pre_hooks",
                                                                 "_global_optimizer_post_hooks")})
    return out


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as err:  # reported by the test, not lost in the thread
            errors.append(err)

    t = threading.Thread(target=run)
    t.start()
    return t, errors


def test_a_capture_stopped_while_another_thread_sandboxes_stays_stopped() -> None:
    """B captures, A enters a sandbox, B stops: A's exit must not put B's dead hooks back."""
    before = _global_hooks()
    entered, stopped = threading.Event(), threading.Event()

    def a() -> None:
        with sandbox(_model()):
            entered.set()
            assert stopped.wait(30)

    t, errors = _in_thread(a)
    model = _model()
    with gv.capture(model):
        assert entered.wait(30)
        model(torch.randn(2, 4))
    stopped.set()
    t.join()
    assert errors == []
    assert _global_hooks() == before


def test_a_sandbox_ending_leaves_another_threads_live_capture_alone() -> None:
    """A enters a sandbox, B starts a capture, A exits: B's hooks stay, and B's graph has its module calls."""
    before = _global_hooks()
    entered, started, left = threading.Event(), threading.Event(), threading.Event()

    def a() -> None:
        with sandbox(_model()):
            entered.set()
            assert started.wait(30)
        left.set()

    t, errors = _in_thread(a)
    model = _model()
    assert entered.wait(30)
    with gv.capture(model) as cap:
        started.set()
        assert left.wait(30)
        loss = model(torch.randn(2, 4)).sum()
    t.join()
    assert errors == []
    assert [c.path for c in cap.calls] == ["", "0", "1", "2"]
    assert [c["path"] for c in gv.trace(loss, model=model, capture=cap).calls] == ["0", "1", "2"]
    assert _global_hooks() == before


def test_user_code_in_a_sandbox_loses_its_own_global_hooks_only() -> None:
    """The code in A's sandbox adds a global hook and removes one it found: both undone. B's hook, added
    meanwhile, stays; B's hook removed meanwhile stays removed."""
    b_gone = module_globals.register_module_forward_hook(lambda *a: None)
    found = module_globals.register_module_forward_pre_hook(lambda *a: None)
    before = _global_hooks()
    ids = list(module_globals._global_forward_pre_hooks)
    b_kept: list[Any] = []
    with sandbox(_model()):
        module_globals.register_module_forward_hook(lambda *a: None)  # the user's, never removed
        found.remove()
        t, errors = _in_thread(lambda: (b_kept.append(module_globals.register_module_full_backward_hook(
            lambda *a: None)), b_gone.remove()))
        t.join()
    assert errors == []
    assert list(module_globals._global_forward_pre_hooks) == ids  # put back, in its place
    assert len(module_globals._global_backward_hooks) == before["_global_backward_hooks"] + 1  # B's stays
    assert len(module_globals._global_forward_hooks) == before["_global_forward_hooks"] - 1  # B's stays removed
    b_kept[0].remove()
    found.remove()


def test_two_threads_asking_why_ten_times_leave_no_hook() -> None:
    before = _global_hooks()

    def worker() -> None:
        model = _model()
        model[0].weight.requires_grad_(False)
        x = torch.randn(3, 4)
        for _ in range(10):
            gv.why(model, "0.weight", fn=lambda: model(x).sum()).prove()

    started = [_in_thread(worker) for _ in range(2)]
    for t, errors in started:
        t.join()
        assert errors == []
    assert _global_hooks() == before


def test_a_capture_records_only_its_own_threads_module_calls() -> None:
    """Sequence numbers are per thread: another thread's forward inside a capture is not the capture's."""
    model, other = _model(), _model()
    inside = threading.Event()
    done = threading.Event()

    def b() -> None:
        assert inside.wait(30)
        other(torch.randn(2, 4))
        model(torch.randn(2, 4))  # the captured model itself, called from another thread
        done.set()

    t, errors = _in_thread(b)
    with gv.capture(model) as cap:
        inside.set()
        assert done.wait(30)
        model(torch.randn(2, 4))
    t.join()
    assert errors == []
    assert [c.path for c in cap.calls] == ["", "0", "1", "2"]


def test_journal_undoes_only_this_threads_changes() -> None:
    j = Journal().open()
    try:
        mine = module_globals.register_module_forward_hook(lambda *a: None)
        theirs: list[Any] = []
        t, _ = _in_thread(lambda: theirs.append(module_globals.register_module_forward_hook(lambda *a: None)))
        t.join()
        j.undo()
        keys = set(module_globals._global_forward_hooks)
        assert mine.id not in keys and theirs[0].id in keys
    finally:
        j.close()
        theirs[0].remove()


def test_for_this_thread_is_invisible_to_other_threads() -> None:
    """A replacement applies to the calling thread only, and the attribute ends as it began."""
    seen: list[str] = []
    original = vars(torch.optim.SGD).get("zero_grad", None)
    go, checked = threading.Event(), threading.Event()
    opt = torch.optim.SGD(_model().parameters(), lr=0.1)

    def other() -> None:
        assert go.wait(30)
        opt.zero_grad()  # through the dispatcher, to the original: not seen
        checked.set()

    t, errors = _in_thread(other)

    def mine(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return original(self, *args, **kwargs)

    with for_this_thread(torch.optim.Optimizer, "zero_grad", mine):
        go.set()
        assert checked.wait(30)
        opt.zero_grad()
    t.join()
    assert errors == []
    assert seen == [threading.current_thread().name]
    assert vars(torch.optim.SGD).get("zero_grad", None) is original
    assert "zero_grad" in vars(torch.optim.Optimizer) and not hasattr(
        vars(torch.optim.Optimizer)["zero_grad"], "__gradviz_dispatcher__")


class _NoGradNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.enc, self.head = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            h = self.enc(x)
        return self.head(h)


def test_proving_a_no_grad_cause_leaves_other_threads_no_grad_alone() -> None:
    """prove() runs this thread's no_grad blocks with grad enabled; a thread doing ``with torch.no_grad()``
    beside it never sees grad enabled inside (it did in 46 of 95 blocks when the class was patched)."""
    model, x = _NoGradNet(), torch.randn(3, 4)
    stop, seen = threading.Event(), []

    def other() -> None:
        while not stop.is_set():
            with torch.no_grad():
                seen.append(torch.is_grad_enabled())

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often: the other thread runs while prove() does
    t, errors = _in_thread(other)
    try:
        proofs = []
        for _ in range(10):
            w = gv.why(model, "enc.weight", fn=lambda: model(x).sum())
            assert w.kind == "no-grad", w.text()
            proofs.append(w.prove())
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(switch)
    assert errors == [] and seen and not any(seen), f"{sum(seen)} of {len(seen)} blocks saw grad enabled"
    assert all(p.proven for p in proofs)
    assert "__enter__" in vars(torch.autograd.grad_mode.no_grad)


def test_proving_a_reentrant_checkpoint_cause_leaves_the_class_dict_as_it_was() -> None:
    from torch.utils.checkpoint import CheckpointFunction, checkpoint

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.emb = nn.Embedding(10, 4).requires_grad_(False)
            self.inner, self.head = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(checkpoint(self.inner, self.emb(ids), use_reentrant=True))

    class Sub(CheckpointFunction):
        pass

    model, ids = Block(), torch.randint(0, 10, (2, 3))
    before = dict(vars(CheckpointFunction))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = gv.why(model, "inner.weight", fn=lambda: model(ids).sum())
        assert w.kind == "reentrant-checkpoint", w.text()
        assert w.prove().proven
    assert dict(vars(CheckpointFunction)) == before and "apply" not in vars(Sub)
    # a subclass's apply is its own again (a Python classmethod on torch 2.13, a C one on 2.15: compared raw)
    assert inspect.getattr_static(Sub, "apply") is inspect.getattr_static(torch.autograd.Function, "apply")


def test_per_thread_wrappers_ending_in_any_order_leave_the_entry_points_as_they_began() -> None:
    """B follows nested backward calls (the recorder's wrapper), A wraps backward for a doctor; B enters first
    and leaves first. A wrapper that saved and wrote back the function left B's wrapper installed for good."""
    from gradviz_nb.probes.backward.nested import Nested

    before = (torch.autograd.backward, torch.autograd.grad)
    b_in, a_in, b_out = threading.Event(), threading.Event(), threading.Event()

    def b() -> None:
        with Nested(lambda roots, node: lambda: None):
            b_in.set()
            assert a_in.wait(30)
        b_out.set()

    t, errors = _in_thread(b)
    assert b_in.wait(30)
    with for_this_thread(torch.autograd, "backward", lambda original, *a, **k: original(*a, **k)):
        a_in.set()
        assert b_out.wait(30)
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()  # through both layers, to PyTorch
    t.join()
    assert errors == [] and x.grad is not None and x.grad.tolist() == [2.0, 2.0]
    assert (torch.autograd.backward, torch.autograd.grad) == before


def test_a_c_classmethod_is_replaced_for_this_thread_and_binds_the_class_called() -> None:
    # torch 2.15's Function.apply is a C classmethod (classmethod_descriptor, no __func__), as dict.fromkeys is.
    from gradviz_nb.probes.owned import for_this_thread

    class D(dict):  # type: ignore[type-arg]
        pass

    class E(D):
        pass

    seen: list[type] = []

    def spy(original, cls, keys):  # type: ignore[no-untyped-def]
        seen.append(cls)
        return original(cls, keys)

    with for_this_thread(D, "fromkeys", spy):
        assert type(E.fromkeys("ab")) is E and dict(D.fromkeys("a")) == {"a": None}
    assert seen == [E, D] and "fromkeys" not in vars(D) and type(E.fromkeys("a")) is E

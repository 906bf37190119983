"""GENERATED: every public entry point leaves the user's model, optimizer and torch's global state as it was.

A :func:`fingerprint` records values (hashes), object identities (each parameter, buffer and ``.grad``, the
optimizer's state tensors), ``requires_grad``, training modes, RNG states (torch, ``random``, NumPy), the
optimizer's state and hyper-parameters, hook counts (every module's, the global module and optimizer
hooks, tensor hooks), grad mode, anomaly mode, the mode stacks and the autograd entry points. The cases are
the product of

- ``ENTRIES``: one scenario per public entry point (the table below; ``test_every_public_name_is_covered``
  fails when ``gv.__all__`` gains a name that is neither in it nor in ``EXEMPT``),
- ``HOSTS``: a BatchNorm CNN, a dropout MLP, a GRU, and a peft LoRA GPT-2 when ``peft`` is importable,
- ``ok`` and ``fault``: for entry points that run the user's code, once more with that code failing after a
  seeded random number ``k`` of module forward calls (``RuntimeError`` or ``KeyboardInterrupt``, also
  seeded), injected by a global forward hook this file adds and removes itself,

and each asserts ``fingerprint`` before == after. Hosts start in training mode, with gradients, a frozen
parameter and Adam momenta, so BatchNorm statistics, dropout's RNG draws and ``.grad`` objects would show
any change. Observers (capture, watch, the monitor, the Lightning callback) see user code that changes
nothing by itself (eval mode, ``torch.autograd.grad``), so whatever differs is theirs.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import importlib.util
import os
import random
import tempfile
import threading
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.modules.module as module_globals
import torch.optim.optimizer as optimizer_globals
from torch import nn

import gradviz_nb as gv
from gradviz_nb.probes.rerun import Rerunnable

SEED = 20240611

# Hook dicts counted (written out here, not imported from the sandbox: the test checks it independently).
MODULE_HOOKS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
                "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
                "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")
GLOBAL_MODULE_HOOKS = tuple(n for n in dir(module_globals) if n.startswith("_global_")
                            and isinstance(getattr(module_globals, n), dict))
OPTIMIZER_HOOKS = tuple(n for n in vars(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))
                        if n.endswith("_hooks"))
GLOBAL_OPTIMIZER_HOOKS = tuple(n for n in dir(optimizer_globals) if n.startswith("_global_")
                               and isinstance(getattr(optimizer_globals, n), dict))

# -- the fingerprint ------------------------------------------------------------------------------------------


def _digest(t: torch.Tensor) -> str:
    t = t.detach()
    if t.is_sparse:
        t = t.to_dense()
    raw = t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return f"{tuple(t.shape)}:{t.dtype}:{hashlib.sha1(raw).hexdigest()}"


def _value(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return ("tensor", id(v), _digest(v))
    return ("value", repr(v))


def _hooks(owner: object, names: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(len(getattr(owner, n, None) or {}) for n in names)


def fingerprint(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """Everything the user can observe, flat: key -> comparable value."""
    fp: dict[str, Any] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        g = p.grad
        fp[f"param {n}"] = (id(p), _digest(p), p.requires_grad)
        fp[f"grad {n}"] = None if g is None else (id(g), _digest(g))
        fp[f"tensor hooks {n}"] = _hooks(p, ("_backward_hooks", "_post_accumulate_grad_hooks"))
    for n, b in model.named_buffers(remove_duplicate=False):
        fp[f"buffer {n}"] = (id(b), _digest(b))
    for n, m in model.named_modules(remove_duplicate=False):
        fp[f"module {n or '(model)'}"] = (id(m), m.training, _hooks(m, MODULE_HOOKS))
    fp["global module hooks"] = _hooks(module_globals, GLOBAL_MODULE_HOOKS)
    fp["global optimizer hooks"] = _hooks(optimizer_globals, GLOBAL_OPTIMIZER_HOOKS)
    fp["rng torch"] = _digest(torch.get_rng_state())
    fp["rng python"] = hash(random.getstate())
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    fp["rng numpy"] = (kind, hashlib.sha1(keys.tobytes()).hexdigest(), pos, has_gauss, cached)
    if optimizer is not None:
        index = {id(p): i for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
        fp["optimizer params"] = tuple(tuple(id(p) for p in g["params"]) for g in optimizer.param_groups)
        fp["optimizer groups"] = tuple(repr(sorted((k, v) for k, v in g.items() if k != "params"))
                                       for g in optimizer.param_groups)
        fp["optimizer state"] = sorted((index.get(id(p), -1), k, _value(v)) for p, s in optimizer.state.items()
                                       for k, v in s.items())
        fp["optimizer hooks"] = _hooks(optimizer, OPTIMIZER_HOOKS)
    fp["grad mode"] = torch.is_grad_enabled()
    fp["anomaly mode"] = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    fp["default dtype"] = torch.get_default_dtype()
    fp["mode stacks"] = (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack())
    fp["saved tensor hooks"] = torch._C._autograd._top_saved_tensors_default_hooks(True) is None
    fp["autograd entry points"] = (torch.autograd.backward, torch.autograd.grad, torch.Tensor.backward)
    return fp


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]


# -- host models ----------------------------------------------------------------------------------------------


@dataclass
class Host:
    name: str
    model: nn.Module
    opt: torch.optim.Optimizer | None
    x: Any
    y: Any
    loss_of: Callable[[nn.Module, Any, Any], torch.Tensor]
    calls: int = 0  # module forward calls in one forward: the fault's k is drawn from 1..calls
    small: Any = None  # a small float input for gradcheck (its numerical Jacobian costs 2 runs per element)
    extra: dict[str, Any] = field(default_factory=dict)

    def loss(self) -> torch.Tensor:
        return self.loss_of(self.model, self.x, self.y)

    def step(self) -> None:
        """One training step, as a user writes it."""
        assert self.opt is not None
        self.opt.zero_grad()
        self.loss().backward()  # type: ignore[no-untyped-call]
        self.opt.step()

    def observed(self) -> None:
        """User code an observer watches that changes nothing by itself: forward and torch.autograd.grad."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        torch.autograd.grad(self.loss(), params, allow_unused=True)


class Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU()
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.bn(self.conv(x))).mean(dim=(2, 3)))


class Rnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(5, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def _ce(m: nn.Module, x: Any, y: Any) -> torch.Tensor:
    return nn.functional.cross_entropy(m(x), y)


def _lm(m: nn.Module, ids: Any, _: Any) -> torch.Tensor:
    return m(input_ids=ids, labels=ids).loss  # type: ignore[no-any-return]


def _count_calls(model: nn.Module, run: Callable[[], Any]) -> int:
    ours, n = {id(m) for m in model.modules()}, [0]

    def count(module: nn.Module, args: Any, out: Any) -> None:
        n[0] += id(module) in ours

    handle = module_globals.register_module_forward_hook(count)
    try:
        with torch.no_grad():
            run()
    finally:
        handle.remove()
    return n[0]


def _finish(h: Host) -> Host:
    """Bring a host to a lived-in state: gradients, Adam momenta, BatchNorm statistics, training mode."""
    h.model.train()
    h.step()
    h.loss().backward()  # type: ignore[no-untyped-call]  # .grad holds values the next step would replace
    h.model.eval()
    h.calls = _count_calls(h.model, h.loss)
    h.model.train()
    return h


def _cnn() -> Host:
    torch.manual_seed(SEED)
    model = Cnn()
    g = torch.Generator().manual_seed(SEED)
    x, y = torch.randn(4, 3, 6, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
    return _finish(Host("bn_cnn", model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y, _ce,
                        small=x[:1, :, :2, :2].clone()))


def _mlp() -> Host:
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    model[3].bias.requires_grad_(False)  # a frozen parameter (its .grad stays None)
    g = torch.Generator().manual_seed(SEED)
    x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
    return _finish(Host("dropout_mlp", model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y, _ce,
                        small=x[:2].clone()))


def _gru() -> Host:
    torch.manual_seed(SEED)
    model = Rnn()
    g = torch.Generator().manual_seed(SEED)
    x, y = torch.randn(3, 4, 5, generator=g), torch.randint(0, 3, (3,), generator=g)
    return _finish(Host("gru", model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), x, y, _ce,
                        small=x[:1, :2].clone()))


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None  # no import at collection: these are slow to import
    except ImportError:
        return False


def _peft_available() -> bool:
    return _importable("peft") and _importable("transformers")


def _lora() -> Host:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import peft
    import transformers

    torch.manual_seed(SEED)  # as tests/unit/test_hf_peft.py builds it: no downloads
    cfg = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16,
                                  bos_token_id=0, eos_token_id=0)
    base = transformers.GPT2LMHeadModel(cfg)
    lora = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], lora_dropout=0.1, fan_in_fan_out=True)
    model = peft.get_peft_model(base, lora)
    ids = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(SEED))
    trainable = [p for p in model.parameters() if p.requires_grad]
    return _finish(Host("peft_lora", model, torch.optim.Adam(trainable, lr=1e-2), ids, None, _lm))


HOSTS: dict[str, Callable[[], Host]] = {"bn_cnn": _cnn, "dropout_mlp": _mlp, "gru": _gru, "peft_lora": _lora}
_BUILT: dict[str, Host] = {}


def fresh(name: str) -> Host:
    """A private copy of a host (built once per session: model and optimizer deep-copied together)."""
    if name not in _BUILT:
        _BUILT[name] = HOSTS[name]()
    base = _BUILT[name]
    model, opt = copy.deepcopy((base.model, base.opt))
    return replace(base, model=model, opt=opt, extra={})


# -- the injected fault -----------------------------------------------------------------------------------------


class Injected(RuntimeError):
    pass


@dataclass
class Fault:
    """Raise ``exc`` at the ``k``-th forward call of a host module while armed (off when ``k`` is 0)."""

    ids: set[int]
    k: int
    exc: type[BaseException]
    seen: int = 0
    fired: bool = False

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        if not self.k:
            yield
            return

        def hook(module: nn.Module, args: Any, out: Any) -> None:
            if id(module) in self.ids and not self.fired:
                self.seen += 1
                if self.seen == self.k:
                    self.fired = True
                    raise self.exc(f"injected fault at module call {self.k}")

        handle = module_globals.register_module_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()


# -- the entry points ------------------------------------------------------------------------------------------

Run = Callable[[Host, Fault, Any, Path], Any]


@dataclass(frozen=True)
class Entry:
    run: Run
    covers: tuple[str, ...] = ()
    prepare: Callable[[Host], tuple[Host, Any]] | None = None  # before the first fingerprint
    user_code: bool = False  # the entry runs the user's code: a fault case is generated
    observer: bool = False  # the user's code runs under it, in eval mode, changing nothing by itself
    skip: dict[str, str] = field(default_factory=dict)  # host -> why not


def _with_loss(h: Host) -> tuple[Host, Any]:
    return h, h.loss()


def _with_graph(h: Host) -> tuple[Host, Any]:
    return h, gv.trace(h.loss(), model=h.model)


def _two_graphs(h: Host) -> tuple[Host, Any]:
    before = gv.trace(h.loss(), model=h.model)
    leaf = next(n for n in before.leaves())
    frozen = h.model.get_parameter(leaf) if leaf in dict(h.model.named_parameters()) else None
    if frozen is not None:
        frozen.requires_grad_(False)
    after = gv.trace(h.loss(), model=h.model)
    if frozen is not None:
        frozen.requires_grad_(True)
    return h, (before, after)


def _double(h: Host) -> tuple[Host, Any]:
    model = copy.deepcopy(h.model).double()
    return replace(h, model=model, opt=None, small=h.small.double()), None


def _first_op_and_leaf(graph: gv.AutogradGraph) -> tuple[list[str], list[str]]:
    ops = [n for n, d in graph.nx.nodes(data=True) if d["kind"] == "op"]
    leaves = [n for n, d in graph.nx.nodes(data=True) if d["kind"] == "leaf" and d["names"]]
    return ops[len(ops) // 2: len(ops) // 2 + 1], leaves[:1]


def _capture(h: Host, f: Fault, _: Any, __: Path) -> None:
    with gv.capture(h.model) as cap, f.armed():
        h.observed()
    assert cap.calls


def _capture_class(h: Host, f: Fault, _: Any, __: Path) -> None:
    with gv.Capture(h.model), f.armed():
        h.observed()


def _watch(h: Host, f: Fault, _: Any, __: Path) -> None:
    gv.watch(h.model)
    try:
        with f.armed():
            h.observed()
    finally:
        gv.unwatch(h.model)


def _what_if(h: Host, f: Fault, graph: gv.AutogradGraph, _: Path) -> None:
    detach, freeze = _first_op_and_leaf(graph)
    graph.what_if(detach, freeze)


def _verify(h: Host, f: Fault, _: Any, __: Path) -> None:
    rerun = Rerunnable(h.loss, h.model)
    detach, freeze = _first_op_and_leaf(rerun.graph)
    with f.armed():
        rerun.verify(detach, freeze)


def _record_backward(h: Host, f: Fault, loss: torch.Tensor, _: Path) -> None:
    gv.record_backward(loss, model=h.model)


def _record_armed(h: Host, f: Fault, loss: torch.Tensor, _: Path) -> None:
    rec = gv.record_backward(loss, model=h.model, until="nonfinite")  # a real backward, .grad put back
    assert rec.graph.nx.number_of_nodes() > 0  # a quiet pass traces its graph here, when asked


def _doctor(h: Host, f: Fault, _: Any, __: Path) -> None:
    with f.armed():
        gv.doctor(h.step, h.model, h.opt)


def _assert_trains(h: Host, f: Fault, _: Any, __: Path) -> None:
    # a host with a finding raises: the assertion is the answer, and the state must still come back
    with f.armed(), contextlib.suppress(AssertionError):
        gv.assert_trains(h.step, h.model, h.opt)


def _one_frozen(h: Host) -> tuple[Host, Any]:
    if all(p.requires_grad for p in h.model.parameters()):
        next(iter(h.model.parameters())).requires_grad_(False)  # why names it frozen; prove re-runs unfrozen
    return h, None


def _why(h: Host, f: Fault, _: Any, __: Path) -> None:
    frozen = next(n for n, p in h.model.named_parameters() if not p.requires_grad)
    with f.armed():
        gv.why(h.model, frozen, fn=h.loss).prove()  # a run to explain, and a re-run with the fix applied


def _flow(h: Host, f: Fault, _: Any, __: Path) -> None:
    gv.gradient_flow(h.model, optimizer=h.opt)


def _monitor(h: Host, f: Fault, _: Any, __: Path) -> None:
    mon = gv.GradientMonitor(h.model, optimizer=h.opt)
    try:
        with f.armed():
            h.observed()
        mon.step()
        mon.summary()
    finally:
        mon.close()


def _nonfinite(h: Host, f: Fault, _: Any, __: Path) -> None:
    with f.armed():
        gv.find_nonfinite(h.step, model=h.model, optimizer=h.opt)


def _gradcheck(h: Host, f: Fault, _: Any, __: Path) -> None:
    model = h.model
    with f.armed():
        gv.gradcheck(lambda x: model(x).sum(), (h.small.requires_grad_(),), model=model)


def _memory(h: Host, f: Fault, graph: gv.AutogradGraph, _: Path) -> None:
    gv.memory_held(graph)


def _diff(h: Host, f: Fault, graphs: tuple[gv.AutogradGraph, gv.AutogradGraph], _: Path) -> None:
    gv.diff(*graphs)


def _export_html(h: Host, f: Fault, graph: gv.AutogradGraph, tmp: Path) -> None:
    gv.export_html(graph, tmp / "graph.html")


def _json(h: Host, f: Fault, graph: gv.AutogradGraph, _: Path) -> None:
    gv.from_json(gv.to_json(graph))


def _dot(h: Host, f: Fault, graph: gv.AutogradGraph, _: Path) -> None:
    gv.to_dot(graph)


def _graphml(h: Host, f: Fault, graph: gv.AutogradGraph, tmp: Path) -> None:
    gv.to_graphml(graph, tmp / "graph.graphml")


def _widget(h: Host, f: Fault, loss: torch.Tensor, _: Path) -> None:
    gv.GraphWidget(loss, model=h.model).close()


def _from_fn(h: Host, f: Fault, _: Any, __: Path) -> None:
    with f.armed():
        w = gv.GraphWidget.from_fn(h.loss, model=h.model)
    w.close()  # a from_fn widget holds fn (and so the model) to re-run it, until it is closed


def _widget_actions(h: Host, f: Fault, _: Any, __: Path) -> None:
    w = gv.GraphWidget.from_fn(h.loss, model=h.model)
    try:
        detach, freeze = _first_op_and_leaf(w.graph)
        w.toggles = {"detach": [f"{n}:0" for n in detach], "freeze": freeze}
        with f.armed():
            reply = w.answer({"id": 1, "kind": "verify", "body": {}})
        assert reply is not None
        if f.fired:  # the page is told; the user's state is back
            assert "injected fault" in w.verified["error"], w.verified
        else:
            assert reply["ok"] and not w.verified["error"], (reply, w.verified)
        w.answer({"id": 2, "kind": "load", "body": {"calls": [""]}})
    finally:
        w.close()


def _dashboard(h: Host, f: Fault, loss: torch.Tensor, _: Path) -> None:
    gv.Dashboard(h.model, loss)


def _hf_callback(h: Host, f: Fault, _: Any, tmp: Path) -> None:
    from gradviz_nb.integrations.transformers import GradvizCallback

    class Batches(nn.Module):  # a Trainer's model: keyword batch in, a dict with the loss out
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any, y: Any) -> dict[str, torch.Tensor]:
            return {"loss": h.loss_of(self.inner, x, y)}

    model = Batches(h.model)
    n = len(h.x)
    dataset = [{"x": h.x[i], "y": None if h.y is None else h.y[i]} for i in range(n)]

    def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {k: None if items[0][k] is None else torch.stack([it[k] for it in items]) for k in items[0]}

    args = SimpleNamespace(max_grad_norm=1.0, per_device_train_batch_size=n, device=torch.device("cpu"),
                           gradient_checkpointing=False, gradient_checkpointing_kwargs=None, output_dir=str(tmp))
    state = SimpleNamespace(is_world_process_zero=False, log_history=[])
    cb = GradvizCallback(every=1, doctor=True, save=False)
    try:
        with f.armed():
            cb.on_train_begin(args, state, None, model=model, optimizer=h.opt,
                              train_dataloader=SimpleNamespace(dataset=dataset, collate_fn=collate))
    finally:
        cb.on_train_end(args, state, None)


def _lightning_callback(h: Host, f: Fault, _: Any, tmp: Path) -> None:
    from gradviz_nb.integrations.lightning import GradvizCallback

    trainer = SimpleNamespace(optimizers=[h.opt], precision_plugin=SimpleNamespace(), gradient_clip_val=None,
                              gradient_clip_algorithm=None, loggers=[], global_step=0, is_global_zero=False,
                              log_dir=str(tmp), default_root_dir=str(tmp))
    cb = GradvizCallback(every=1, save=False)
    cb.on_train_start(trainer, h.model)
    try:
        with f.armed():
            h.observed()
        cb.on_before_optimizer_step(trainer, h.model, h.opt)
    finally:
        cb.on_train_end(trainer, h.model)


def _widget_checkpoint(h: Host, f: Fault, _: Any, __: Path) -> None:
    """The checkpointing what-if's re-run: the first module call checkpointed for real, then put back."""
    w = gv.GraphWidget.from_fn(h.loss, model=h.model)
    try:
        calls = [c["id"] for c in w.graph.calls if c["size"] > 0]
        w.checkpoints = {calls[0]: "non_reentrant"} if calls else {}
        with f.armed():
            reply = w.answer({"id": 1, "kind": "verify", "body": {"question": "checkpoint"}})
        assert reply is not None
    finally:
        w.close()


_NO_FLOAT_INPUT = "token ids in: gradcheck needs floating inputs (and a float64 GPT-2 is slow to check)"

ENTRIES: dict[str, Entry] = {
    "trace": Entry(lambda h, f, loss, _: gv.trace(loss, model=h.model), ("trace",), _with_loss),
    "capture": Entry(_capture, ("capture",), observer=True),
    "Capture": Entry(_capture_class, ("Capture",), observer=True),
    "watch/unwatch": Entry(_watch, ("watch", "unwatch"), observer=True),
    "what_if": Entry(_what_if, ("AutogradGraph",), _with_graph),
    "verify": Entry(_verify, (), user_code=True),
    "record_backward": Entry(_record_backward, ("record_backward",), _with_loss),
    "record_backward(until='nonfinite')": Entry(_record_armed, (), _with_loss),
    "doctor": Entry(_doctor, ("doctor",), user_code=True),
    "assert_trains": Entry(_assert_trains, ("assert_trains",), user_code=True),
    "why": Entry(_why, ("why",), _one_frozen, user_code=True),
    "gradient_flow": Entry(_flow, ("gradient_flow",)),
    "GradientMonitor": Entry(_monitor, ("GradientMonitor",), observer=True),
    "find_nonfinite": Entry(_nonfinite, ("find_nonfinite",), user_code=True),
    "gradcheck": Entry(_gradcheck, ("gradcheck",), _double, user_code=True, skip={"peft_lora": _NO_FLOAT_INPUT}),
    "memory_held": Entry(_memory, ("memory_held",), _with_graph),
    "diff": Entry(_diff, ("diff",), _two_graphs),
    "export_html": Entry(_export_html, ("export_html",), _with_graph),
    "to_json/from_json": Entry(_json, ("to_json", "from_json"), _with_graph),
    "to_dot": Entry(_dot, ("to_dot",), _with_graph),
    "to_graphml": Entry(_graphml, ("to_graphml",), _with_graph),
    "GraphWidget": Entry(_widget, ("GraphWidget",), _with_loss),
    "GraphWidget.from_fn": Entry(_from_fn, (), user_code=True),
    "GraphWidget actions (verify, load)": Entry(_widget_actions, (), user_code=True),
    "GraphWidget.verify_checkpoint": Entry(_widget_checkpoint, (), user_code=True),
    "Dashboard": Entry(_dashboard, ("Dashboard",), _with_loss),
}
if _importable("transformers") and _importable("accelerate"):
    ENTRIES["integrations.transformers.GradvizCallback(doctor=True)"] = Entry(_hf_callback, user_code=True)
if _importable("lightning.pytorch"):
    ENTRIES["integrations.lightning.GradvizCallback"] = Entry(_lightning_callback, observer=True)

EXEMPT: dict[str, str] = {
    "GradvizError": "an exception class: runs nothing, holds no model",
    "BackwardRecording": "the result record_backward returns (plain data); record_backward is covered",
    "Diagnosis": "the result gv.doctor returns (plain data); doctor is covered",
    "Finding": "one item of a Diagnosis (plain data); doctor is covered",
    "GradCheck": "the result gv.gradcheck returns (plain data); gradcheck is covered",
    "GraphDiff": "the result gv.diff returns (plain data); diff is covered",
    "MemoryReport": "the result gv.memory_held returns (plain data); memory_held is covered",
    "NonFinite": "the result gv.find_nonfinite returns (plain data); find_nonfinite is covered",
}


def _cases() -> Iterator[Any]:
    hosts = [h for h in HOSTS if h != "peft_lora" or _peft_available()]
    for entry_name, entry in ENTRIES.items():
        for host in hosts:
            for mode in ("ok", "fault") if entry.user_code or entry.observer else ("ok",):
                marks = [pytest.mark.skip(reason=entry.skip[host])] if host in entry.skip else []
                yield pytest.param(entry_name, host, mode, id=f"{entry_name}-{host}-{mode}", marks=marks)


def _fault(entry: str, host: Host, mode: str) -> Fault:
    ids = {id(m) for m in host.model.modules()}
    if mode == "ok":
        return Fault(ids, 0, Injected)
    rng = random.Random(zlib.crc32(f"{SEED}:{entry}:{host.name}".encode()))
    return Fault(ids, rng.randint(1, max(host.calls, 1)), rng.choice([Injected, KeyboardInterrupt]))


@pytest.mark.parametrize(("entry_name", "host_name", "mode"), list(_cases()))
def test_entry_point_leaves_no_trace(entry_name: str, host_name: str, mode: str) -> None:
    entry = ENTRIES[entry_name]
    host = fresh(host_name)
    ctx = None
    if entry.prepare is not None:
        host, ctx = entry.prepare(host)
    if entry.observer:
        host.model.eval()
    fault = _fault(entry_name, host, mode)
    seeds = (torch.manual_seed(SEED), random.seed(SEED), np.random.seed(SEED))
    del seeds
    before = fingerprint(host.model, host.opt)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            entry.run(host, fault, ctx, Path(tmp))
        except (Injected, KeyboardInterrupt) as err:
            assert mode == "fault" and fault.fired, f"{type(err).__name__}: {err}"
            del err
    after = fingerprint(host.model, host.opt)
    assert differences(before, after) == [], f"{entry_name} on {host_name} ({mode}, fault {fault})"
    if mode == "fault" and entry.user_code:
        assert fault.fired, "the fault never fired: the case did not run the user's code"


def test_every_public_name_is_covered() -> None:
    """Adding a public name without an entry here (or an exemption with a reason) fails."""
    covered = {name for e in ENTRIES.values() for name in e.covers}
    missing = sorted(set(gv.__all__) - covered - set(EXEMPT))
    assert missing == [], f"public names without a state-fingerprint entry or an EXEMPT reason: {missing}"
    stale = sorted((covered | set(EXEMPT)) - set(gv.__all__))
    assert stale == [], f"entries or exemptions for names that are not public: {stale}"
    assert not covered & set(EXEMPT), "a name is both covered and exempt"
    assert all(reason.strip() for reason in EXEMPT.values())


def test_the_fingerprint_is_not_blind() -> None:
    """A real training step, a new .grad object, a hook, an RNG draw: each shows up."""
    h = fresh("bn_cnn")
    before = fingerprint(h.model, h.opt)
    h.step()
    changed = differences(before, fingerprint(h.model, h.opt))
    assert {"param conv.weight", "buffer bn.running_mean", "buffer bn.num_batches_tracked",
            "optimizer state"} <= set(changed), changed
    before = fingerprint(h.model, h.opt)
    h.model.head.weight.grad = h.model.head.weight.grad.clone()  # same values, new object
    handle = h.model.conv.register_forward_hook(lambda *a: None)
    torch.rand(1)
    random.random()
    np.random.rand()
    h.model.bn.eval()
    changed = differences(before, fingerprint(h.model, h.opt))
    handle.remove()
    assert {"grad head.weight", "module conv", "rng torch", "rng python", "rng numpy", "module bn"} <= set(changed)


def test_no_entry_point_keeps_the_model_alive() -> None:
    """Once the user drops the model (and what the call returned, widgets closed), nothing of gradviz_nb keeps
    it alive: every entry point, on success and with the fault, then one garbage collection."""
    refs: dict[tuple[str, str], weakref.ref[nn.Module]] = {}
    for entry_name, entry in ENTRIES.items():
        for mode in ("ok", "fault") if entry.user_code or entry.observer else ("ok",):
            host = fresh("dropout_mlp")
            ctx = None
            if entry.prepare is not None:
                host, ctx = entry.prepare(host)
            if entry.observer:
                host.model.eval()
            refs[entry_name, mode] = weakref.ref(host.model)
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    entry.run(host, _fault(entry_name, host, mode), ctx, Path(tmp))
                except (Injected, KeyboardInterrupt) as err:
                    del err
            del host, ctx
    gc.collect()
    alive = sorted(case for case, ref in refs.items() if ref() is not None)
    assert alive == [], f"these keep the model alive: {alive}"


# -- threaded mode: two threads, every entry point that runs user code, captures in between ---------------------


def _patchable_classes() -> list[type]:
    """Classes a probe might wrap: every optimizer and LR scheduler class torch ships, nn.Module, no_grad and
    the reentrant checkpoint's Function."""
    from torch.optim.lr_scheduler import LRScheduler
    from torch.utils.checkpoint import CheckpointFunction

    out: list[type] = [nn.Module, torch.Tensor, torch.autograd.grad_mode.no_grad, CheckpointFunction]
    todo: list[type] = [torch.optim.Optimizer, LRScheduler]
    while todo:
        cls = todo.pop()
        if cls not in out:
            out.append(cls)
            todo.extend(cls.__subclasses__())
    return out


def process_fingerprint() -> dict[str, Any]:
    """What every thread shares: the global module and optimizer hook dicts (by key), anomaly mode, the
    default dtype, the autograd entry points and the class dicts of everything a probe could patch."""
    fp: dict[str, Any] = {}
    for owner, names in ((module_globals, GLOBAL_MODULE_HOOKS), (optimizer_globals, GLOBAL_OPTIMIZER_HOOKS)):
        for n in names:
            fp[f"global hooks {n}"] = tuple(getattr(owner, n))
    fp["anomaly mode"] = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    fp["default dtype"] = torch.get_default_dtype()
    fp["autograd entry points"] = (torch.autograd.backward, torch.autograd.grad, torch.Tensor.backward)
    for cls in _patchable_classes():
        fp[f"class {cls.__module__}.{cls.__qualname__}"] = tuple(sorted((k, id(v)) for k, v in vars(cls).items()))
    return fp


def thread_fingerprint() -> tuple[Any, ...]:
    """What each thread has of its own: grad mode, the mode stacks, saved-tensor hooks."""
    return (torch.is_grad_enabled(), torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack(),
            torch._C._autograd._top_saved_tensors_default_hooks(True) is None)


THREADED = [name for name, e in ENTRIES.items() if (e.user_code or e.observer) and "integrations." not in name]


class _Turns:
    """Forces the interleaving a snapshot-and-restore gets wrong, for each entry point: thread A enters it
    (and takes any snapshot) first, thread B enters while A is inside, A leaves while B is inside. Each gate
    is passed at the first forward of a host model inside the entry (a module pre-hook on the host)."""

    def __init__(self) -> None:
        self.a_in, self.b_in, self.a_out = threading.Event(), threading.Event(), threading.Event()
        self.armed = {"a": False, "b": False}

    def gate(self, who: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            if not self.armed[who]:
                return
            self.armed[who] = False
            if who == "a":
                self.a_in.set()
                self.b_in.wait(5)
            else:
                self.b_in.set()
                self.a_out.wait(5)
        return hook


def _run_entry(name: str, host: Host, tmp: Path) -> None:
    entry = ENTRIES[name]
    ctx = None
    if entry.prepare is not None:
        host, ctx = entry.prepare(host)
    if entry.observer:
        host.model.eval()
    entry.run(host, _fault(name, host, "ok"), ctx, tmp)
    host.model.train()


def test_two_threads_leave_process_state_as_it_began() -> None:
    """Two threads run every entry point that runs user code, each on its own model, with a capture in
    between, in the order that breaks a snapshot written back; the process-wide hook dicts, modes and class
    dicts end as they began, and each thread's own modes too."""
    # no dropout: the global RNG is one per process, so draws in one thread move the other's (gradcheck re-runs)
    hosts = {"a": fresh("bn_cnn"), "b": fresh("bn_cnn")}
    before = process_fingerprint()
    errors: list[str] = []
    rounds = {name: _Turns() for name in THREADED}
    start = threading.Barrier(2)

    def worker(who: str) -> None:
        host = hosts[who]
        mine = thread_fingerprint()
        handles = []
        try:
            for name in THREADED:
                turns = rounds[name]
                handles.append(host.model.register_forward_pre_hook(turns.gate(who)))
                start.wait(30)
                if who == "b":
                    turns.a_in.wait(5)
                turns.armed[who] = True
                with tempfile.TemporaryDirectory() as tmp:
                    try:
                        _run_entry(name, host, Path(tmp))
                    except Exception as err:  # the test reports it with the entry's name
                        errors.append(f"{who} {name}: {type(err).__name__}: {err}")
                turns.armed[who] = False
                if who == "a":
                    turns.a_out.set()
                handles.pop().remove()
                with gv.capture(host.model) as cap:  # a capture between entry points, in both threads
                    host.observed()
                if not cap.calls:
                    errors.append(f"{who} after {name}: the capture saw no module call")
            if thread_fingerprint() != mine:
                errors.append(f"{who}: its grad mode or mode stacks changed")
        finally:
            for h in handles:
                h.remove()

    threads = [threading.Thread(target=worker, args=(who,)) for who in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert differences(before, process_fingerprint()) == []

"""The rows of the overhead table for one model (see :mod:`gradviz_nb.bench`): one function per feature,
each timing the feature against the plain operation it wraps, interleaved in one process."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz_nb.bench.timing import Row, available, interleaved
from gradviz_nb.demo_models import GPT2, GPT2Config
from gradviz_nb.probes.backward import record_backward, reductions
from gradviz_nb.probes.monitor import GradientMonitor
from gradviz_nb.probes.nonfinite import BareDispatchMode, find_nonfinite
from gradviz_nb.tracing import capture, trace, typed_torch
from gradviz_nb.tracing.walk import reachable


@dataclass
class Model:
    """One model to measure on: how to build it and its batch."""

    name: str
    config: GPT2Config
    seq: int
    batch: int = 1


def models(quick: bool) -> list[Model]:
    """The models the table measures: a 12-block GPT (width 128) and GPT-2 124M, or one tiny GPT for ``--quick``."""
    if quick:
        return [Model("GPT-2 tiny (2 blocks, width 32)", GPT2Config.small_test(), seq=16)]
    return [
        Model("12-block GPT (width 128)", GPT2Config(n_layer=12, n_head=4, d_model=128, vocab=512, block_size=64),
              seq=64),
        Model("GPT-2 124M (batch 1, 64 tokens)", GPT2Config(), seq=64),
    ]


def _tokens(cfg: GPT2Config, m: Model) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab, (m.batch, m.seq), generator=gen)
    y = torch.randint(0, cfg.vocab, (m.batch, m.seq), generator=gen)
    return x, y


def _loss(model: GPT2, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return nn.functional.cross_entropy(logits.flatten(0, -2), y.flatten())


class _OpCounter(TorchFunctionMode):
    """Counts the torch calls a forward makes (what capture's observer sees)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


@dataclass
class Bench:
    """One model under measurement: the model, its batch, and how many rounds each row runs."""

    m: Model
    model: GPT2
    x: torch.Tensor
    y: torch.Tensor
    reps: int

    def loss(self) -> torch.Tensor:
        return _loss(self.model, self.x, self.y)

    def zero(self) -> None:
        self.model.zero_grad(set_to_none=True)


def measure(m: Model, reps: int, monitor_reps: int, fixed: tuple[float, float] | None = None) -> list[Row]:
    """Every row for one model; ``fixed`` (capture's cost per module call and per op, :func:`fixed_costs`)
    adds the capture overhead those predict for this model's forward (its calls and ops counted)."""
    torch.manual_seed(0)
    model = GPT2(m.config)
    b = Bench(m, model, *_tokens(m.config, m), reps)
    return [*trace_row(b), *capture_rows(b, fixed), *backward_row(b), *nonfinite_rows(b),
            *monitor_row(b, monitor_reps)]


def trace_row(b: Bench) -> list[Row]:
    """gv.trace against torchviz make_dot, on the same retained graph."""
    if not available("torchviz"):
        return [Row(b.m.name, "gv.trace", "torchviz make_dot", skipped="torchviz not installed")]
    from torchviz import make_dot

    traced, model = b.loss(), b.model
    params = dict(model.named_parameters())
    # Two ~10 ms calls: a min of at least 21 (as the goal was set); one stalled round moves a min of 9.
    t = interleaved({"trace": lambda: trace(traced, model=model),
                     "make_dot": lambda: make_dot(traced, params=params)}, max(b.reps, 21))
    return [t.row(b.m.name, "gv.trace", "torchviz make_dot", "trace", "make_dot", "<= 1.0")]


def capture_rows(b: Bench, fixed: tuple[float, float] | None) -> list[Row]:
    """The forward inside capture; graph peers that run the model themselves; the predicted overhead."""
    model, name = b.model, b.m.name

    def captured_forward() -> None:
        with capture(model):
            b.loss()

    def capture_and_trace() -> None:
        with capture(model) as cap:
            out = b.loss()
        trace(out, model=model, capture=cap)

    variants: dict[str, Callable[[], object]] = {"plain": b.loss, "capture": captured_forward,
                                                 "capture+trace": capture_and_trace}
    if available("torchview"):
        from torchview import draw_graph

        variants["torchview"] = lambda: draw_graph(model, input_data=b.x, depth=3)
    if available("torchlens"):
        import torchlens

        variants["torchlens"] = lambda: torchlens.log_forward_pass(model, b.x, layers_to_save=None)
    t = interleaved(variants, b.reps)
    rows = [t.row(name, "forward in gv.capture", "plain forward", "capture", "plain", "<= 1.05")]
    if fixed is not None:
        with capture(model) as cap:
            b.loss()
        with _OpCounter() as counter:
            b.loss()
        calls = len(cap.calls)
        rows.append(Row(name, f"forward in gv.capture, predicted ({calls} calls, {counter.n} ops x fixed costs)",
                        "plain forward", t["plain"] + calls * fixed[0] + counter.n * fixed[1], t["plain"], "<= 1.05"))
    rows.append(t.row(name, "gv.capture + gv.trace", "plain forward", "capture+trace", "plain"))
    for peer, label in (("torchview", "torchview draw_graph (peer)"),
                        ("torchlens", "torchlens log_forward_pass (peer)")):
        rows.append(t.row(name, label, "plain forward", peer, "plain") if peer in t
                    else Row(name, label, "plain forward", skipped=f"{peer} not installed"))
    return rows


def backward_row(b: Bench) -> list[Row]:
    """record_backward against backward on the same graph (``.grad`` cleared before each), and the two parts
    of a recording no implementation can skip: the graph (a trace) and the statistics of every gradient."""
    loss, model = b.loss(), b.model
    grads = _gradients(loss)

    def statistics() -> None:
        torch.stack([s for g in grads for s in reductions(g)]).tolist()

    t = interleaved({"backward": lambda: typed_torch.backward(loss, retain_graph=True),
                     "record": lambda: record_backward(loss, model=model),
                     "armed": lambda: record_backward(loss, model=model, until="nonfinite"),
                     "trace": lambda: trace(loss, model=model), "statistics": statistics}, b.reps, before=b.zero)
    n = sum(g.numel() for g in grads)
    return [t.row(b.m.name, "gv.record_backward", "loss.backward()", "record", "backward", "<= 1.5"),
            t.row(b.m.name, 'record_backward(until="nonfinite"), nothing fires', "loss.backward()", "armed",
                  "backward", "<= 1.2"),
            t.row(b.m.name, "part of record_backward: gv.trace alone", "loss.backward()", "trace", "backward"),
            t.row(b.m.name, f"part of record_backward: norm, sum, min and max of its {len(grads)} gradients "
                  f"({n / 1e6:.1f}M elements)", "loss.backward()", "statistics", "backward")]


def _gradients(loss: torch.Tensor) -> list[torch.Tensor]:
    """Every distinct gradient tensor one backward of ``loss`` makes: what each node received and sent."""
    seen: dict[int, torch.Tensor] = {}

    def keep(sent: tuple[Any, ...], received: tuple[Any, ...]) -> None:
        for g in (*sent, *received):
            if isinstance(g, torch.Tensor):
                seen.setdefault(id(g), g)  # held: its id is not reused, nothing adds into it in place

    handles = [fn.register_hook(keep) for fn, _ in reachable([loss.grad_fn])]
    try:
        typed_torch.backward(loss, retain_graph=True)
    finally:
        for h in handles:
            h.remove()
    return list(seen.values())


def nonfinite_rows(b: Bench) -> list[Row]:
    """find_nonfinite and detect_anomaly against a plain forward + backward."""
    def step() -> None:
        typed_torch.backward(b.loss())

    def anomaly() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled ..."
            with torch.autograd.detect_anomaly():
                step()

    def idle_mode() -> None:
        with _IdleMode():  # type: ignore[no-untyped-call]
            step()

    t = interleaved({"plain": step, "find": lambda: find_nonfinite(step, model=b.model), "anomaly": anomaly,
                     "mode": idle_mode}, b.reps, before=b.zero)
    return [t.row(b.m.name, "gv.find_nonfinite", "forward + backward", "find", "plain", "<= 1.5"),
            t.row(b.m.name, "detect_anomaly() (peer)", "forward + backward", "anomaly", "plain"),
            t.row(b.m.name, "part of gv.find_nonfinite: a TorchDispatchMode that does nothing", "forward + backward",
                  "mode", "plain")]


class _IdleMode(BareDispatchMode):  # type: ignore[no-untyped-call]
    """Sees every op of forward and backward, as find_nonfinite's watch does, and only runs it."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def monitor_row(b: Bench, reps: int) -> list[Row]:
    """GradientMonitor(every=10): ten training steps, one of them recorded, against ten plain steps."""
    opt = torch.optim.SGD(b.model.parameters(), lr=1e-6)
    monitor = GradientMonitor(b.model, every=10)

    def steps(mon: GradientMonitor | None) -> None:
        for _ in range(10):
            typed_torch.backward(b.loss())
            if mon is not None:
                mon.step()
            opt.step()
            opt.zero_grad(set_to_none=True)

    try:
        t = interleaved({"plain": lambda: steps(None), "monitor": lambda: steps(monitor)}, reps)
    finally:
        monitor.close()
    return [t.row(b.m.name, "10 steps with GradientMonitor(every=10)", "10 plain steps", "monitor", "plain", "<= 1.05")]


def fixed_costs(reps: int, n: int = 2000) -> tuple[float, float]:
    """What capture adds per module call and per torch op, in seconds: ``n`` calls of an ``nn.Identity``
    (no op inside: the hooks alone) and ``n`` ops on a 128-element tensor that requires grad (each makes an
    autograd node; over 64 elements, so no value is recorded), inside ``gv.capture`` against the same
    loops outside it."""
    model = nn.Sequential(*[nn.Identity() for _ in range(n)])
    x = torch.randn(128, requires_grad=True)

    def ops() -> None:
        y = x
        for _ in range(n):
            y = y * 1.0

    def captured(fn: Callable[[], object], m: nn.Module | None) -> Callable[[], None]:
        def run() -> None:
            with capture(m):
                fn()
        return run

    t = interleaved({"calls": lambda: model(x), "calls+capture": captured(lambda: model(x), model),
                     "ops": ops, "ops+capture": captured(ops, None)}, reps)
    return (t["calls+capture"] - t["calls"]) / n, (t["ops+capture"] - t["ops"]) / n

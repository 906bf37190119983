"""Bug-zoo cases: misuse that must end in a clear ``gv.GradvizError`` saying what to do, never a raw
traceback. Where PyTorch itself refuses the same thing, its own error is part of the truth.

A case passes when the library raises ``GradvizError`` whose message names the fix (the words listed as
``fix``); ``got`` is the message's first line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradviz_nb.bugzoo.case import Case, Outcome


def _clear_error(action: Callable[[], Any], fix: tuple[str, ...], truth: str = "") -> Outcome:
    import gradviz_nb as gv

    expected = (f"{truth}; " if truth else "") + "GradvizError naming " + " / ".join(repr(f) for f in fix)
    try:
        action()
    except gv.GradvizError as err:
        text = str(err)
        missing = [f for f in fix if f not in text]
        return Outcome(expected=expected, got=text.splitlines()[0] if text else "(empty message)", ok=not missing,
                       false_alarms=tuple(f"message lacks {m!r}" for m in missing))
    except Exception as err:  # a raw error is what the case is about
        return Outcome(expected=expected, got=f"raw {type(err).__name__}: {str(err).splitlines()[0][:200]}",
                       ok=False)
    return Outcome(expected=expected, got="no error", ok=False)


def _pytorch_says(action: Callable[[], Any], words: str) -> str:
    """PyTorch's own verdict on ``action`` (which must raise an error containing ``words``)."""
    try:
        action()
    except RuntimeError as err:
        return f"PyTorch: {words}" if words in str(err) else f"PyTorch raised {str(err)[:80]}"
    return "PyTorch raised nothing"


def record_after_backward() -> Outcome:
    import torch

    import gradviz_nb as gv
    from gradviz_nb.demo_models import MLP

    torch.manual_seed(0)
    model = MLP()
    loss = model(torch.randn(5, 4)).pow(2).sum()
    loss.backward()
    truth = _pytorch_says(lambda: loss.backward(retain_graph=True), "backward through the graph a second time")
    return _clear_error(lambda: gv.record_backward(loss, model=model), ("already freed", "Run the forward again"),
                        truth)


def record_non_scalar() -> Outcome:
    import torch

    import gradviz_nb as gv
    from gradviz_nb.demo_models import MLP

    model = MLP()
    out = model(torch.randn(5, 4))
    truth = _pytorch_says(lambda: out.backward(retain_graph=True), "only for scalar outputs")
    return _clear_error(lambda: gv.record_backward(out, model=model), ("loss.sum()", "grad="), truth)


def record_inplace() -> Outcome:
    import torch

    import gradviz_nb as gv
    from gradviz_nb.demo_models import MLP

    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        h = torch.sigmoid(model.fc1(torch.randn(3, 4)))
        h.mul_(2)  # sigmoid saved its output for backward
        loss = model.fc2(h).sum()
    truth = _pytorch_says(lambda: loss.backward(retain_graph=True), "modified by an inplace operation")
    return _clear_error(lambda: gv.record_backward(loss, model=model, capture=cap),
                        ("SigmoidBackward0", "mul_()", "out-of-place"), truth)


def diff_flows() -> Outcome:
    import torch

    import gradviz_nb as gv
    from gradviz_nb.demo_models import MLP

    model = MLP()
    model(torch.randn(2, 4)).sum().backward()
    flow = gv.gradient_flow(model)
    return _clear_error(lambda: gv.diff(flow, flow), ("gv.trace(loss_a, model=a)",))


def diff_tensors() -> Outcome:
    import torch

    import gradviz_nb as gv
    from gradviz_nb.demo_models import MLP

    model = MLP()
    loss = model(torch.randn(2, 4)).sum()
    return _clear_error(lambda: gv.diff(loss, loss), ("trace each loss first", "gv.trace("))


def trace_optimizer_as_model() -> Outcome:
    import torch

    import gradviz_nb as gv
    from gradviz_nb.demo_models import MLP

    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(2, 4)).sum()
    return _clear_error(lambda: gv.trace(loss, model=opt),
                        ("optimizer (SGD)", "pass the nn.Module"))


def find_typo() -> Outcome:
    import torch

    import gradviz_nb as gv

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    graph = gv.trace(model(torch.randn(2, 4)).sum(), model=model)
    return _clear_error(lambda: graph.find("0.wieght"), ("did you mean '0.weight'",))


CASES: list[Case] = [
    Case("error-record-after-backward", "clear-error", record_after_backward,
         description="gv.record_backward on a loss whose backward() already freed the graph"),
    Case("error-record-non-scalar", "clear-error", record_non_scalar,
         description="gv.record_backward on a non-scalar output"),
    Case("error-record-inplace", "clear-error", record_inplace,
         description="gv.record_backward where a saved tensor was modified in place (h.mul_ after sigmoid)"),
    Case("error-diff-flows", "clear-error", diff_flows, description="gv.diff(flow, flow) with GradientFlow objects"),
    Case("error-diff-tensors", "clear-error", diff_tensors, description="gv.diff(loss, loss) with tensors"),
    Case("error-trace-optimizer-as-model", "clear-error", trace_optimizer_as_model,
         description="gv.trace(loss, model=optimizer)"),
    Case("error-find-typo", "clear-error", find_typo, description="g.find('0.wieght') on a Sequential"),
]

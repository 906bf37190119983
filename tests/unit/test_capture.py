"""gv.capture / gv.watch: every node attributed to the module call that made it; no hooks left."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, MHAModel, ResNet18Like, TwiceCalled, gpt2_loss
from gradviz_nb.tracing.capture import KEEP_FORWARDS


def output_oracle(model: nn.Module) -> tuple[dict[int, str], list[Any]]:
    """Independent check: each module call's output grad_fn, seen by our own forward hooks.

    Children's hooks fire before their parents', so the first call to report a node is the
    innermost call that made it.
    """
    made_by: dict[int, str] = {}
    counts: dict[str, int] = {}
    handles = []

    def hook(path: str) -> Any:
        def record(module: nn.Module, args: Any, out: Any) -> None:
            counts[path] = counts.get(path, 0) + 1
            t = out[0] if isinstance(out, tuple) else out
            passthrough = any(t is a for a in args)  # Dropout(p=0), Identity: made nothing
            if path and isinstance(t, torch.Tensor) and t.grad_fn is not None and not passthrough:
                call = path if counts[path] == 1 else f"{path} (call {counts[path]})"
                made_by.setdefault(t.grad_fn._sequence_nr(), call)
        return record

    for path, m in model.named_modules():
        handles.append(m.register_forward_hook(hook(path)))
    return made_by, handles


CASES = {
    "gpt2": (lambda: GPT2(GPT2Config.small_test()), gpt2_loss),
    "gpt2-ckpt": (lambda: GPT2(GPT2Config.small_test("non_reentrant")), gpt2_loss),
    "mha": (MHAModel, lambda m: m(torch.randn(2, 5, 8)).sum()),
    "twice": (TwiceCalled, lambda m: m(torch.randn(3, 4)).sum()),
    "resnet": (lambda: ResNet18Like(width=8), lambda m: m(torch.randn(2, 3, 32, 32)).sum()),
}


@pytest.mark.parametrize("case", CASES)
def test_module_outputs_are_attributed_to_their_innermost_call(case: str) -> None:
    make, run = CASES[case]
    model = make()
    made_by, handles = output_oracle(model)
    with gv.capture(model) as cap:
        loss = run(model)
    for h in handles:
        h.remove()
    g = gv.trace(loss, model=model, capture=cap)
    call_by_seq = {d["seq"]: d["call"] for _, d in g.nx.nodes(data=True) if d["kind"] == "op"}
    checked = {seq: call for seq, call in made_by.items() if seq in call_by_seq}
    assert len(checked) >= 2
    assert {seq: call_by_seq[seq] for seq in checked} == checked


def test_every_gpt2_op_outside_the_top_level_forward_is_in_a_box() -> None:
    model = GPT2(GPT2Config.small_test())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    g = gv.trace(loss, model=model, capture=cap)
    top = sorted(d["op"] for _, d in g.nx.nodes(data=True) if d["kind"] == "op" and not d["call"])
    # GPT2.forward itself: wte + wpe, logits.view, cross_entropy (log_softmax + nll_loss)
    assert top == ["AddBackward0", "LogSoftmaxBackward0", "NllLossBackward0", "ViewBackward0"]
    calls = {c["id"]: c for c in g.calls}
    sdpa = [d["call"] for _, d in g.nx.nodes(data=True) if "ScaledDotProduct" in d["op"]]
    assert sdpa == ["blocks.0.attn", "blocks.1.attn"] or sorted(sdpa) == ["blocks.0.attn", "blocks.1.attn"]
    assert calls["blocks.0.attn.c_attn"]["parent"] == "blocks.0.attn"
    assert calls["blocks.0"]["size"] == sum(1 for _, c in g.nx.nodes(data="call") if c.startswith("blocks.0"))


def test_module_called_twice_gets_two_calls_and_shared_leaves_sit_above_both() -> None:
    model = TwiceCalled()
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).sum()
    g = gv.trace(loss, model=model, capture=cap)
    ids = [c["id"] for c in g.calls]
    assert ids == ["block", "block (call 2)", "head"]
    assert g.nx.nodes[g.find("block.weight")]["call"] == ""  # used by both calls
    assert g.nx.nodes[g.find("head.weight")]["call"] == "head"
    functional = {d["op"]: d["call"] for _, d in g.nx.nodes(data=True) if d["op"] in ("ReluBackward0", "TanhBackward0")}
    assert functional == {"ReluBackward0": "", "TanhBackward0": ""}


def test_reentrant_checkpoint_node_belongs_to_the_wrapped_block() -> None:
    model = GPT2(GPT2Config.small_test("reentrant"))
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    g = gv.trace(loss, model=model, capture=cap)
    ckpt = sorted(d["call"] for _, d in g.nx.nodes(data=True) if d["op"] == "CheckpointFunctionBackward")
    assert ckpt == ["blocks.0", "blocks.1"]


def no_hooks(model: nn.Module) -> bool:
    from torch.nn.modules import module as torch_module

    per_module = all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    return per_module and not torch_module._global_forward_hooks and not torch_module._global_forward_pre_hooks


def test_capture_removes_its_hooks_even_on_exception() -> None:
    model = GPT2(GPT2Config.small_test())
    with gv.capture(model):
        gpt2_loss(model)
    assert no_hooks(model)
    with pytest.raises(ValueError, match="exceeds block_size"), gv.capture(model):
        model(torch.zeros(1, 100, dtype=torch.long))
    assert no_hooks(model)

    class Boom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.inner(x)
            raise RuntimeError("boom")

    boom = Boom()
    with pytest.raises(RuntimeError, match="boom"), gv.capture(boom) as cap:
        boom(torch.randn(1, 2))
    assert no_hooks(boom)
    assert [c.path for c in cap.calls] == ["", "inner"]


def test_non_reentrant_checkpoint_backward_adds_no_calls_under_watch() -> None:
    model = GPT2(GPT2Config.small_test("non_reentrant"))
    cap = gv.watch(model)
    try:
        loss = gpt2_loss(model)
        before = len(cap.calls)
        loss.backward()  # recomputation re-runs block forwards; they are not forward calls
        assert len(cap.calls) == before
        g = gv.trace(loss)  # no capture argument: the watch supplies the boxes, the model the names
        assert g.nx.graph["captured"]
        assert "wte.weight" in g.leaves()
    finally:
        gv.unwatch(model)
    assert no_hooks(model)


def test_watch_memory_stays_bounded() -> None:
    model = TwiceCalled()
    cap = gv.watch(model)
    try:
        for _ in range(3 * KEEP_FORWARDS):
            loss = model(torch.randn(2, 4)).sum()
        assert len(cap.calls) == KEEP_FORWARDS * 4  # model, block, block, head per forward
        g = gv.trace(loss)
        assert [c["id"] for c in g.calls] == ["block", "block (call 2)", "head"]
    finally:
        gv.unwatch(model)


def test_no_capture_means_no_boxes_and_a_note_saying_how() -> None:
    model = TwiceCalled()
    g = gv.trace(model(torch.randn(2, 4)).sum(), model=model)
    assert g.calls == [] and not g.nx.graph["captured"]
    assert "gv.capture" in g.notes[0] and "gv.watch" in g.notes[0]


def test_capture_of_another_forward_says_so() -> None:
    model = TwiceCalled()
    with gv.capture(model) as cap:
        model(torch.randn(2, 4))
    g = gv.trace(model(torch.randn(2, 4)).sum(), capture=cap)
    assert "none of this graph's nodes" in g.notes[0]


def test_capture_rejects_non_modules() -> None:
    with pytest.raises(gv.GradvizError, match=r"nn\.Module"):
        gv.capture(lambda x: x)  # type: ignore[arg-type]

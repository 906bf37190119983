"""GradvizCallback in a real transformers.Trainer run: tiny GPT-2 with peft LoRA, CPU, gradient accumulation 4."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import gradviz_nb as gv  # noqa: E402
from gradviz_nb.integrations import GradvizCallback  # noqa: E402
from gradviz_nb.integrations._common import inner_optimizer, unwrap_model  # noqa: E402

GA = 4


def tiny_lora_gpt2(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=16, vocab_size=64)
    model = transformers.GPT2LMHeadModel(cfg)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0)
    return peft.get_peft_model(model, lora)


def dataset(n: int = 64, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (n, 12), generator=g)
    return [{"input_ids": row, "labels": row} for row in ids]


def run(tmp_path: Path, cb: GradvizCallback, model: nn.Module | None = None, max_steps: int = 3,
        max_grad_norm: float = 1.0) -> Any:
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], save_strategy="no", max_steps=max_steps,
        per_device_train_batch_size=2, gradient_accumulation_steps=GA, learning_rate=1e-2, logging_steps=1,
        max_grad_norm=max_grad_norm, disable_tqdm=True, seed=0)
    trainer = transformers.Trainer(model=model or tiny_lora_gpt2(), args=args, train_dataset=dataset(),
                                   callbacks=[cb])
    trainer.train()
    return trainer


class CountBackwards(transformers.TrainerCallback):  # type: ignore[misc]
    """Counts micro-batches (substeps) and optimizer steps as the Trainer reports them."""

    def __init__(self) -> None:
        self.substeps = 0
        self.pre_opt = 0

    def on_substep_end(self, *a: Any, **k: Any) -> None:
        self.substeps += 1

    def on_pre_optimizer_step(self, *a: Any, **k: Any) -> None:
        self.pre_opt += 1


def test_one_record_per_optimizer_step_with_pre_clip_norms(tmp_path: Path) -> None:
    cb = GradvizCallback(every=1)
    count = CountBackwards()
    # a tiny max_grad_norm so clipping bites on every step: the recorded norms must still be the pre-clip ones
    model = tiny_lora_gpt2()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], save_strategy="no", max_steps=3,
        per_device_train_batch_size=2, gradient_accumulation_steps=GA, learning_rate=1e-2, logging_steps=1,
        max_grad_norm=1e-3, disable_tqdm=True, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset(), callbacks=[count, cb])
    trainer.train()
    mon = cb.monitor
    assert mon is not None
    assert trainer.state.global_step == 3
    assert count.substeps + count.pre_opt == 3 * GA  # 12 micro-batches ran
    assert mon.steps_seen == trainer.state.global_step and mon.steps == [1, 2, 3]
    # the Trainer logs the pre-clip total norm clip_grad_norm_ returned; the monitor's layers add up to it
    logged = [e["grad_norm"] for e in trainer.state.log_history if "grad_norm" in e]
    ours = [e["gradviz/grad_norm"] for e in trainer.state.log_history if "gradviz/grad_norm" in e]
    norms = mon.history("norm")
    totals = [math.sqrt(float(row[torch.isfinite(row)].pow(2).sum())) for row in norms]
    assert len(logged) == 3 and totals == pytest.approx(logged, rel=1e-5)
    assert ours == pytest.approx(logged, rel=1e-5)
    assert logged[0] > 1e-3 * 10  # clipping really bit, so post-clip norms would have been ~1e-3
    assert mon.clipped == (3, 3)
    # names are the user's (peft) names; only trainable layers: the LoRA adapters
    assert all(".lora_" in layer for layer in mon.layers)
    # history saved where the Trainer writes, loadable
    saved = gv.GradientMonitor.load(tmp_path / "gradviz_monitor.pt")
    assert saved.steps == [1, 2, 3] and torch.equal(saved.history("norm"), norms)
    # hooks gone afterwards
    assert not cb._handles and all(not p._post_accumulate_grad_hooks for p in model.parameters()
                                   if getattr(p, "_post_accumulate_grad_hooks", None) is not None)


def test_dead_adapter_fires_only_when_an_adapter_is_cut(tmp_path: Path) -> None:
    healthy = GradvizCallback(every=1)
    run(tmp_path / "healthy", healthy)
    assert not [f for _, f in healthy.flags() if f.kind in ("dead-adapter", "no-grad")]

    model = tiny_lora_gpt2()
    cut = "base_model.model.transformer.h.1.attn.c_attn"
    lora_b = model.get_submodule(cut + ".lora_B.default")
    lora_b.register_forward_hook(lambda mod, inp, out: out.detach())  # the adapter's output never reaches the loss
    broken = GradvizCallback(every=1)
    run(tmp_path / "broken", broken, model=model)
    dead = {f.target for _, f in broken.flags() if f.kind == "dead-adapter"}
    assert dead == {cut}
    assert broken.monitor is not None and broken.monitor.steps == [1, 2, 3]
    # and the monitor alone says the same in its own words, three records in a row without gradient
    nograd = {f.target for _, f in broken.monitor.flags() if f.kind == "no-grad"}
    assert nograd == {cut + ".lora_A.default", cut + ".lora_B.default"}


def test_every_counts_optimizer_steps_not_micro_batches(tmp_path: Path) -> None:
    cb = GradvizCallback(every=2, flow_check=False, save=False)
    trainer = run(tmp_path, cb, max_steps=5)
    assert cb.monitor is not None and trainer.state.global_step == 5
    assert cb.monitor.steps == [1, 3, 5] and cb.monitor.steps_seen == 5
    assert not (tmp_path / "gradviz_monitor.pt").exists()


def test_accelerate_prepared_and_wrapped_model_is_unwrapped() -> None:
    from accelerate import Accelerator

    model = tiny_lora_gpt2()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    prepared, prepared_opt = Accelerator(cpu=True).prepare(model, opt)
    wrapped = nn.DataParallel(torch.compile(prepared))  # wrappers prepare() adds elsewhere (DDP) or the user does
    assert unwrap_model(wrapped) is model
    assert type(prepared_opt).__name__ == "AcceleratedOptimizer" and inner_optimizer(prepared_opt) is opt
    cb = GradvizCallback(every=1, save=False)
    args = transformers.TrainingArguments(output_dir="unused", use_cpu=True, report_to=[])
    cb.on_train_begin(args, transformers.TrainerState(), transformers.TrainerControl(), model=wrapped,
                      optimizer=prepared_opt)
    assert cb.monitor is not None
    assert cb.monitor.layers[0] == "base_model.model.transformer.h.0.attn.c_attn.lora_A.default"
    x = torch.zeros(1, 4, dtype=torch.long)
    model(input_ids=x, labels=x).loss.backward()  # not through the compiled wrapper: no compile in a unit test
    cb.on_pre_optimizer_step(args, transformers.TrainerState(), transformers.TrainerControl())
    assert cb.monitor.steps == [1] and bool(torch.isfinite(cb.monitor.history("norm")).any())
    cb.on_train_end(args, transformers.TrainerState(), transformers.TrainerControl())
    assert not cb._handles


def test_doctor_before_training_restores_everything(tmp_path: Path) -> None:
    model = tiny_lora_gpt2()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cb = GradvizCallback(every=1, doctor=True, save=False)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], save_strategy="no", max_steps=1,
        per_device_train_batch_size=2, gradient_accumulation_steps=1, disable_tqdm=True, learning_rate=0.0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset(8), callbacks=[cb])
    trainer.train()
    assert cb.diagnosis is not None and cb.diagnosis.steps == 2
    assert not [f for f in cb.diagnosis.findings if f.kind in ("dead-adapter", "detached", "no-grad")]
    # lr 0: parameters unchanged by training, so any change would be the doctor's
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), before[n]), n


def test_reentrant_checkpointing_records_after_clipping_and_says_so(tmp_path: Path) -> None:
    cb = GradvizCallback(every=1, save=False, flow_check=False)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], save_strategy="no", max_steps=2,
        per_device_train_batch_size=2, gradient_accumulation_steps=GA, logging_steps=1, max_grad_norm=1e-3,
        gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True}, disable_tqdm=True)
    trainer = transformers.Trainer(model=tiny_lora_gpt2(), args=args, train_dataset=dataset(), callbacks=[cb])
    trainer.train()
    assert cb.monitor is not None and cb.monitor.steps == [1, 2]
    assert any("reentrant" in n for n in cb.notes)
    # recorded after the Trainer clipped to 1e-3: the layers add up to the clipped total, not the logged one
    totals = [float(row[torch.isfinite(row)].pow(2).sum().sqrt()) for row in cb.monitor.history("norm")]
    logged = [e["grad_norm"] for e in trainer.state.log_history if "grad_norm" in e]
    assert all(g > 1e-2 for g in logged) and totals == pytest.approx([1e-3, 1e-3], rel=1e-3)


class Boom(Exception):
    pass


@pytest.mark.parametrize("exc", [Boom, KeyboardInterrupt])
def test_a_failed_run_leaves_no_hook_and_no_live_monitor(tmp_path: Path, exc: type[BaseException]) -> None:
    """The Trainer has no exception event: a model raising on the 6th micro-batch (or the user interrupting
    there) must still leave no hook on any parameter, a closed monitor, and the Trainer as it was."""
    model = tiny_lora_gpt2()
    calls = [0]

    def fail(module: nn.Module, args: Any) -> None:
        calls[0] += 1
        if calls[0] == 6:
            raise exc("failed mid-run")

    handle = model.register_forward_pre_hook(fail)
    cb = GradvizCallback(every=1, save=False)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], save_strategy="no", max_steps=3,
        per_device_train_batch_size=2, gradient_accumulation_steps=GA, disable_tqdm=True, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset(), callbacks=[cb])
    with pytest.raises(exc):
        trainer.train()
    handle.remove()
    assert all(not getattr(p, "_post_accumulate_grad_hooks", None) and not getattr(p, "_backward_hooks", None)
               for p in model.parameters())
    assert cb.monitor is not None and cb.monitor._closed and cb.monitor.steps  # closed, history kept
    assert cb._handles == []
    # a callback added after the Trainer was made: guarded from on_train_begin on
    calls[0] = -100
    late = GradvizCallback(every=1, save=False)
    trainer2 = transformers.Trainer(model=tiny_lora_gpt2(), args=args, train_dataset=dataset())
    trainer2.add_callback(late)
    boom = trainer2.model.register_forward_pre_hook(lambda m, a: (_ for _ in ()).throw(exc("late")))
    with pytest.raises(exc):
        trainer2.train()
    boom.remove()
    assert all(not getattr(p, "_post_accumulate_grad_hooks", None) and not getattr(p, "_backward_hooks", None)
               for p in trainer2.model.parameters())
    assert late.monitor is not None and late.monitor._closed


def test_a_finished_run_leaves_the_trainer_instance_as_it_began(tmp_path: Path) -> None:
    cb = GradvizCallback(every=1, save=False)
    trainer = run(tmp_path, cb, max_steps=1)
    assert "training_step" not in vars(trainer)
    assert cb.monitor is not None and cb.monitor._closed

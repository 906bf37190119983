"""Overhead of GradvizCallback on a transformers.Trainer run on CPU (target: at most 3% slower).

    python benchmarks/bench_integrations.py [--steps 20] [--repeats 5] [--every 10] [--lora] [--threads 1]

A GPT-2-like model built from its config (4 layers, 256 wide, no download), full fine-tuning by default or
LoRA on c_attn (--lora), gradient accumulation 4. Each repeat trains a fresh copy of the same weights for
`steps` optimizer steps with the same seed and data, once without and once with the callback, in alternating
order (same process, same caches, similar machine load); each such pair gives a ratio too, which follows a
drifting machine load better than the ratio of medians. Only `trainer.train()` is timed. Reports the median
wall and CPU time per optimizer step of each variant and their ratios, at the callback's default recording
rate (every=10; the first-step gradient-flow check included).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from typing import Any

import torch
import transformers

from gradviz_nb.integrations import GradvizCallback
from gradviz_nb.probes.monitor import GradientMonitor

SPENT = [0.0, 0]  # CPU seconds inside the callback's and the monitor's code, nesting depth


def timed(fn: Any) -> Any:
    """Wrap an entry point into gradviz code: its CPU time (thread) counts once, however deep the nesting."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        SPENT[1] += 1
        t0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[1] -= 1
            if SPENT[1] == 0:
                SPENT[0] += time.thread_time() - t0
    return wrapper


def account() -> None:
    """Time every way control enters gradviz during training: the callback's Trainer events and hooks, the
    monitor's optimizer step hooks and its per-parameter stale-check tensor hooks."""
    for name in ("on_train_begin", "on_pre_optimizer_step", "on_log", "on_save", "on_train_end", "_grad_ready",
                 "_requeue", "_backward_done"):
        setattr(GradvizCallback, name, timed(getattr(GradvizCallback, name)))
    for name in ("_pre_step", "_post_step"):
        setattr(GradientMonitor, name, timed(getattr(GradientMonitor, name)))
    make_hook = GradientMonitor._stale_hook
    GradientMonitor._stale_hook = lambda self, i: timed(make_hook(self, i))  # type: ignore[method-assign]


def build(lora: bool) -> Any:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=64, vocab_size=512)
    model = transformers.GPT2LMHeadModel(cfg)
    if lora:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules=["c_attn"],
                                                           lora_dropout=0.0))
    return model


def train(model: Any, data: list[dict[str, torch.Tensor]], steps: int, callback: Any | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) per optimizer step of ``trainer.train()``."""
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out, use_cpu=True, report_to=[], save_strategy="no", max_steps=steps,
            per_device_train_batch_size=4, gradient_accumulation_steps=4, learning_rate=1e-4, logging_steps=10,
            disable_tqdm=True, seed=0, dataloader_num_workers=0)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                       callbacks=[callback] if callback is not None else None)
        trainer.remove_callback(transformers.PrinterCallback)  # no log lines on stdout
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train()
        return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--lora", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    transformers.logging.set_verbosity_error()
    base = build(a.lora)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (a.steps * 16, 64), generator=g)
    data = [{"input_ids": row, "labels": row} for row in ids]
    train(copy.deepcopy(base), data, 2, None)  # warm-up: allocator, first-call paths
    account()
    times: dict[str, list[tuple[float, float]]] = {"plain": [], "callback": []}
    spent: list[float] = []
    records = 0
    for r in range(a.repeats):
        order = ["plain", "callback"] if r % 2 == 0 else ["callback", "plain"]
        for name in order:
            cb = GradvizCallback(every=a.every, save=False) if name == "callback" else None
            SPENT[0] = 0.0
            times[name].append(train(copy.deepcopy(base), data, a.steps, cb))
            if cb is not None:
                spent.append(SPENT[0] / a.steps)
            if cb is not None and cb.monitor is not None:
                records = len(cb.monitor.steps)
    kind = "LoRA" if a.lora else "full fine-tuning"
    print(f"GPT-2-like 4x256, {kind}, grad accumulation 4, {a.steps} optimizer steps x {a.repeats} repeats, "
          f"{a.threads} thread(s); callback every={a.every} ({records} records per run)")
    # CPU time of the process is reported beside wall time: on a shared machine wall time mostly measures the
    # neighbours, while the callback's cost is CPU work in this process.
    for i, clock in enumerate(("wall", "cpu")):
        med = {name: statistics.median(t[i] for t in ts) for name, ts in times.items()}
        for name, ts in times.items():
            print(f"  {clock:4s} {name:9s} median {med[name] * 1e3:8.1f} ms/step   "
                  f"all {[round(t[i] * 1e3, 1) for t in ts]}")
        pairs = [c[i] / p[i] for p, c in zip(times["plain"], times["callback"], strict=True)]
        print(f"  {clock:4s} ratio callback/plain: of the medians {med['callback'] / med['plain']:.4f}, median of the "
              f"{len(pairs)} back-to-back pairs {statistics.median(pairs):.4f}")
    # The neighbours cannot inflate this one much: CPU time measured only while gradviz code runs.
    inside = statistics.median(spent)
    plain_cpu = statistics.median(t[1] for t in times["plain"])
    print(f"  CPU time inside gradviz code (callback events and hooks, monitor hooks): median {inside * 1e3:.2f} "
          f"ms/step = {inside / plain_cpu:.2%} of the plain run's CPU time per step")


if __name__ == "__main__":
    main()

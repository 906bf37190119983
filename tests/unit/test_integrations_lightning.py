"""The Lightning GradvizCallback in a real Lightning run (CPU, accumulate_grad_batches=2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

L = pytest.importorskip("lightning.pytorch")

import gradviz_nb as gv  # noqa: E402
from gradviz_nb.integrations.lightning import GradvizCallback  # noqa: E402


class Tiny(L.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
        self.seen: list[dict[str, float]] = []  # per-layer norms PyTorch holds when Lightning calls the hook
        self.batches = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.batches += 1
        x, y = batch
        return nn.functional.mse_loss(self.body(x), y)

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        # Lightning calls this right after the callbacks' hook, before clipping: the same moment
        layers: dict[str, float] = {}
        for name, p in self.named_parameters():
            layer = name.rpartition(".")[0]
            layers[layer] = layers.get(layer, 0.0) + float(p.grad.double().pow(2).sum())
        self.seen.append({k: v**0.5 for k, v in layers.items()})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> torch.utils.data.DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 6, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    return torch.utils.data.DataLoader(data, batch_size=8)


def fit(tmp_path: Path, cb: GradvizCallback, max_steps: int = 3, clip: float | None = None) -> tuple[Any, Tiny]:
    torch.manual_seed(0)
    module = Tiny()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, accumulate_grad_batches=2,
                        gradient_clip_val=clip, logger=L.loggers.CSVLogger(str(tmp_path)), callbacks=[cb],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(tmp_path))
    trainer.fit(module, loader())
    return trainer, module


def test_one_record_per_optimizer_step_equal_to_pytorch(tmp_path: Path) -> None:
    cb = GradvizCallback(every=1)
    trainer, module = fit(tmp_path, cb, clip=1e-3)  # clipping bites: records must be the pre-clip numbers
    mon = cb.monitor
    assert mon is not None
    assert trainer.global_step == 3 and module.batches == 6
    assert mon.steps == [1, 2, 3] and mon.steps_seen == 3
    assert mon.layers == ["body.0", "body.2"]
    hist = mon.history("norm")
    for r, seen in enumerate(module.seen):
        assert hist[r].tolist() == pytest.approx([seen["body.0"], seen["body.2"]], rel=1e-6)
    assert float(hist[0].pow(2).sum().sqrt()) > 1e-2  # well above max_norm: not the clipped gradients
    assert mon.clipped == (3, 3)
    assert not cb.flags()
    saved = gv.GradientMonitor.load(Path(trainer.log_dir) / "gradviz_monitor.pt")
    assert saved.steps == [1, 2, 3] and torch.equal(saved.history("norm"), hist)
    # each record's numbers reached the trainer's logger
    import csv

    with open(Path(trainer.log_dir) / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("gradviz/grad_norm")]
    totals = [float(r["gradviz/grad_norm"]) for r in rows]
    assert totals == pytest.approx([float(h.pow(2).sum().sqrt()) for h in hist], rel=1e-6)


def test_every_counts_optimizer_steps_and_flags_a_cut_layer(tmp_path: Path) -> None:
    class Cut(Tiny):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            h = self.body[1](self.body[0](x)).detach()  # the first layer never gets a gradient
            return nn.functional.mse_loss(self.body[2](h), y)

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            pass

    cb = GradvizCallback(every=2)
    torch.manual_seed(0)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=5, accumulate_grad_batches=2, logger=False,
                        callbacks=[cb], enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(Cut(), loader())
    assert cb.monitor is not None and cb.monitor.steps == [1, 3, 5]
    kinds = {(f.kind, f.target) for _, f in cb.flags()}
    assert ("no-grad", "body.0") in kinds  # from the monitor (3 records in a row) and the first-step flow check
    assert not any(t.startswith("body.2") for _, t in kinds)


class Boom(Exception):
    pass


@pytest.mark.parametrize("exc", [Boom, KeyboardInterrupt])
def test_a_failed_fit_leaves_no_hook_and_no_live_monitor(tmp_path: Path, exc: type[BaseException]) -> None:
    """The model raising (or the user interrupting) on the 3rd batch: Lightning calls ``on_exception``, never
    ``on_train_end``; every hook goes and the monitor is closed, its history kept."""
    import signal

    torch.manual_seed(0)
    module = Tiny()

    def fail(m: nn.Module, args: Any) -> None:
        if module.batches == 3:
            raise exc("failed mid-fit")

    module.body.register_forward_pre_hook(fail)
    cb = GradvizCallback(every=1, save=False)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=5, accumulate_grad_batches=1, logger=False,
                        callbacks=[cb], enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(tmp_path))
    sigint = signal.getsignal(signal.SIGINT)
    try:
        # Lightning turns an interrupt into a graceful shutdown and sys.exit(1)
        with pytest.raises(SystemExit if exc is KeyboardInterrupt else exc):
            trainer.fit(module, loader())
    finally:
        signal.signal(signal.SIGINT, sigint)  # Lightning ignores SIGINT after an interrupt
    assert all(not getattr(p, "_post_accumulate_grad_hooks", None) and not getattr(p, "_backward_hooks", None)
               for p in module.parameters())
    assert cb.monitor is not None and cb.monitor._closed and cb.monitor.steps

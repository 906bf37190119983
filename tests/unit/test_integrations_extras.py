"""Optional extras: `import gradviz_nb` pulls none of them in, and each feature whose package is missing says
which extra installs it (absence simulated by ``sys.modules[name] = None``, which makes ``import name`` fail)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import gradviz_nb as gv


def test_import_gradviz_nb_imports_no_optional_framework() -> None:
    code = ("import sys, gradviz_nb, gradviz_nb.integrations; "
            "print(sorted(m for m in ('transformers', 'peft', 'accelerate', 'lightning', 'tensorboard', 'pandas', "
            "'playwright') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def missing(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def fresh_import(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.delitem(sys.modules, module, raising=False)
    importlib.import_module(module)


def test_integrations_name_their_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    missing(monkeypatch, "transformers")
    with pytest.raises(gv.GradvizError, match=r"GradvizCallback needs transformers: pip install gradviz_nb\[hf\]"):
        fresh_import(monkeypatch, "gradviz_nb.integrations.transformers")
    missing(monkeypatch, "lightning", "lightning.pytorch")
    with pytest.raises(gv.GradvizError, match=r"needs lightning: pip install gradviz_nb\[lightning\]"):
        fresh_import(monkeypatch, "gradviz_nb.integrations.lightning")


def tiny() -> tuple[nn.Module, gv.GradientMonitor]:
    model = nn.Sequential(nn.Linear(3, 2))
    mon = gv.GradientMonitor(model)
    model(torch.ones(1, 3)).sum().backward()
    mon.step()
    return model, mon


def test_tensorboard_and_pandas_name_their_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    model, mon = tiny()
    flow = gv.gradient_flow(model)
    missing(monkeypatch, "torch.utils.tensorboard")
    with pytest.raises(gv.GradvizError, match=r"pip install gradviz_nb\[tensorboard\]"):
        mon.to_tensorboard(tmp_path)
    missing(monkeypatch, "pandas")
    with pytest.raises(gv.GradvizError, match=r"to_pandas needs pandas: pip install gradviz_nb\[pandas\]"):
        flow.to_pandas()


def test_image_export_and_charts_name_their_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gradviz_nb.export.image import save_png
    from gradviz_nb.widgets.flow_charts import as_widget

    model, _ = tiny()
    loss = model(torch.ones(1, 3)).sum()
    missing(monkeypatch, "playwright", "playwright.sync_api")
    with pytest.raises(gv.GradvizError, match=r"pip install gradviz_nb\[image\]"):
        save_png(gv.GraphWidget(loss), tmp_path / "x.png")
    missing(monkeypatch, "jupyter_bokeh")
    from bokeh.plotting import figure

    with pytest.raises(gv.GradvizError, match=r"pip install gradviz_nb\[charts\]"):
        as_widget(figure())

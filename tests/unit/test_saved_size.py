"""A saved notebook carries the canvas code once, not once per graph widget.

Each GraphWidget's `_esm` is a small loader; the 0.67 MB canvas lives in ONE runtime model per kernel
(`gradviz_nb/widgets/runtime.py`), gzip-compressed, that every widget references. Two small notebooks,
executed by nbclient with `store_widget_state=True` as a user's saved notebook would be: four graph
widgets, and the same with a fifth. Sizes are of the written `.ipynb` files. Before the runtime, each
widget saved the whole bundle: 4 widgets of this graph weighed 9 MB, a fifth added 2.2 MB.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from gradviz_nb.widgets.page.contract import Traits

SETUP = """\
import torch
from torch import nn
import gradviz_nb as gv

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
with gv.capture(model) as cap:
    loss = model(torch.randn(5, 4)).pow(2).mean()"""
GRAPH = "gv.GraphWidget(loss, model=model, capture=cap, height={h})"
MB, KB = 1_000_000, 1_000
STATE = "application/vnd.jupyter.widget-state+json"


def _run(n_widgets: int, base: Path) -> tuple[int, nbformat.NotebookNode]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP)] + [
        nbformat.v4.new_code_cell(GRAPH.format(h=300 + 10 * i)) for i in range(n_widgets)
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, store_widget_state=True, timeout=180, resources={"metadata": {"path": str(base)}}).execute()
    path = base / f"graphs_{n_widgets}.ipynb"
    nbformat.write(nb, path)
    return path.stat().st_size, nb


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[int, nbformat.NotebookNode]]:
    base = tmp_path_factory.mktemp("saved_size")
    return {n: _run(n, base) for n in (4, 5)}


def _models(nb: Any) -> dict[str, Any]:
    state: dict[str, Any] = nb.metadata["widgets"][STATE]["state"]
    return state


def _graphs(nb: Any) -> list[dict[str, Any]]:
    return [m["state"] for m in _models(nb).values() if m["model_name"] == "AnyModel"]


def test_four_graph_widgets_save_under_1_5_mb(saved: dict[int, tuple[int, Any]]) -> None:
    size, nb = saved[4]
    print(f"\n4 graph widgets: {size / MB:.2f} MB saved")
    assert len(_graphs(nb)) == 4
    assert size <= 1.5 * MB, f"{size / MB:.2f} MB"


def test_a_fifth_widget_adds_its_data_and_at_most_100_kb(saved: dict[int, tuple[int, Any]]) -> None:
    (four, _), (five, nb) = saved[4], saved[5]
    fifth = max(_graphs(nb), key=lambda g: g["height"])  # heights 300, 310, ... tell the cells apart
    data = len(json.dumps({k: fifth[k] for k in Traits.__annotations__ if k in fifth}))
    added = five - four
    print(f"\nthe 5th widget adds {added / KB:.1f} kB, {data / KB:.1f} kB of it its page traits")
    assert added - data <= 100 * KB, f"{(added - data) / KB:.0f} kB beyond its own data"


def test_the_canvas_code_is_saved_once_and_every_widget_names_it(saved: dict[int, tuple[int, Any]]) -> None:
    _, nb = saved[5]
    models = _models(nb)
    runtimes = [k for k, m in models.items() if m["model_name"] == "WidgetModel" and "code" in m["state"]]
    assert len(runtimes) == 1
    runtime = models[runtimes[0]]
    assert runtime["model_module"] == "@jupyter-widgets/base"  # a model every widget manager knows
    assert runtime["state"]["encoding"] == "gzip+base64" and len(runtime["state"]["digest"]) == 16
    graphs = _graphs(nb)
    assert len(graphs) == 5 and {g["_runtime"] for g in graphs} == {f"IPY_MODEL_{runtimes[0]}"}
    assert all(len(g["_esm"]) < 10 * KB for g in graphs)  # the loader, not the canvas

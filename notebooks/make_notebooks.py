"""Writes the notebooks from plain Python so their source is reviewable; run after editing."""

from __future__ import annotations

import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).parent


def write(name: str, cells: list[tuple[str, str]]) -> None:
    nb = new_notebook(
        cells=[new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(nb, HERE / name)


TOUR = [
    ("md", """# A tour of gradviz_nb

`gradviz_nb` draws the autograd graph PyTorch builds behind a tensor, and lets you click through it.
Edges run forward (inputs at the top, the loss at the bottom); gradients flow back up along them.

* **click a module box** to open it, click its header to close it again;
* **click a node** to see its op, module, output shape and what it saved for backward;
* scroll to zoom, drag to pan, *fit* to see everything."""),
    ("code", """import torch
from torch import nn
import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, MLP, gpt2_loss

torch.manual_seed(0)"""),
    ("md", """## 1. A small MLP

Without module capture the graph still shows, leaves are named from `model`, and the widget says how to
get module boxes."""),
    ("code", """mlp = MLP(d_in=4, d_hidden=8, d_out=3)
x = torch.randn(5, 4)
loss = nn.functional.cross_entropy(mlp(x), torch.tensor([0, 1, 2, 0, 1]))
gv.GraphWidget(loss, model=mlp, height=420)"""),
    ("md", """Run the forward inside `gv.capture(model)` and every autograd node is attributed to the module call
that made it: the linear layers become boxes."""),
    ("code", """with gv.capture(mlp) as cap:
    loss = nn.functional.cross_entropy(mlp(x), torch.tensor([0, 1, 2, 0, 1]))
gv.GraphWidget(loss, model=mlp, capture=cap, height=420)"""),
    ("md", """The same graph as data: `gv.trace` returns an `AutogradGraph` whose `.nx` is a NetworkX `DiGraph`
(forward direction; `output_nr` and `input_nr` on the edges)."""),
    ("code", """g = gv.trace(loss, model=mlp, capture=cap)
print(g.summary())
print(g.leaves())
print(g.nx.nodes[g.find("fc1.weight")])"""),
    ("md", """## 2. A GPT-2-sized transformer

124M parameters in plain PyTorch (`gradviz_nb.demo_models.GPT2`): 12 blocks, token embedding tied to the
output head. The graph opens with one box per top-level module; open a block to see attention
(`scaled_dot_product_attention`) and the MLP inside. The tied weight is **one** leaf with both names."""),
    ("code", """gpt2 = GPT2(GPT2Config())
print(f"{gpt2.num_parameters() / 1e6:.0f}M parameters")
with gv.capture(gpt2) as cap:
    loss = gpt2_loss(gpt2, batch=1, seq=16)
gpt2_view = gv.GraphWidget(loss, model=gpt2, capture=cap, height=640)
gpt2_view"""),
    ("md", """The widget's state is in synced traits: open a block from Python, or read what the user opened."""),
    ("code", """gpt2_view.expanded = ["blocks.0", "blocks.0.attn"]
print(gpt2_view.expanded, gpt2_view.selected or "(nothing selected)")"""),
    ("code", """tied = gv.trace(loss, model=gpt2).find("wte.weight")
print(gv.trace(loss, model=gpt2).nx.nodes[tied]["names"])"""),
    ("md", """## 3. `gv.watch`: boxes without passing a capture around

`gv.watch(model)` keeps capturing (only the last few forwards are kept) until `gv.unwatch(model)`."""),
    ("code", """gv.watch(mlp)
loss = mlp(x).sum()
view = gv.GraphWidget(loss)   # no model, no capture: the watch supplies both names and boxes
gv.unwatch(mlp)
view"""),
    ("md", """## 4. Clear errors

A tensor with no graph gets an explanation, not a traceback from deep inside."""),
    ("code", """with torch.no_grad():
    frozen_loss = mlp(x).sum()
try:
    gv.GraphWidget(frozen_loss)
except gv.GradvizError as err:
    print("GradvizError:", err)"""),
]

if __name__ == "__main__":
    write("01_tour.ipynb", TOUR)

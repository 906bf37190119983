"""Writes the notebooks from plain Python so their source is reviewable; run after editing."""

from __future__ import annotations

import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).parent


def write(name: str, cells: list[tuple[str, str]]) -> None:
    # Cell ids from the position, not random: regenerating leaves unchanged notebooks byte-identical.
    nb = new_notebook(
        cells=[
            (new_markdown_cell if kind == "md" else new_code_cell)(src, id=f"cell-{i}")
            for i, (kind, src) in enumerate(cells)
        ],
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

Without module capture the graph still shows and leaves are named from `model`; ops are not grouped
into boxes (on a graph big enough for boxes to help, over 25 nodes, the widget's notes say how to get them)."""),
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

WHAT_IF = [
    ("md", """# What if I detach here? What if I freeze this?

A gradient reaches a parameter only along a path of tensors that require grad. Detaching a tensor, or
freezing a leaf (`requires_grad=False`), cuts paths. `AutogradGraph.what_if` answers "which parameters
lose their gradient, and how much of the backward pass goes away?" from the graph alone; the widget answers
the same question live as you click, and `GraphWidget.from_fn` checks the answer by really re-running
PyTorch."""),
    ("code", """import torch
import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss

torch.manual_seed(0)"""),
    ("md", """## 1. The classic exercise

`loss = (relu(x @ W1) @ W2).sum()`. Which tensors get a gradient? Which lose it if `h = h.detach()` after
the relu? Predict first, then look."""),
    ("code", """x = torch.randn(5, 4)
W1 = torch.randn(4, 8, requires_grad=True)
W2 = torch.randn(8, 3, requires_grad=True)
g = gv.trace((torch.relu(x @ W1) @ W2).sum(), names={"x": x, "W1": W1, "W2": W2})
relu = next(n for n, d in g.nx.nodes(data=True) if d["op"] == "ReluBackward0")
print("nothing cut:      ", g.what_if())
print("detach relu's out:", g.what_if(detach=[relu]))
print("freeze W2:        ", g.what_if(freeze=["W2"]))"""),
    ("md", """Answer: with `h` detached, `W1` loses its gradient (nothing above the cut is reached) and the backward
pass no longer runs the relu, the matmul and `W1`'s accumulation. `W2` still learns.

In the widget, switch on **What-if** and click the edge leaving `Relu` (or the `Relu` node) to detach,
a leaf to freeze it. Lost leaves turn red, pruned nodes fade, and the summary says how much of the
backward pass remains. **Verify** re-runs PyTorch with exactly those cuts and compares `.grad is None`."""),
    ("code", """two_layer = gv.GraphWidget.from_fn(lambda: (torch.relu(x @ W1) @ W2).sum(),
                                   names={"W1": W1, "W2": W2}, height=380)
two_layer.toggles = {"detach": [f"{relu}:0"], "freeze": []}   # the same as clicking the edge
two_layer"""),
    ("code", """result = two_layer.verify()       # or press "Verify (re-run)" in the widget
print(result)
assert result["agree"] and result["actual_lost"] == ["W1"]
assert W1.grad is None and W1.requires_grad   # the user's tensors are exactly as before"""),
    ("md", """## 2. Adapters: freeze the base, keep the adapters learning

A small GPT-2 with LoRA adapters beside the projections of its **last** block (a common cheap fine-tune).
Freezing everything but the adapters removes most of the backward pass: nothing below the last block needs
a gradient any more. With adapters in **every** block, the activation gradients must still flow all the
way down, so freezing the base only removes the weight-gradient branches."""),
    ("code", """def lora_gpt2(every_block: bool) -> GPT2:
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=4, n_head=4, d_model=64, vocab=500, block_size=32))
    add_lora(model if every_block else model.blocks[-1], freeze_base=False)
    return model


for every_block in (False, True):
    model = lora_gpt2(every_block)
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, seq=16)
    g = gv.trace(loss, model=model, capture=cap)
    base = [name for name in g.leaves() if "lora_" not in name]
    frozen_base = g.what_if(freeze=base)
    adapters = [name for name in g.leaves() if "lora_" in name]
    where = "every block" if every_block else "last block "
    print(f"adapters in {where}: backward runs {frozen_base.runs} of {frozen_base.total} nodes; "
          f"{sum(a in frozen_base.kept for a in adapters)} of {len(adapters)} adapter weights keep their gradient")"""),
    ("md", """The same in the widget, verified against PyTorch. Shift-click a collapsed block to freeze it whole;
click a block to detach its output."""),
    ("code", """model = lora_gpt2(every_block=False)
adapters = gv.GraphWidget.from_fn(lambda: gpt2_loss(model, seq=16), model=model, height=560)
base = [name for name in adapters.graph.leaves() if "lora_" not in name]
adapters.toggles = {"detach": [], "freeze": sorted({adapters.graph.leaves()[name] for name in base})}
print(adapters.what_if())
check = adapters.verify()
print("verified:", check["agree"], "-", len(check["actual_lost"]), "leaves really got no gradient")
adapters"""),
    ("md", """## 3. Where was the path cut?

When the graph is traced with `gv.capture`, detached tensors and frozen parameters that never reach the
backward graph are still drawn, greyed, where they entered the computation. Here the base is *really*
frozen, and one block's attention output is detached by the model's own code."""),
    ("code", """frozen_model = add_lora(GPT2(GPT2Config.small_test()))       # base frozen for real
block = frozen_model.blocks[1]
original = block.attn.forward
block.attn.forward = lambda h: original(h).detach()           # a bug: the adapter in blocks.1 learns nothing
with gv.capture(frozen_model) as cap:
    loss = gpt2_loss(frozen_model)
cut = gv.trace(loss, model=frozen_model, capture=cap)
print(len(cut.nx.graph["ghosts"]), "ghost tensors;",
      [gh["label"] for gh in cut.nx.graph["ghosts"] if gh["kind"] == "detached"])
print("adapters in the graph:", sorted(n for n in cut.leaves() if "lora_" in n))
gv.GraphWidget(cut, height=520)"""),
]

SHARE_AND_COMPARE = [
    ("md", """# Share and compare

Debugging is often done together: paste a graph into a bug report, compare a model before and after a
change. This notebook exports a graph (an HTML page that stays interactive without a kernel, images, data),
diffs a model before and after LoRA adapters and before and after activation checkpointing, and shows the
memory each node holds for backward."""),
    ("code", """import pathlib, tempfile
import networkx as nx
import torch
import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss

out = pathlib.Path(tempfile.mkdtemp(prefix="gradviz_share_"))


def traced(checkpoint=None, lora=False):
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test(checkpoint=checkpoint))
    if lora:
        add_lora(model, freeze_base=False)
    with gv.capture(model) as cap:
        loss = gpt2_loss(model, batch=2)
    return gv.trace(loss, model=model, capture=cap)


plain = traced()
print(plain)"""),
    ("md", """## 1. Export

`gv.export_html` (or `widget.save_html`) writes **one** file: the front end, the graph and the view's state
(open boxes, toggles, overlays). Open it from disk in any browser, no kernel and no network: boxes open and
close, details show, what-if toggles answer. `widget.save_png` / `save_svg` render the same page in headless
Chromium (needs `apt-get install -y chromium`)."""),
    ("code", """page = gv.export_html(plain, out / "gpt2_small.html", title="GPT-2 (small test config)")
print(page, f"{page.stat().st_size / 1e6:.1f} MB")"""),
    ("md", """The graph as data: JSON that round-trips exactly, GraphML for NetworkX/Gephi/yEd (lists become JSON
text), DOT for Graphviz."""),
    ("code", """text = gv.to_json(plain)
again = gv.from_json(text)
assert list(again.nx.nodes(data=True)) == list(plain.nx.nodes(data=True)) and again.nx.graph == plain.nx.graph
gv.to_graphml(plain, out / "gpt2_small.graphml")
h = nx.read_graphml(out / "gpt2_small.graphml")
print(len(text), "characters of JSON;", h.number_of_nodes(), "nodes read back from GraphML")
print(gv.to_dot(plain)[:300], "...")"""),
    ("md", """## 2. Before and after LoRA adapters

`gv.diff(before, after)` matches leaves by parameter name (a wrapped `c_attn` whose weight is now
`c_attn.base.weight` is recognised) and ops by module path, op and occurrence. Exactly the adapter weights
are new, and each gets a gradient path."""),
    ("code", """lora = traced(lora=True)
d = gv.diff(plain, lora)
print(d.summary())
assert d.added_leaves == sorted(n for n in lora.leaves() if "lora_" in n)"""),
    ("md", """The diff view: the "after" graph plus what was removed, every node with a status (added, removed,
changed, same) in the widget's `diff` trait (the page's colours for it are on the way; the data is here)."""),
    ("code", """view = gv.GraphWidget(d, height=520)
view.expanded = ["blocks.0", "blocks.0.attn", "blocks.0.attn.c_attn"]
print({status: list(view.diff["status"].values()).count(status) for status in ("added", "changed", "same")})
view"""),
    ("md", """## 3. Before and after activation checkpointing

Non-reentrant checkpointing keeps the graph's structure, but its saved activations are packed away and
recomputed during backward: the diff shows the memory moved out. Reentrant checkpointing hides each block
behind one opaque `CheckpointFunctionBackward` node."""),
    ("code", """for mode in ("non_reentrant", "reentrant"):
    print(f"--- checkpoint={mode}")
    print(gv.diff(plain, traced(checkpoint=mode)).summary())
    print()"""),
    ("md", """## 4. Memory held for backward

Per node, the bytes of the tensors it saved for backward, read from the graph's metadata without unpacking
anything; tensors sharing storage are counted once, parameters the model holds anyway are reported apart."""),
    ("code", """mem = gv.memory_held(plain)
print(mem.table(8))
print({call: total for call, total in mem.per_call.items() if call.count(".") == 1})"""),
    ("code", """gv.GraphWidget(mem, height=480)  # drawn by bytes held (node size)"""),
]

STEP_BY_STEP = [
    ("md", """# Backprop, step by step

`gv.record_backward(loss)` runs the **real** `loss.backward()` with a hook on every autograd node and records,
in the order PyTorch's engine runs them, what each node received and what it sent on. Your `.grad` are left
exactly as they were. Give the recording to `GraphWidget` and press **Step** (or use the arrow keys): the
running node lights up, gradients travel back along the edges, and the panel shows the local derivative rule
with the numbers PyTorch used."""),
    ("code", """import torch
import gradviz_nb as gv
from gradviz_nb.demo_models import MLP"""),
    ("md", """## 1. A scalar example, micrograd style

`gv.capture()` (no model needed) keeps the forward value of every small tensor, so each node can show
*value | grad*."""),
    ("code", """a = torch.tensor(2.0, requires_grad=True)
b = torch.tensor(-3.0, requires_grad=True)
c = torch.tensor(10.0, requires_grad=True)
with gv.capture() as cap:
    e = a * b
    d = e + c
    L = torch.tanh(d * 0.25)
rec = gv.record_backward(L, capture=cap, names={"a": a, "b": b, "c": c})
for step in rec.steps:
    print(f"{step.op:16s}", " | ".join(rec.explain(step)[1:]) or "(leaf: accumulates into .grad)")"""),
    ("md", """Every number above is PyTorch's: the gradient a node received, the forward values it saved, and the
gradient it sent. Check the leaves against `torch.autograd.grad`:"""),
    ("code", """print({name: rec.leaf_grad(name).item() for name in "abc"})
print(dict(zip("abc", (g.item() for g in torch.autograd.grad(L, [a, b, c], retain_graph=True)), strict=True)))
assert a.grad is None  # recording did not touch .grad"""),
    ("code", """stepper = gv.GraphWidget(rec, height=460)
stepper.step = 2   # the cursor is a synced trait: set it here, or press Step in the widget
stepper"""),
    ("md", """## 2. A two-layer MLP

`fc1.weight` is used once, but `x` feeds several rows: watch the **contributions** counter on a leaf used
by more than one consumer, and how the engine sums them before the leaf's accumulation runs."""),
    ("code", """torch.manual_seed(0)
mlp = MLP(d_in=3, d_hidden=4, d_out=2)
x = torch.randn(2, 3, requires_grad=True)
with gv.capture(mlp) as cap:
    loss = mlp(x).pow(2).mean() + (x * x).sum() * 0.1
mlp_rec = gv.record_backward(loss, model=mlp, capture=cap, names={"x": x})
x_id = mlp_rec.graph.find("x")
into_x = [(s.op, d.input_nr) for s in mlp_rec.steps for d in s.deliveries if d.target == x_id]
print("contributions into x:", into_x)
gv.GraphWidget(mlp_rec, height=520)"""),
    ("md", """## 3. The stale-gradient bug

Two backward passes without `zero_grad()`: the second **adds** to the first. `accumulate=True` really
writes `.grad`, so the recording shows `.grad` going from pass 1 to pass 1+2."""),
    ("code", """w = torch.zeros(2, requires_grad=True)
steps = gv.record_backward((w * torch.tensor([0.5, -0.3])).sum(), names={"w": w}, accumulate=True)
gv.record_backward((w * torch.tensor([0.1, 0.2])).sum(), names={"w": w}, accumulate=True, into=steps)
leaf = next(s for s in steps.pass_steps(1) if s.node == steps.graph.find("w"))
print("pass 1 sent:", steps.leaf_grad("w", 0).tolist(), " pass 2 sent:", steps.leaf_grad("w", 1).tolist())
print(".grad before pass 2:", leaf.leaf_before.value.tolist(), " after:", leaf.leaf_after.value.tolist())
print("w.grad now:", w.grad.tolist(), "<- stale: should have been zeroed between the steps")
gv.GraphWidget(steps, height=360)"""),
]


GRADIENT_FLOW = [
    ("md", """# Is every part of my model learning?

`gv.gradient_flow(model)` reads the gradients after a backward (it never changes them) and reports, per
parameter and per module, the L2 norm, max |g|, mean, fraction of zeros, NaN/Inf count and the
gradient-to-weight ratio, then flags what looks wrong: **no gradient** (with the cause it observed),
**vanishing** / **exploding** layers, **NaN/Inf**, **dead adapters**, and (with the monitor) **stale**
gradients. Charts are Bokeh, loaded inline: nothing comes from a CDN.

How a layer is judged (never against the median layer, which calls the healthy top of a vanishing network
"exploding"):
* **exploding**: one SGD step at a usual learning rate (1e-3) would move the layer by more than its own norm,
  or its gradient is 100x above every other layer's while large for its weights;
* **vanishing**: even a step at learning rate 1 would not change the weights at their dtype's resolution, or
  the gradient/weight ratio falls steadily with depth, and this layer sits more than 10x under the output
  layers. Every verdict in this notebook is checked against what PyTorch really does in `tests/unit/bugzoo`."""),
    ("code", """import torch
from torch import nn
import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss

torch.manual_seed(0)"""),
    ("md", """## 1. Vanishing gradients in a deep sigmoid MLP

Twenty sigmoid layers: each multiplies the gradient by at most 1/4 on its way back, so the first layers get
almost nothing. The bars are on a log scale, in model order; vanishing layers are orange, exploding ones red.
Hover for the numbers and the reason."""),
    ("code", """def deep_mlp(residual: bool, final_norm: bool = False, depth: int = 20, width: int = 16) -> nn.Module:
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(width) if residual else nn.Identity()
            self.fc = nn.Linear(width, width)
        def forward(self, x):
            h = torch.sigmoid(self.fc(self.norm(x)))
            return x + h if residual else h
    head = [nn.LayerNorm(width)] if final_norm else []
    return nn.Sequential(*[Block() for _ in range(depth)], *head, nn.Linear(width, 1))

x, y = torch.randn(64, 16), torch.randn(64, 1)
plain = deep_mlp(residual=False)
nn.functional.mse_loss(plain(x), y).backward()
flow = gv.gradient_flow(plain)
print(flow.summary())
flow.chart(plain)"""),
    ("md", """Residual connections and normalisation give the gradient a direct path back. But a residual stream
without a final norm grows with depth (each block adds up to 1 per feature), and the head now sees large
inputs: its gradient is far above every other layer's, and the flag says so."""),
    ("code", """residual = deep_mlp(residual=True)
nn.functional.mse_loss(residual(x), y).backward()
print(gv.gradient_flow(residual).summary())"""),
    ("md", """Is that flag true? Ask PyTorch: a few SGD steps at a modest learning rate."""),
    ("code", """opt = torch.optim.SGD(residual.parameters(), lr=1e-3)
for step in range(6):
    opt.zero_grad()
    loss = nn.functional.mse_loss(residual(x), y)
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4g}")"""),
    ("md", """It diverges. A final LayerNorm before the head (as in pre-LN transformers) fixes it: every layer
learns, nothing is flagged."""),
    ("code", """fixed = deep_mlp(residual=True, final_norm=True)
nn.functional.mse_loss(fixed(x), y).backward()
fixed_flow = gv.gradient_flow(fixed)
print(fixed_flow.summary())
fixed_flow.chart(fixed)"""),
    ("md", """## 2. Hunting a dead adapter

A Hugging Face GPT-2 (tiny, randomly initialised from a config: no downloads) fine-tuned with `peft` LoRA
adapters on `c_attn`, base frozen. A bug detaches the output of `h.1`'s attention projection, so its
adapter gets no gradient. The dashboard puts the graph (coloured by gradient norm through its `overlay`)
beside the charts: click a bar to select its module in the graph, click a node in the graph to highlight
its layers."""),
    ("code", """import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import peft
import transformers

torch.manual_seed(0)
config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0, fan_in_fan_out=True)
model = peft.get_peft_model(transformers.GPT2LMHeadModel(config), lora)
cut = model.base_model.model.transformer.h[1].attn.c_attn
original = cut.forward
cut.forward = lambda *args, **kwargs: original(*args, **kwargs).detach()   # the bug
ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
with gv.capture(model) as cap:
    loss = model(input_ids=ids, labels=ids).loss
loss.backward()
dash = gv.Dashboard(model, loss, capture=cap, height=520)
dash"""),
    ("code", """dead = [f for f in dash.flow.flags if f.kind == "dead-adapter"]
for f in dead:
    print(f.target, "->", f.reason)
dash.select(dead[0].target)          # what a click on its bar does
print("selected in the graph:", dash.graph.selected)"""),
    ("md", """## 3. Monitoring a training run

`GradientMonitor` records per-layer gradient norms every `every` steps (batched `torch._foreach_norm`, no
`.item()` per parameter), in a bounded buffer that halves its resolution instead of growing. The chart below
updates live while the loop runs. One step "forgets" `zero_grad()`: the monitor flags it as stale."""),
    ("code", """torch.manual_seed(0)
net = GPT2(GPT2Config.small_test())
opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
monitor = gv.GradientMonitor(net, every=2, capacity=64)
monitor.chart()"""),
    ("code", """for step in range(60):
    loss = gpt2_loss(net, batch=4, seed=step % 4)
    loss.backward()
    monitor.step()                   # after backward, before the optimizer step
    opt.step()
    if step != 30:                   # the bug: one missing zero_grad
        opt.zero_grad()
monitor.push()                       # final state to the chart
monitor.close()                      # no hooks left
print(monitor.summary())"""),
    ("code", """monitor.save("/tmp/gradviz_monitor.pt")
print(gv.GradientMonitor.load("/tmp/gradviz_monitor.pt"))"""),
]

BIG_MODELS = [
    ("md", """# Big models: 48 blocks, 10,000 and 50,000 autograd nodes

A real network's autograd graph has thousands of nodes. `gradviz_nb` keeps it explorable:

* **repeated blocks fold**: consecutive calls with identical structure (same modules, ops and shapes)
  are drawn as one stacked box, "48 × Block"; click it to unfold into the individual blocks;
* **open a box and only that part moves**: the rest of the picture stays where it was;
* **search** (the box in the toolbar) finds a node, parameter or module by name or op anywhere in the
  graph, opens what hides it and centres on it; setting `widget.selected` from Python does the same;
* **big graphs load lazily**: above a few thousand nodes the page first receives the module tree and
  a compact wiring of the graph (about 95 bytes per node instead of 480), and the full records of a
  box's nodes when the box is opened (from the kernel, or from the data an exported page embeds);
* a view that would be unreadable (thousands of items at once) is refused with a message that
  suggests closing boxes or searching instead."""),
    ("code", """import json, tempfile, time
from pathlib import Path
import torch
import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss

torch.manual_seed(0)
torch.set_num_threads(1)"""),
    ("md", """## 1. A 48-block transformer (d_model 256)

About 2,100 autograd nodes. The first view shows the embeddings, one folded "48 × Block" stack and
the head."""),
    ("code", """deep = GPT2(GPT2Config(n_layer=48, n_head=4, d_model=256, vocab=1000, block_size=64))
with gv.capture(deep) as cap:
    loss = gpt2_loss(deep, batch=1, seq=16)
t0 = time.perf_counter()
g = gv.trace(loss, model=deep, capture=cap)
print(f"traced {len(g):,} nodes in {(time.perf_counter() - t0) * 1e3:.0f} ms")
w = gv.GraphWidget(g, height=520)
print("fold groups:", [(f["id"], len(f["calls"]), f["type"]) for f in w.graph_data["folds"]])
w"""),
    ("md", """Select a parameter from Python: the page unfolds the stack, opens `blocks.30` and its MLP, and
centres on the weight. `w.expanded` and `w.unfolded` follow what the page opened."""),
    ("code", """w.selected = g.find("blocks.30.mlp.c_fc.weight")"""),
    ("md", """## 2. 10,000 nodes: lazy loading

A 232-block narrow GPT-2 (d_model 32). The widget goes lazy on its own (`widget.lazy`); compare what
the page receives first with the whole graph."""),
    ("code", """tall = GPT2(GPT2Config(n_layer=232, n_head=2, d_model=32, vocab=101, block_size=16))
with gv.capture(tall) as cap2:
    loss2 = gpt2_loss(tall, batch=1, seq=8)
t0 = time.perf_counter()
big = gv.GraphWidget(loss2, model=tall, capture=cap2, height=520)
print(f"{len(big.graph):,} nodes, lazy={big.lazy}, widget built in {(time.perf_counter() - t0) * 1e3:.0f} ms")
eager = gv.GraphWidget(big.graph, lazy=False)
first, whole = len(json.dumps(big.graph_data)), len(json.dumps(eager.graph_data))
print(f"first payload {first / 1e6:.2f} MB ({first / len(big.graph):.0f} B/node) vs eager {whole / 1e6:.2f} MB")
big"""),
    ("md", """Opening a box asks the kernel for that box's nodes only (a few hundred bytes per block). The same
exchange, by hand:"""),
    ("code", """reply = big.answer({"id": 1, "kind": "load", "body": {"calls": ["blocks.100"]}})
print(reply["id"], reply["ok"], [(c["call"], len(c["nodes"])) for c in reply["body"]["chunks"]])
print(big.answer({"id": 2, "kind": "load", "body": {"calls": ["no.such.block"]}})["error"])"""),
    ("md", """An exported page carries every box's records and loads them the same way with no kernel:"""),
    ("code", """out = Path(tempfile.mkdtemp()) / "tall.html"
big.save_html(out)
print(out.name, f"{out.stat().st_size / 1e6:.1f} MB")"""),
]

DOCTOR = [
    ("md", """# The doctor: what is wrong with my training loop?

`gv.doctor(step, model, opt)` runs your own training step (twice: stale gradients only show on the second),
watches everything it does, names each classic bug with the evidence it saw and a fix, and then puts the
model, the optimizer, the random number generators and `.grad` back exactly as they were.

Below, a small network and a training step with **four planted bugs**: the loop forgets `zero_grad()`, the
optimizer misses a parameter, a block reads its weight through `.data`, and the head takes the `log` of a
value that reaches 0. We ask the doctor, click its findings on the graph, and fix them one cell at a time."""),
    ("code", """import torch
from torch import nn
import gradviz_nb as gv

torch.manual_seed(0)

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.use_data = True                                    # bug 3: .data cuts the gradient
    def forward(self, h):
        w = self.fc.weight.data if self.use_data else self.fc.weight
        return h + torch.relu(nn.functional.linear(h, w, self.fc.bias))

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 1)
        self.eps = 0.0                                          # bug 4: log of a value that reaches 0
    def forward(self, h):
        return torch.log(torch.relu(self.fc(h)) + self.eps)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.block, self.head = nn.Linear(8, 32), Block(), Head()
    def forward(self, x):
        return self.head(self.block(torch.relu(self.embed(x))))

model = Net()
x, y = torch.randn(64, 8), torch.randn(64, 1)
opt = torch.optim.SGD([p for n, p in model.named_parameters() if n != "embed.bias"], lr=0.05)  # bug 2
zero_grad = False                                               # bug 1: the loop forgets opt.zero_grad()

def step():
    if zero_grad:
        opt.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    opt.step()

dx = gv.doctor(step, model, opt)
print(dx.summary())"""),
    ("md", """Each finding says what is wrong, what was seen (the evidence) and the fix. The NaN's origin is the
forward `log` in `head` (PyTorch's anomaly mode would point at a backward node, after the damage). On the
graph, the findings are listed above it: click one to open the boxes around it and centre on it."""),
    ("code", """w = gv.GraphWidget(dx, height=480)
w"""),
    ("md", """Where does that NaN/Inf enter the backward pass? Record one backward *armed*:
`until="nonfinite"` runs the plain backward with one finiteness check per gradient and records it in full
only because a check fired. In the stepper, pick **Run to → first NaN/Inf (where born)**: one click frames
the node that first received finite gradients and sent NaN/Inf, and prints the rule with PyTorch's numbers.
`w.run_to(rec, "nonfinite")` is the same click from Python. Here it stops on `PowBackward0`, the squared
error: it received a finite gradient and sent -inf, because its forward input was already -inf, made by the
`log` in `head` that the doctor named. The loss itself is already Inf, so the stop says the forward made it and
names that `log`, its module and its line in the cell that defines the model (the capture kept every op's line;
`gv.find_nonfinite` names the same one)."""),
    ("code", """with gv.capture(model) as cap:
    loss = (model(x) - y).pow(2).mean()
rec = gv.record_backward(loss, model=model, capture=cap, until="nonfinite")
rw = gv.GraphWidget(rec, height=420)
stop = rw.run_to(rec, "nonfinite")
print(rec.armed)
print(stop)
assert rw.step == stop.index >= 0
rw"""),
    ("md", """Fix the worst first: the NaN. An epsilon inside the log, large enough that the log's gradient
1/(x + eps) stays bounded: `log(relu(z) + 1)` is `log1p`. (A tiny epsilon such as 1e-3 trades the NaN for a
gradient 1000 times larger at zero; the doctor then measures one SGD step moving `head.fc` by many times its
own norm and raising the loss, and calls it exploding, truthfully.)"""),
    ("code", """model.head.eps = 1.0
dx = gv.doctor(step, model, opt)
print(dx.summary())"""),
    ("md", """Next, the `.data` read in `block`: use the parameter itself."""),
    ("code", """model.block.use_data = False
dx = gv.doctor(step, model, opt)
print(dx.summary())"""),
    ("md", """The optimizer: build it from `model.parameters()`."""),
    ("code", """opt = torch.optim.SGD(model.parameters(), lr=0.05)
dx = gv.doctor(step, model, opt)
print(dx.summary())"""),
    ("md", """And the stale gradients: clear them once per step."""),
    ("code", """zero_grad = True
dx = gv.doctor(step, model, opt)
print(dx.summary())
assert dx.ok"""),
    ("md", """The doctor left no trace: the model's weights are the ones it started with, and `.grad` is as it was."""),
    ("code", """before = {n: p.detach().clone() for n, p in model.named_parameters()}
gv.doctor(step, model, opt)
print("unchanged:", all(torch.equal(p, before[n]) for n, p in model.named_parameters()))"""),
    ("md", """## Why does my adapter get no gradient? `gv.why` and `prove()`

A LoRA fine-tune: a frozen embedding, a frozen base layer, a trainable adapter (`lora_A`, `lora_B`), and a
hand-written activation checkpoint around the block to save memory. `checkpoint(..., use_reentrant=True)`
runs the block under `no_grad` and relies on its *inputs* requiring grad to make a backward node; the frozen
embedding's output does not, so PyTorch makes none, warns once, and the adapter silently learns nothing."""),
    ("code", """from torch.utils.checkpoint import checkpoint

class LoraBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Linear(16, 16).requires_grad_(False)     # frozen base weight
        self.lora_A = nn.Linear(16, 4, bias=False)
        self.lora_B = nn.Linear(4, 16, bias=False)
        nn.init.normal_(self.lora_B.weight, std=0.02)
    def forward(self, h):
        return self.base(h) + self.lora_B(self.lora_A(h))

class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 16).requires_grad_(False)  # frozen embedding
        self.block, self.head = LoraBlock(), nn.Linear(16, 1)
        self.use_reentrant = True
    def forward(self, ids):
        h = self.embed(ids)
        h = checkpoint(self.block, h, use_reentrant=self.use_reentrant)  # saves memory, cuts the adapter
        return self.head(h).mean()

torch.manual_seed(0)
lm, ids = TinyLM(), torch.randint(0, 100, (4, 12))
lm_opt = torch.optim.AdamW([p for p in lm.parameters() if p.requires_grad], lr=1e-3)

def lm_step():
    lm_opt.zero_grad()
    lm(ids).backward()
    lm_opt.step()

dx = gv.doctor(lm_step, lm, lm_opt)
print(dx.summary())"""),
    ("md", """`gv.why` answers for one parameter: what was measured (`status`: its `.grad` is `None`), the first
cause on its way to the loss with the evidence (the checkpoint call's line, the module, what PyTorch did),
and the fix. It reads the step the doctor observed; `gv.why(graph, name)` does the same for a `gv.trace`
graph, and the graph's details panel shows the same answer under "Why?"."""),
    ("code", """dx.why("block.lora_A.weight")"""),
    ("md", """`prove()` re-runs the forward and backward with the fix applied (here: the block run without the
reentrant checkpoint, which is what `use_reentrant=False` computes), inside the sandbox, and measures the
gradient. The model is not changed: its weights and `.grad` are the same afterwards."""),
    ("code", """w = gv.why(lm, "block.lora_A.weight", fn=lambda: lm(ids))
proof = w.prove()
print(proof)
assert proof.proven and lm.block.lora_A.weight.grad is None"""),
    ("md", """Now fix it for real (`use_reentrant=False`; or make the block's input require grad, as
`model.enable_input_require_grads()` does for Hugging Face models) and ask the doctor again."""),
    ("code", """lm.use_reentrant = False
dx = gv.doctor(lm_step, lm, lm_opt)
print(dx.summary())
assert dx.ok"""),
    ("md", """Not every zero is a bug. A fresh LoRA starts with `B = 0`, so `A`'s gradient is exactly zero until
`B` moves: `gv.why` explains it as expected instead of flagging it."""),
    ("code", """nn.init.zeros_(lm.block.lora_B.weight)
gv.why(lm, "block.lora_A.weight", fn=lambda: lm(ids))"""),
]

DISTRIBUTED = [
    ("md", """# Distributed training: the monitor on a 2-rank FSDP2 run

`examples/distributed_monitor.py` trains a tiny GPT-2 with LoRA adapters under FSDP2 (`fully_shard`, two
ranks, gloo on CPU) and records a `GradientMonitor`. Parameters and gradients are sharded `DTensor`s: each
rank computes the full gradients' per-layer norms from its own shards plus one all-reduce per recorded step
(nothing is all-gathered), and rank 0 also gathers every rank's own shard statistics. Rank 0 saves the
monitor; this notebook loads it and charts it. One adapter is cut (`--cut`, scale 0: a dead adapter) so
there is something to find.

The same run from a shell: `torchrun --nproc_per_node=2 examples/distributed_monitor.py --out monitor.pt`."""),
    ("code", """import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
import gradviz_nb as gv

repo = Path.cwd().parent                      # this notebook runs from notebooks/
out = Path(tempfile.mkdtemp()) / "monitor.pt"
with socket.socket() as s:                    # a free port for the ranks to meet on
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
       str(repo / "examples" / "distributed_monitor.py"), "--out", str(out), "--cut", "blocks.1.attn.c_attn"]
env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(repo))
run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
print(run.stdout)
assert run.returncode == 0, run.stderr[-3000:]"""),
    ("md", """Load what rank 0 saved (no torchrun, no process group needed) and chart it: the heatmap is layers x
steps, the lines are per-layer norms. `blocks.1.attn.c_attn` stays at zero."""),
    ("code", """mon = gv.GradientMonitor.load(out)
mon.chart()"""),
    ("code", """for step, flag in mon.flags():
    print(f"step {step} [{flag.kind}] {flag.target}: {flag.reason}")"""),
    ("md", """Per-rank statistics: under FSDP2 each rank holds a shard of every gradient, so `per_rank()` gives
each rank's own shard norms; the shards' squares add up to the full gradient's norm in `history()`."""),
    ("code", """per_rank, full = mon.per_rank(), mon.history()   # (records, ranks, layers), (records, layers)
print("per-rank shape:", tuple(per_rank.shape))
for layer, name in enumerate(mon.layers):
    shards = per_rank[-1, :, layer]
    print(f"{name:24s} rank 0 {shards[0]:.4f}  rank 1 {shards[1]:.4f}  "
          f"sqrt(sum of squares) {shards.square().sum().sqrt():.4f}  full {full[-1, layer]:.4f}")"""),
    ("md", """Under DDP (`DistributedDataParallel`) the same monitor also checks what DDP guarantees, on rank 0:

* `replica-mismatch`: a rank whose gradients differ from rank 0's after DDP's all-reduce (backward under
  `no_sync()` before an optimizer step, or gradients changed on one rank), naming the rank and both norms;
* `unused-on-rank`: parameters backward reached on some ranks but not others (a branch one rank skipped),
  the cause of DDP's "Expected to have finished reduction in the prior iteration" error.

On the graph, FSDP's post-backward hooks and DDP's sink are labelled as such, with a note saying what they
do; see "Distributed training: FSDP2 and DDP" in docs/guides/integrations.md."""),
]

CHECKPOINTING = [
    ("md", """# Checkpointing: memory against recompute, before you change a line

Activation checkpointing (`torch.utils.checkpoint.checkpoint`) drops what a block saves for backward and
re-runs the block during backward instead. Which blocks, and in which mode, is a trade: memory saved against
compute paid, and, with `use_reentrant=True`, a way to lose gradients silently. This notebook answers it from
**one trace without checkpointing**, then checks the answer against PyTorch by re-running with the
checkpoints applied for real."""),
    ("code", """import warnings

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss

torch.manual_seed(0)
cfg = GPT2Config(n_layer=6, n_head=4, d_model=32, vocab=128, block_size=32)
model = GPT2(cfg)
w = gv.GraphWidget.from_fn(lambda: gpt2_loss(model, batch=2, seq=32), model=model)
blocks = [c["id"] for c in w.graph.calls if c["type"] == "Block"]
blocks"""),
    ("md", """## Every other block, by clicking

On the page, the **⟲ Checkpoint** button turns on checkpoint mode: a click on a module box (or a shift-click in
any mode) cycles it non-reentrant → reentrant → off. Each box then shows `ckpt: <before> → <after>`, and the
bar above the graph the total, the share of the forward that backward re-runs, and any leaf that would lose its
gradient. The page answers by itself, with no kernel. The marks are the `checkpoints` trait, so setting it from
Python is the same as clicking:"""),
    ("code", """w.checkpoints = {b: "non_reentrant" for b in blocks[::2]}   # what three clicks do
w"""),
    ("code", """plan = w.checkpoint_what_if()   # Python's answer to the same marks (the page computes the same)
print(plan.summary())
for b in blocks[:2]:
    print(f"{b}: {plan.per_call_before[b]:,} B -> {plan.per_call_after[b]:,} B")"""),
    ("md", """**Checked against PyTorch.** `verify_checkpoint()` re-runs the forward and backward with
`torch.utils.checkpoint.checkpoint` around exactly those blocks (in the sandbox: the model's `forward` and
state are put back), measures the bytes saved for backward with saved-tensor hooks, reads which parameters
get `.grad`, and counts the recomputed ops on a trace of that run. The page's **Verify (re-run)** button does
the same and shows the result in a banner."""),
    ("code", """result = w.verify_checkpoint()
print("agree:", result["agree"])
for line in result["checked"]:
    print(" -", line)"""),
    ("md", """## The reentrant trap: LoRA adapters behind a frozen embedding

A common fine-tuning setup: the base model frozen (embeddings included), LoRA adapters inside each block,
and a hand-written reentrant checkpoint per block in the training forward:"""),
    ("code", """torch.manual_seed(0)
lora = add_lora(GPT2(cfg), targets=("c_attn",))   # every base weight frozen, adapters trainable

def forward_checkpointed(model, idx, targets):
    \"\"\"The training forward as written: a reentrant checkpoint around each block.\"\"\"
    pos = torch.arange(idx.shape[1])
    h = model.drop(model.wte(idx) + model.wpe(pos))
    for block in model.blocks:
        h = checkpoint(block, h, use_reentrant=True)
    logits = model.lm_head(model.ln_f(h))
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))"""),
    ("md", """Before training, ask the what-if: trace the plain model once and mark the blocks the code
checkpoints as reentrant."""),
    ("code", """wl = gv.GraphWidget.from_fn(lambda: gpt2_loss(lora, batch=2, seq=32), model=lora)
wl.checkpoints = {b: "reentrant" for b in blocks}
trap = wl.checkpoint_what_if()
print(f"{len(trap.lost)} adapters would lose .grad, cut by {trap.cut[0]} ... {trap.cut[-1]}")
print(trap.lost[:4])
wl"""),
    ("md", """The embedding is frozen, so the first block's input does not require grad: a reentrant
checkpoint then returns an output with no `grad_fn`, and everything inside (and, through it, every later
block's input) is cut off. PyTorch agrees, both in the re-run and in the hand-written forward itself:"""),
    ("code", """with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # PyTorch warns "None of the inputs have requires_grad=True"
    checked = wl.verify_checkpoint()
    idx = torch.randint(0, cfg.vocab, (2, 32), generator=torch.Generator().manual_seed(1))
    loss = forward_checkpointed(lora, idx, idx)
print("re-run agrees:", checked["agree"], "| adapters without .grad:", len(checked["actual_lost"]))
print("the hand-written forward's loss requires grad:", loss.requires_grad)"""),
    ("md", """**Fix 1: non-reentrant checkpoints** (`use_reentrant=False`) keep the graph through the block
whatever its inputs; the what-if says so, and the re-run confirms it:"""),
    ("code", """wl.checkpoints = {b: "non_reentrant" for b in blocks}
fixed = wl.checkpoint_what_if()
checked = wl.verify_checkpoint()
print("lost:", fixed.lost, "| PyTorch:", checked["actual_lost"])
gap = checked["measured_bytes"] - checked["predicted_bytes"]
print(f"saved bytes: {checked['predicted_bytes']:,} predicted, {checked['measured_bytes']:,} measured"
      f" ({gap:,} B apart)")"""),
    ("md", """The bytes differ by one tensor the graph cannot show: block 0's input comes from the frozen
embedding, needs no grad, and no op of the graph saved it (its `ln_1` is frozen too), yet a non-reentrant
checkpoint keeps it (2 × 32 × 32 float32 = 8,192 B). The re-run measures it; the prediction says what it
could see. Which adapters get `.grad` agrees exactly."""),
    ("md", """**Fix 2: make the block input require grad** (what `model.enable_input_require_grads()` does in
Hugging Face transformers: a forward hook on the input embedding). The reentrant checkpoints then keep their
adapters:"""),
    ("code", """hook = lora.wte.register_forward_hook(lambda module, args, out: out.requires_grad_(True))
wf = gv.GraphWidget.from_fn(lambda: gpt2_loss(lora, batch=2, seq=32), model=lora)
wf.checkpoints = {b: "reentrant" for b in blocks}
print("lost:", wf.checkpoint_what_if().lost, "| verified:", wf.verify_checkpoint()["agree"])
loss = forward_checkpointed(lora, idx, idx)
loss.backward()
print("adapters with .grad:", sum(p.grad is not None for n, p in lora.named_parameters() if "lora_" in n))
hook.remove()"""),
]

if __name__ == "__main__":
    write("01_tour.ipynb", TOUR)
    write("02_what_if.ipynb", WHAT_IF)
    write("03_backprop_step_by_step.ipynb", STEP_BY_STEP)
    write("05_share_and_compare.ipynb", SHARE_AND_COMPARE)
    write("04_gradient_flow_and_adapters.ipynb", GRADIENT_FLOW)
    write("06_big_models.ipynb", BIG_MODELS)
    write("07_doctor.ipynb", DOCTOR)
    write("08_distributed.ipynb", DISTRIBUTED)
    write("09_checkpointing.ipynb", CHECKPOINTING)

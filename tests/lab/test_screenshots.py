"""The screenshot suite: the notebooks run top to bottom in a real JupyterLab,
every graph widget and Bokeh output photographed in the light and the dark theme at 1000 and 1920 px wide,
into build/screenshots/<notebook>_<cell>_<theme>_<width>.png, with automatic checks measured in the page
(tests/lab/canvas_checks.py): labels inside their boxes, edges clear of boxes they do not connect, the loss
and readable text in the first view, Bokeh figures using the cell's width, dark-theme text contrast, and an
amber banner for a partial verification.

Runtime, measured on the loaded 2-core machine: every notebook (01-07, each in a fresh page) took 633 s, over
the ~6 minute budget. So the default is a representative subset (SUBSET: the tour with its MLP graphs and the
124M GPT-2, the what-if/verify widgets, the stepper, the Dashboard and flow/monitor charts, the diff and memory
views, the doctor), all run in ONE JupyterLab page: 199-325 s depending on the machine's load. Left out:
06_big_models (the same canvas as the tour's GPT-2; lazy loading and folding have page tests) and
08_distributed (a torchrun job whose only output is a monitor chart, as in 04). GRADVIZ_SCREENSHOTS=all adds 06.
The partial verification no notebook shows is three extra cells appended to the suite's copy of 02_what_if.

A check that fails on today's canvas carries `xfail(strict=True, reason="canvas check: <measured>")`: the
suite stays green, and turns red the moment the canvas is fixed without removing the mark.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from . import canvas_checks as cc
from .jupyterlab import ConsoleLog, JupyterLabServer, LabNotebook

pytestmark = [pytest.mark.browser, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "build" / "screenshots"
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
WIDTHS = (1000, 1920)
SHOT_HEIGHT = 2000  # an element screenshot clips to the viewport: tall enough for a Dashboard cell

ALL_NOTEBOOKS = [
    "01_tour",
    "02_what_if",
    "03_backprop_step_by_step",
    "04_gradient_flow_and_adapters",
    "05_share_and_compare",
    "06_big_models",
    "07_doctor",
    "09_checkpointing",
]
# All of the above took 633 s here (2-core machine shared with other test runs), over the ~6 minute budget.
# The default is this subset, one notebook per kind of widget: the tour (MLP graphs and GPT-2 124M, the big
# graph whose edges are checked), what-if + verify, the stepper, the Dashboard and the flow/monitor charts,
# the diff and memory views, the doctor. Left out: 06_big_models (its 48- and 232-block widgets are the same
# canvas as the tour's GPT-2; lazy loading and folding have page tests) and 08_distributed (a torchrun run
# whose one output is a monitor chart, as in 04). 09_checkpointing is in: its reentrant trap must open on a
# lost adapter. GRADVIZ_SCREENSHOTS=all runs 06 too.
SUBSET = [n for n in ALL_NOTEBOOKS if n != "06_big_models"]
NOTEBOOKS = ALL_NOTEBOOKS if os.environ.get("GRADVIZ_SCREENSHOTS") == "all" else SUBSET

# A cell no notebook has: a partial verification (one detach replayed, one inside scaled_dot_product_attention
# that cannot be), then the same widget with the replayable detach only (complete: green).
VERIFY_CELLS = [
    """\
import torch
from torch import nn
import gradviz_nb as gv
class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.bias = nn.Parameter(torch.zeros(4, 4))
    def forward(self, x):
        return nn.functional.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x), attn_mask=self.bias)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), Attn())
x = torch.randn(2, 4, 3)
def widget(both):
    w = gv.GraphWidget.from_fn(lambda: model(x).pow(2).mean(), model=model, height=360)
    g = w.graph.nx
    inside = next(n for n, d in g.nodes(data=True) if d["op"] == "AddBackward0" and d["call"] == "2")
    tanh = next(n for n, d in g.nodes(data=True) if d["op"] == "TanhBackward0")
    w.toggles = {"detach": [f"{tanh}:0", f"{inside}:0"] if both else [f"{tanh}:0"], "freeze": []}
    r = w.verify()
    print("COMPLETE", r["complete"], "AGREE", r["agree"])
    return w""",
    "partial = widget(both=True)\npartial",
    "full = widget(both=False)\nfull",
]
VERIFY_IN = "02_what_if"
EXTRA_CELLS = {VERIFY_IN: VERIFY_CELLS}  # appended to the copy the suite runs, not to the notebook

# The GPT-2 whose edges are checked: the code cell of notebook 01 holding this text (124M, 12 blocks).
EDGE_CELL = ("01_tour", "gpt2_view = gv.GraphWidget")
OPEN_BLOCK = "blocks.3"
# The cell of notebook 01 that opens boxes of the GPT-2 above from Python, and the deepest box it opens.
OPENED_CELL = ("01_tour", "gpt2_view.expanded = ", "c:blocks.0.attn")
# What each notebook's views are about (canvas_checks.SUBJECT_SEL): checked in the first view.
SUBJECTS = {"02_what_if": ("whatif", "cut"),  # cell 12 opens on the detach that cuts blocks.1 off
            "03_backprop_step_by_step": ("stepper",), "05_share_and_compare": ("diff",),
            "04_gradient_flow_and_adapters": ("cut",),  # the Dashboard opens on the detach that kills h.1's adapter
            "07_doctor": ("doctor", "stepper"),
            "09_checkpointing": ("whatif",)}  # the reentrant trap's lost adapters (drawn as what-if lost leaves)
# Live resizes on the what-if, the stepper, the Dashboard and the doctor: each graph's subject (or the graph)
# stays on the canvas; pictures at 1400 px here, at 1000 / 1920 in the theme loop after them.
RESIZE_NOTEBOOKS = ("02_what_if", "03_backprop_step_by_step", "04_gradient_flow_and_adapters", "07_doctor")
RESIZES = (1400, 1000, 1400, 1920)

# Outputs that hold a Bokeh figure (Bokeh renders its own custom elements, in shadow DOM).
BOKEH_SEL = ".bk-Figure, .bk-Row, .bk-Column, .bk-GridPlot"
CLOSED_COMM = "pageerror: Cannot send"
STACKS: list[str] = []  # page errors' stacks, to say where a "Cannot send" came from
IDLE_JS = "async (root) => { await root.__gradviz.idle(); return root.dataset.layout; }"


@dataclass
class Shot:
    """One output of one cell: what was measured and where its pictures went."""

    notebook: str
    cell: int
    index: int  # the output's position in the cell (a cell can show several)
    kind: str  # "graph", "bokeh" or "dashboard" (a graph and charts in one output)
    first: dict[str, Any] = field(default_factory=dict)  # first view: zoom, loss box, font px
    labels: dict[str, Any] = field(default_factory=dict)
    contrast: dict[str, dict[str, Any]] = field(default_factory=dict)  # theme -> result
    bokeh: dict[int, dict[str, Any]] = field(default_factory=dict)  # width -> result
    banner: dict[str, Any] = field(default_factory=dict)  # theme -> result
    subject: dict[str, Any] = field(default_factory=dict)  # first view: the subject's and the graph's boxes
    resized: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (width, subject view) per resize
    files: list[Path] = field(default_factory=list)
    suffix: str = ""  # "-1", "-2" when the cell shows several widgets

    @property
    def name(self) -> str:
        return f"{self.notebook}_{self.cell}{self.suffix}"


@dataclass
class Run:
    notebook: str
    shots: list[Shot] = field(default_factory=list)
    edges: dict[str, dict[str, Any]] = field(default_factory=dict)  # "first view" / "blocks.3 open"
    seconds: dict[str, float] = field(default_factory=dict)
    console: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)  # widget outputs that never showed a graph or figure
    closed_comm: list[str] = field(default_factory=list)  # "Cannot send" page errors, with the stack's top
    printed: dict[int, str] = field(default_factory=dict)
    opened: dict[str, Any] = field(default_factory=dict)  # the view after boxes were opened from Python


def _set_theme(page: Any, nb: LabNotebook, theme: str) -> None:
    """JupyterLab's own theme command (what Settings > Theme runs), then wait for the page and widgets."""
    light = "true" if theme == "light" else "false"
    if page.evaluate("() => document.body.dataset.jpThemeLight") != light:
        page.evaluate("(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", THEMES[theme])
        nb.poll(lambda: page.evaluate("() => document.body.dataset.jpThemeLight") == light,
                timeout=30, what=f"JupyterLab {theme} theme")
    # every canvas followed (its theme watcher sets data-theme), then a repaint
    nb.poll(lambda: page.evaluate("(t) => [...document.querySelectorAll('.gradviz-root')].every((r) => "
                                  "r.dataset.theme === t)", theme), timeout=20, what=f"canvases {theme}")
    page.wait_for_timeout(700)


# The mime types of a cell's outputs, from the notebook model (the DOM of a widget output fills in later).
OUTPUT_MIMES_JS = """(i) => {
  const outs = window.jupyterapp.shell.currentWidget.content.widgets[i].model.outputs;
  return Array.from({ length: outs.length }, (_, k) => Object.keys(outs.get(k).data));
}"""
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _outputs(nb: LabNotebook, cell: int, missed: list[str]) -> list[tuple[int, str]]:
    """(output index, kind) for every output of the cell that holds a graph widget or a Bokeh figure. A widget
    output renders asynchronously after the prompt shows: wait for its graph or figure to be in the page (one
    that never shows either is added to `missed`)."""
    outs = nb.cell(cell).locator(".jp-OutputArea-output")
    sel = f".gradviz-root, {BOKEH_SEL}"
    for k, mimes in enumerate(nb.page.evaluate(OUTPUT_MIMES_JS, cell)):
        if WIDGET_MIME in mimes:
            try:
                nb.poll(lambda k=k: outs.nth(k).locator(sel).count() > 0, timeout=30, what=f"cell {cell} widget {k}")
            except TimeoutError:
                missed.append(f"cell {cell} output {k}")
    found = []
    for k in range(outs.count()):
        o = outs.nth(k)
        graph = o.locator(".gradviz-root").count() > 0
        bokeh = o.locator(BOKEH_SEL).count() > 0
        if graph or bokeh:
            found.append((k, "dashboard" if graph and bokeh else "graph" if graph else "bokeh"))
    return found


def _run_cell(nb: LabNotebook, i: int) -> str:
    """`nb.run_cell`, but a cell that prints an error on purpose (the tour's "Clear errors" section prints
    a GradvizError it caught) is fine: only a traceback fails."""
    try:
        return nb.run_cell(i, timeout=300)
    except AssertionError as e:
        if "Traceback (most recent call last)" in str(e):
            raise
        return nb.output_text(i)


# Open a notebook inside the JupyterLab already loaded in the page (no page reload: about 8 s saved per
# notebook on the loaded 2-core machine), after saving and disposing the one before (dispose, not close:
# closing a modified notebook asks "save?").
OPEN_IN_APP_JS = """async (path) => {
  const app = window.jupyterapp;
  for (const w of [...app.shell.widgets('main')]) {
    if (w.context) await w.context.save();
    w.dispose();
  }
  await app.commands.execute('docmanager:open', { path, factory: 'Notebook' });
}"""


def _open(server: JupyterLabServer, page: Any, path: str) -> LabNotebook:
    nb = LabNotebook(server, page, path)
    if not page.evaluate("() => !!window.jupyterapp"):
        return nb.open()
    server.shutdown_sessions()
    page.evaluate(OPEN_IN_APP_JS, path)
    page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    nb.wait_kernel_ready(60.0)
    return nb


def _run_notebook(server: JupyterLabServer, page: Any, console: ConsoleLog, name: str) -> Run:
    run = Run(name)
    t0 = time.monotonic()
    src = REPO / "notebooks" / f"{name}.ipynb"
    data = json.loads(src.read_text())
    for extra in EXTRA_CELLS.get(name, []):
        data["cells"].append({"cell_type": "code", "id": f"screenshot-extra-{len(data['cells'])}", "metadata": {},
                              "source": extra, "outputs": [], "execution_count": None})
    (server.root / f"{name}.ipynb").write_text(json.dumps(data, indent=1))
    code = [(i, "".join(c["source"])) for i, c in enumerate(data["cells"]) if c["cell_type"] == "code"]
    errors_before = len(console.errors)
    page.set_viewport_size({"width": WIDTHS[0], "height": 1000})
    nb = _open(server, page, f"{name}.ipynb")
    _set_theme(page, nb, "light")
    run.seconds["open"] = time.monotonic() - t0
    try:
        shots: list[Shot] = []
        roots: list[Any] = []
        for i, source in code:
            tc = time.monotonic()
            run.printed[i] = _run_cell(nb, i)
            run.seconds[f"cell {i}"] = time.monotonic() - tc
            if name == OPENED_CELL[0] and OPENED_CELL[1] in source and roots:
                roots[-1].evaluate(IDLE_JS)
                nb.page.wait_for_timeout(300)
                run.opened = cc.subject_view(roots[-1], (), [OPENED_CELL[2]])
            outputs = _outputs(nb, i, run.missed)
            for n, (k, kind) in enumerate(outputs):
                shot = Shot(name, i, k, kind, suffix=f"-{n + 1}" if len(outputs) > 1 else "")
                out = nb.cell(i).locator(".jp-OutputArea-output").nth(k)
                if kind in ("graph", "dashboard"):
                    root = out.locator(".gradviz-root").first
                    root.locator(".gradviz-canvas canvas").first.wait_for()
                    root.evaluate(IDLE_JS)
                    shot.first = cc.first_view(root)
                    shot.subject = cc.subject_view(root, SUBJECTS.get(name, ()))
                    shot.labels = cc.label_overflow(root)
                    if name == EDGE_CELL[0] and EDGE_CELL[1] in source:
                        _edge_states(run, shot, root, out)
                        roots.append(root)
                else:
                    nb.poll(lambda out=out: out.evaluate(cc.BOKEH_WIDTHS_JS)["figures"], timeout=30,
                            what=f"Bokeh figures drawn in {name} cell {i}")
                shots.append(shot)
        run.seconds["run"] = time.monotonic() - t0 - run.seconds["open"]
        if name in RESIZE_NOTEBOOKS:
            tr = time.monotonic()
            _resize_sequence(nb, name, shots)
            run.seconds["resizes"] = time.monotonic() - tr
        # light 1000, light 1920, dark 1920, dark 1000: one resize fewer than two loops
        for theme, widths in (("light", WIDTHS), ("dark", WIDTHS[::-1])):
            _set_theme(page, nb, theme)
            for width in widths:
                page.set_viewport_size({"width": width, "height": SHOT_HEIGHT})
                page.wait_for_timeout(500)  # the resize settles into a repaint
                for shot in shots:
                    _photograph(nb, shot, theme, width)
        run.shots = shots
        run.seconds["shots"] = time.monotonic() - t0 - run.seconds["open"] - run.seconds["run"]
        run.seconds["total"] = time.monotonic() - t0
    finally:
        # The theme is a user setting of the server: leave it light for the next notebook and test (the page
        # may be what failed, so this must not raise over the real error).
        with contextlib.suppress(Exception):
            _set_theme(page, nb, "light")
        # A view of a closed notebook sending on a closed comm: kept apart (see the test that checks them)
        mine = console.errors[errors_before:]
        run.console = [e for e in mine if e != CLOSED_COMM]
        run.closed_comm = [e for e in mine if e == CLOSED_COMM]
        if run.closed_comm:
            stack = next((st for st in STACKS[::-1] if "Cannot send" in st), "")
            run.closed_comm.append("stack: " + " | ".join(ln.strip() for ln in stack.splitlines()[:16]))
    return run


def _edge_states(run: Run, shot: Shot, root: Any, out: Any) -> None:
    """The GPT-2's edges at the first view, with blocks.3 opened (a click on the folded stack's member, as
    `expand` does), and closed again (collapse must re-route its neighbours); labels checked when open."""
    run.edges["first view"] = cc.edge_crossings(root)
    root.evaluate("async (root, id) => { await root.__gradviz.expand(id); await root.__gradviz.idle(); }", OPEN_BLOCK)
    run.edges[f"{OPEN_BLOCK} open"] = cc.edge_crossings(root)
    opened = cc.label_overflow(root)
    seen = {o["id"] for o in shot.labels["overflow"]}
    shot.labels = {"checked": shot.labels["checked"] + opened["checked"],
                   "overflow": shot.labels["overflow"] + [o for o in opened["overflow"] if o["id"] not in seen]}
    out.screenshot(path=str(SHOTS / f"{shot.name}_{OPEN_BLOCK}-open_light_{WIDTHS[0]}.png"))
    root.evaluate("async (root, id) => { await root.__gradviz.collapse(id); await root.__gradviz.idle(); }",
                  OPEN_BLOCK)
    run.edges[f"{OPEN_BLOCK} closed again"] = cc.edge_crossings(root)
    out.screenshot(path=str(SHOTS / f"{shot.name}_{OPEN_BLOCK}-closed_light_{WIDTHS[0]}.png"))


def _resize_sequence(nb: LabNotebook, name: str, shots: list[Shot]) -> None:
    """Resize the page through RESIZES (light theme); after each, every graph's subject view is measured, and
    photographed at the first 1400."""
    for k, width in enumerate(RESIZES):
        nb.page.set_viewport_size({"width": width, "height": SHOT_HEIGHT})
        nb.page.wait_for_timeout(500)  # the resize settles into a repaint
        for shot in shots:
            if shot.kind == "bokeh":
                continue
            out = nb.cell(shot.cell).locator(".jp-OutputArea-output").nth(shot.index)
            out.scroll_into_view_if_needed()
            root = out.locator(".gradviz-root").first
            root.evaluate(IDLE_JS)
            shot.resized.append((width, cc.subject_view(root, SUBJECTS.get(name, ()))))
            if k == 0:
                out.screenshot(path=str(SHOTS / f"{shot.name}_resized_light_{width}.png"))


def _photograph(nb: LabNotebook, shot: Shot, theme: str, width: int) -> None:
    out = nb.cell(shot.cell).locator(".jp-OutputArea-output").nth(shot.index)
    out.scroll_into_view_if_needed()
    if shot.kind != "bokeh":
        root = out.locator(".gradviz-root").first
        root.evaluate(IDLE_JS)
        if width == WIDTHS[-1]:
            shot.contrast[theme] = cc.text_contrast(root)
            if b := cc.banner(root):
                shot.banner[theme] = b
    if shot.kind != "graph" and width == WIDTHS[-1] and theme == "light":
        shot.bokeh[width] = cc.bokeh_widths(out)
    path = SHOTS / f"{shot.name}_{theme}_{width}.png"
    out.screenshot(path=str(path))
    shot.files.append(path)


@pytest.fixture(scope="module")
def runs(chromium: Any, jupyterlab: JupyterLabServer) -> Iterator[dict[str, Run]]:
    """Runs each notebook on first use, one after another in ONE JupyterLab page (one server for the session),
    kept for the module's tests."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = chromium.new_context(viewport={"width": WIDTHS[0], "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    console = ConsoleLog.for_frontend(jupyterlab.frontend)
    console.attach(page)
    page.on("pageerror", lambda e: STACKS.append(f"{e}\n{e.stack or ''}"))
    t0 = time.monotonic()

    class Lazy(dict):  # type: ignore[type-arg]
        failed: ClassVar[dict[str, str]] = {}  # one Lazy per module run

        def __missing__(self, key: str) -> Run:
            if key in self.failed:  # one broken notebook fails its tests once each, without re-running it
                raise RuntimeError(f"{key} failed earlier in this session: {self.failed[key]}")
            try:
                r = _run_notebook(jupyterlab, page, console, key)
            except Exception as e:
                self.failed[key] = f"{type(e).__name__}: {e}"[:2000]
                raise
            self[key] = r
            print(f"\n{key}: {len(r.shots)} outputs, " + ", ".join(f"{k} {v:.1f} s" for k, v in r.seconds.items()))
            _MEASURED[key] = _report(r)
            return r

    try:
        yield Lazy()
    finally:
        context.close()
        jupyterlab.shutdown_sessions()
        _MEASURED["total seconds"] = time.monotonic() - t0
        (SHOTS / "checks.json").write_text(json.dumps(_MEASURED, indent=1, default=str))
        print(f"\nscreenshot suite: {time.monotonic() - t0:.0f} s; screenshots and checks.json in {SHOTS}")


def _graphs(run: Run) -> list[Shot]:
    return [s for s in run.shots if s.kind != "bokeh"]


# ------------------------------------------------------------------------------------------------
# The suite itself: every output photographed 2 themes x 2 widths, and nothing on the console.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_screenshots_of_every_widget(runs: dict[str, Run], notebook: str) -> None:
    run = runs[notebook]
    assert run.shots, f"{notebook}: no graph widget or Bokeh output found"
    assert run.missed == [], f"{notebook}: widget outputs with no graph or Bokeh figure drawn: {run.missed}"
    for s in run.shots:
        assert len(s.files) == len(THEMES) * len(WIDTHS), f"{s.name}: {len(s.files)} screenshots"
        for f in s.files:
            assert f.exists() and f.stat().st_size > 2000, f"{f.name}: missing or empty"
    assert run.console == [], f"{notebook}: console errors {run.console}"


# ------------------------------------------------------------------------------------------------
# The checks, one test per check and notebook.
# ------------------------------------------------------------------------------------------------

_MEASURED: dict[str, Any] = {}


def _report(run: Run) -> dict[str, Any]:
    """What was measured, kept in build/screenshots/checks.json for a person (and the issue's notes)."""
    return {
        "seconds": run.seconds,
        "console": run.console,
        "missed": run.missed,
        "closed_comm": run.closed_comm,
        "edges": run.edges,
        "opened": run.opened,
        "outputs": [{"name": s.name, "kind": s.kind, "first": s.first, "labels": s.labels, "bokeh": s.bokeh,
                     "banner": s.banner, "subject": s.subject, "resized": s.resized,
                     "low_contrast": {t: [n for n in c["nodes"] if n["ratio"] < 4.5] for t, c in s.contrast.items()}}
                    for s in run.shots],
    }


def _fmt(items: list[Any], n: int = 6) -> str:
    return "; ".join(str(x) for x in items[:n]) + (f"; ... {len(items) - n} more" if len(items) > n else "")


def xfail(point: int, what: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"canvas check {point}: {what}")


def _nb(notebook: str, fails: dict[str, pytest.MarkDecorator]) -> Any:
    return pytest.param(notebook, marks=fails[notebook]) if notebook in fails else notebook


# Measured on today's canvas (every other node label fits; these are open boxes' headers, drawn above the box).
LABEL_FAILS: dict[str, pytest.MarkDecorator] = {
    # Empty since open boxes are laid out at least as wide as their header (the 3 measured overflows, e.g.
    # '▾ base_model.model.lm_head · Linear' 198 px over a 116 px box, now pass).
}


@pytest.mark.parametrize("notebook", [_nb(n, LABEL_FAILS) for n in NOTEBOOKS])
def test_labels_fit_their_boxes(runs: dict[str, Run], notebook: str) -> None:
    """Point 3: every visible node's label lines (measured with its own font) fit its box, 1 px allowed."""
    bad = []
    for s in _graphs(runs[notebook]):
        over = s.labels["overflow"]
        if over:
            bad.append(f"{s.name}: {len(over)} of {s.labels['checked']} labels overflow: " + _fmt(
                [f"{o['label']!r} text {o['textW']}x{o['textH']} in box {o['w']}x{o['h']}" for o in over], 4))
    assert not bad, "\n".join(bad)


EDGE_STATES = ("first view", f"{OPEN_BLOCK} open", f"{OPEN_BLOCK} closed again")
# "blocks.3 closed again" failed on the bundle of 13:14 (the tied wte.weight -> lm_head edge left straight through
# 12 closed boxes after the collapse) and passes since the lead's re-route on collapse: no mark.
EDGE_FAILS: dict[str, pytest.MarkDecorator] = {}


@pytest.mark.parametrize("state", [pytest.param(s, marks=EDGE_FAILS[s]) if s in EDGE_FAILS else s
                                   for s in EDGE_STATES])
def test_edges_do_not_cross_boxes(runs: dict[str, Run], state: str) -> None:
    """Point 7: on GPT-2 124M (12 blocks), no drawn edge crosses a node or box it does not connect to: at the
    first view, with blocks.3 opened, and after closing it again (collapse must re-route its neighbours)."""
    result = runs[EDGE_CELL[0]].edges[state]
    assert result["checked"] > 10, result
    crossing = result["crossing"]
    assert not crossing, (f"GPT-2, {state}: {len(crossing)} of {result['checked']} edges cross boxes: "
                          + _fmt([f"{c['edge']} crosses {c['crossed']}" for c in crossing], 8))


LOSS_FAILS: dict[str, pytest.MarkDecorator] = {}


def _subject_shown(view: dict[str, Any]) -> bool:
    return any(cc.on_canvas(b, view) for b in view["subject"])


@pytest.mark.parametrize("notebook", [_nb(n, LOSS_FAILS) for n in NOTEBOOKS])
def test_loss_in_first_view(runs: dict[str, Run], notebook: str) -> None:
    """Point 2: the loss node's box lies inside the canvas when the widget first draws, unless the view has a
    subject of its own (lost leaves, changes, findings) that is on the canvas and does not fit with the loss, or
    Python selected an element before it was photographed (the Dashboard's dash.select brings the canvas to
    the selected layer, a dead adapter's cut: that is the view's subject then, not the loss)."""
    bad = [f"{s.name}: loss {s.first['lossLabel']!r} at {s.first['loss']} outside canvas {s.first['w']}x{s.first['h']}"
           for s in _graphs(runs[notebook]) if s.first.get("lossLabel") is not None and not cc.loss_inside(s.first)
           and not (s.subject["subject"] and _subject_shown(s.subject)) and not s.first.get("selected")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("notebook", [n for n in NOTEBOOKS if n in SUBJECTS])
def test_subject_in_first_view(runs: dict[str, Run], notebook: str) -> None:
    """Framing: a view with lost leaves, changes, findings or a running node shows at least one of them first."""
    bad = [f"{s.name}: none of {len(s.subject['subject'])} subject elements on the {s.subject['w']}x{s.subject['h']} "
           f"canvas at zoom {s.subject['zoom']:.2f}: " + _fmt(s.subject["subject"], 3)
           for s in _graphs(runs[notebook]) if s.subject["subject"] and not _subject_shown(s.subject)]
    assert not bad, "\n".join(bad)


def test_boxes_opened_from_python_are_framed(runs: dict[str, Run]) -> None:
    """Framing: `gpt2_view.expanded = [...]` set from Python brings the deepest opened box's header on screen."""
    v = runs[OPENED_CELL[0]].opened
    assert v and v["subject"], f"{OPENED_CELL[2]} not drawn after the cell: {v}"
    b = v["subject"][0]
    assert -1 <= b["y1"] <= v["h"] - 30 and b["x2"] > 0 and b["x1"] < v["w"], (
        f"{OPENED_CELL[2]} at {b} on the {v['w']}x{v['h']} canvas (zoom {v['zoom']:.2f})")


@pytest.mark.parametrize("notebook", [n for n in NOTEBOOKS if n in RESIZE_NOTEBOOKS])
def test_resizes_keep_the_subject(runs: dict[str, Run], notebook: str) -> None:
    """Resize-proof: through 1400 -> 1000 -> 1400 -> 1920 px, every graph keeps 15% of itself on the canvas, and
    a subject shown before the resizes stays shown."""
    bad = []
    for s in _graphs(runs[notebook]):
        assert len(s.resized) == len(RESIZES), f"{s.name}: {len(s.resized)} resizes measured"
        for width, v in s.resized:
            if not cc.graph_shown(v):
                bad.append(f"{s.name} at {width}: graph {v['graph']} off the {v['w']}x{v['h']} canvas")
            elif s.subject["subject"] and _subject_shown(s.subject) and not _subject_shown(v):
                bad.append(f"{s.name} at {width}: subject off the {v['w']}x{v['h']} canvas: " + _fmt(v["subject"], 2))
    assert not bad, "\n".join(bad)


FONT_FAILS: dict[str, pytest.MarkDecorator] = {}


@pytest.mark.parametrize("notebook", [_nb(n, FONT_FAILS) for n in NOTEBOOKS])
def test_first_view_text_readable(runs: dict[str, Run], notebook: str) -> None:
    """Point 2: node text at least 11 px at the first view's zoom (font-size x zoom), or, at 80% or more (text
    8.8 px and up: the camera's WHOLE_ZOOM), the whole graph shown, or its whole width (nothing cut at the
    sides): an MLP that fit at 89% opened at 100% with its top cut off."""
    def whole(s: Shot) -> bool:
        if not s.subject or s.first["zoom"] < 0.8 - 1e-6:
            return False
        g, w = s.subject["graph"], s.subject["w"]
        return cc.on_canvas(g, s.subject) or (g["x1"] >= -1 and g["x2"] <= w + 1)

    bad = [f"{s.name}: smallest node text {s.first['minFontPx']:.1f} px at zoom {s.first['zoom']:.2f} "
           f"({s.first['smallest']})" for s in _graphs(runs[notebook])
           if s.first.get("minFontPx") is not None and s.first["minFontPx"] < 11 - 1e-6 and not whole(s)]
    assert not bad, "\n".join(bad)


BOKEH_NOTEBOOKS = ["04_gradient_flow_and_adapters"]
BOKEH_FAILS: dict[str, pytest.MarkDecorator] = {}


@pytest.mark.parametrize("notebook", [_nb(n, BOKEH_FAILS) for n in BOKEH_NOTEBOOKS])
def test_bokeh_uses_the_cell_width(runs: dict[str, Run], notebook: str) -> None:
    """Point 1: at 1920 px the widest Bokeh figure of each chart output (Dashboard, monitor, flow chart) takes
    at least 60% of the output's width."""
    charts = [s for s in runs[notebook].shots if s.kind != "graph"]
    assert charts, f"{notebook}: no Bokeh output"
    bad = []
    for s in charts:
        b = s.bokeh[WIDTHS[-1]]
        assert b["figures"], f"{s.name}: no Bokeh figure measured"
        widest = max(f["width"] for f in b["figures"])
        if widest < 0.6 * b["output"]:
            sizes = [f"{f['name']} {f['width']:.0f}" for f in b["figures"]]
            bad.append(f"{s.name}: widest figure {widest:.0f} of {b['output']:.0f} px ({widest / b['output']:.0%}): "
                       + _fmt(sizes))
    assert not bad, "\n".join(bad)


CONTRAST_FAILS: dict[str, pytest.MarkDecorator] = {
    # Empty since text colours are chosen for 4.5:1 on their fill (were: red on a dark box 2.46:1, ghosts
    # 3.7:1, white on heat-5 3.35:1).
}


@pytest.mark.parametrize("notebook", [_nb(n, CONTRAST_FAILS) for n in NOTEBOOKS])
def test_dark_theme_text_contrast(runs: dict[str, Run], notebook: str) -> None:
    """Point 5: in the dark theme every visible node's text has at least 4.5:1 contrast with its fill (WCAG AA),
    what-if's pruned nodes (faded on purpose, inactive) excepted."""
    bad = []
    for s in _graphs(runs[notebook]):
        c = s.contrast["dark"]
        low = [n for n in c["nodes"] if n["ratio"] < 4.5 and not n["inactive"]]
        if low:
            bad.append(f"{s.name} (canvas theme {c['theme']}): {len(low)} of {len(c['nodes'])} nodes under 4.5:1: "
                       + _fmt([f"{n['label']!r} {n['ratio']} ({n['color']} on {n['fill']})" for n in low], 4))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("theme", list(THEMES))
def test_partial_verification_banner_is_amber(runs: dict[str, Run], theme: str) -> None:
    """Point 4: a partial verification (one cut inside the attention cannot be replayed) shows an amber banner; the
    complete one stays green. Colours as the page paints them (translucent fills composited)."""
    run = runs[VERIFY_IN]
    last = max(run.printed)  # the extra cells come last: define, partial, full
    assert "COMPLETE False AGREE True" in run.printed[last - 1], run.printed[last - 1]
    assert "COMPLETE True AGREE True" in run.printed[last], run.printed[last]
    partial, full = (next(s for s in run.shots if s.cell == c) for c in (last - 1, last))
    p, f = partial.banner.get(theme), full.banner.get(theme)
    assert p is not None, f"{partial.name}: no verification banner shown"
    assert f is not None, f"{full.name}: no verification banner shown"
    hue = cc.hue_sat(p["background"])
    assert cc.is_amber(p["background"]) or (cc.is_amber(p["bar"]) and p["barWidth"] >= 3), (
        f"{partial.name} ({theme}): partial verification banner is not amber: background {p['background']} "
        f"(hue {hue[0]:.0f}, saturation {hue[1]:.2f}), bar {p['bar']} {p['barWidth']} px, class {p['cls']!r}")
    assert not cc.is_amber(f["background"]) and not (cc.is_amber(f["bar"]) and f["barWidth"] >= 3), (
        f"{full.name} ({theme}): a complete verification looks amber: {f}")
    assert p["contrast"] >= 4.5, f"{partial.name} ({theme}): banner text contrast {p['contrast']:.2f}"
    assert "Partly verified" in p["text"] and "Verified by re-running" in f["text"], (p["text"], f["text"])


# Which notebook's views outlive it: the one with Bokeh charts is closed, the next notebook switches theme.
COMM_AFTER = ("04_gradient_flow_and_adapters", "05_share_and_compare")
COMM_FAIL = xfail(5, "the Bokeh charts' theme follower (widgets/chart_theme.py _APPLY_JS: a MutationObserver on "
                     "body; it now stops when Bokeh's index has no connected view of its models, which is not "
                     "enough: the closed notebook's views still count) outlives its notebook: "
                     "after 04 (Dashboard, flow and monitor charts) "
                     "is closed, each theme switch in the next notebook sets Bokeh properties whose change "
                     "jupyter_bokeh sends on the closed comm: 25-26 'Cannot send' page errors in 05's run, 14 in "
                     "07's (stack: setv -> _push_changes -> jupyter_bokeh _change_event -> WidgetModel.send)")


@COMM_FAIL
def test_closed_notebooks_views_stay_silent(runs: dict[str, Run]) -> None:
    """A closed notebook's outputs must not react to a later theme switch (no send on a closed comm)."""
    for name in COMM_AFTER:
        runs[name]  # runs them in this order if no other test has
    bad = {name: r.closed_comm for name, r in runs.items() if r.closed_comm}
    assert not bad, f"views of closed notebooks still send: {bad}"

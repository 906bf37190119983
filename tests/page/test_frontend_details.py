"""Values and gradients in the details panel of a plain graph , on a real traced model's
payload: a small leaf's values with their statistics, a large leaf's first values and statistics, and each
leaf's ``.grad`` as it was when traced, all matching torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import SCREENSHOTS, MountedPage

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, add_lora, gpt2_loss
from gradviz_nb.export.html import exported_state
from gradviz_nb.widgets.page import graph as graph_payload
from gradviz_nb.widgets.page.values import NOT_SAVED, export_answers

pytestmark = pytest.mark.browser
browser = pagekit.browser

DARK = {"--jp-layout-color0": "#111111", "--jp-layout-color1": "#212121", "--jp-layout-color2": "#424242",
        "--jp-ui-font-color0": "rgba(255,255,255,1)", "--jp-ui-font-color1": "rgba(255,255,255,0.87)",
        "--jp-ui-font-color2": "rgba(255,255,255,0.54)",
        "--jp-brand-color1": "#42a5f5", "--jp-border-color1": "#616161"}
SET_THEME_JS = """(vars) => {
  for (const [k, v] of Object.entries(vars)) document.body.style.setProperty(k, v);
  document.body.style.background = vars['--jp-layout-color0'];
  document.body.dataset.jpThemeLight = 'false';
}"""
TITLE_IS_JS = "(t) => document.querySelector('[data-testid=gradviz-details-title]').textContent.startsWith(t)"
ROWS_JS = """() => [...document.querySelectorAll('[data-testid=gradviz-details] dt')]
  .map((dt) => [dt.textContent, dt.nextElementSibling.textContent])"""
LOADED_JS = """() => { const dd = [...document.querySelectorAll('[data-testid=gradviz-details] dd')];
  return dd.length > 0 && !dd.some((d) => d.textContent === 'loading…'); }"""
SENT_JS = "(node) => gv.model.sent.filter((m) => m.kind === 'values' && m.body.node === node).length"


def number(text: str) -> float:
    return float(text.split(" ")[0])


def test_details_show_values_stats_and_grads_of_a_real_model(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    loss.backward()
    g = gv.trace(loss, model=model, capture=cap)
    params = dict(model.named_parameters())
    payload = graph_payload(g)
    assert not any("stats" in n or "grad" in n for n in payload["nodes"])  # nothing computed ahead
    state = {"graph_data": payload, "expanded": [], "height": 560, "selected": g.find("wte.weight")}
    p = MountedPage(browser, tmp_path, state, viewport=(1040, 720), values=export_answers(g))
    details = p.page.locator("[data-testid=gradviz-details]")
    assert details.is_visible()
    p.page.wait_for_function(LOADED_JS, timeout=30000)
    assert p.js(SENT_JS, g.find("wte.weight")) == 1

    # A large leaf (101 x 32 = 3,232 elements): its first values, then statistics, then its .grad's.
    rows = p.js(ROWS_JS)
    terms = [k for k, _ in rows]
    at = terms.index("value")
    wte = params["wte.weight"].detach()
    value = rows[at][1]
    assert value.endswith("…] 3,232 values") and value.startswith(f"[{wte.flatten()[0].item():.3g}"[:5])
    assert terms[at + 1: at + 4] == ["  norm", "  mean ± std", "  min … max"]
    assert number(rows[at + 1][1]) == pytest.approx(wte.norm().item(), rel=1e-3)
    grad_at = terms.index(".grad")
    assert params["wte.weight"].grad is not None
    assert number(rows[grad_at + 1][1]) == pytest.approx(params["wte.weight"].grad.norm().item(), rel=1e-3)
    assert rows[grad_at][1].endswith("3,232 values")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "details-values-light.png"))

    # A small leaf (ln_f.bias, 32 values): every value is known; the page's statistics equal torch's.
    p.js("(id) => gv.model.set('selected', id)", g.find("ln_f.bias"))
    p.page.wait_for_function(TITLE_IS_JS, arg="ln_f.bias", timeout=30000)  # Python's selection may open a box first
    p.page.wait_for_function(LOADED_JS, timeout=30000)
    rows = dict(p.js(ROWS_JS))
    bias = params["ln_f.bias"]
    assert rows["value"].endswith("…] 32 values")
    assert bias.grad is not None
    grad_rows = p.js(ROWS_JS)
    gi = [k for k, _ in grad_rows].index(".grad")
    lo, hi = grad_rows[gi + 3][1].split(" … ")
    assert float(lo) == pytest.approx(bias.grad.min().item(), rel=1e-3, abs=1e-6)
    assert float(hi) == pytest.approx(bias.grad.max().item(), rel=1e-3, abs=1e-6)
    _, std = grad_rows[gi + 2][1].split(" ± ")
    assert float(std) == pytest.approx(bias.grad.std().item(), rel=1e-3)

    # An op: nothing was captured for it, so no value rows (nothing is made up).
    op = next(n for n, d in g.nx.nodes(data=True) if d["kind"] == "op" and d["value"] is None)
    p.js("(id) => gv.model.set('selected', id)", op)
    p.page.wait_for_function(TITLE_IS_JS + " === false", arg="ln_f.bias", timeout=30000)
    assert not any(k in ("value", ".grad") for k, _ in p.js(ROWS_JS))

    # Dark theme: the same panel, readable.
    p.js("(id) => gv.model.set('selected', id)", g.find("wte.weight"))
    p.page.wait_for_function(TITLE_IS_JS, arg="wte.weight", timeout=30000)
    assert p.js(SENT_JS, g.find("wte.weight")) == 1  # answered once, then from the page's cache
    assert ".grad" in dict(p.js(ROWS_JS))
    p.js(SET_THEME_JS, DARK)
    p.page.wait_for_function("() => document.querySelector('.gradviz-root').dataset.theme === 'dark'", timeout=5000)
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / "details-values-dark.png"))
    assert p.errors == []


def test_a_leaf_traced_before_backward_says_its_grad_was_none(browser: Any, tmp_path: Path) -> None:
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    g = gv.trace((w * w).sum(), names={"w": w})
    state = {"graph_data": graph_payload(g), "expanded": [], "height": 400, "selected": g.find("w")}
    p = MountedPage(browser, tmp_path, state, viewport=(1040, 500), values=export_answers(g))
    p.page.wait_for_function(LOADED_JS, timeout=30000)
    rows = p.js(ROWS_JS)
    assert ["value", "[1, 2, 3]"] in rows and ["  norm", "3.742"] in rows and ["  mean ± std", "2 ± 1"] in rows
    assert [".grad", "None"] in rows
    assert p.errors == []


def test_a_leaf_without_a_saved_answer_says_so(browser: Any, tmp_path: Path) -> None:
    big = torch.randn(5000, requires_grad=True)
    g = gv.trace((big * 2).sum(), names={"big": big})
    state = {"graph_data": graph_payload(g), "expanded": [], "height": 400, "selected": g.find("big")}
    p = MountedPage(browser, tmp_path, state, viewport=(1040, 500), values=export_answers(g, largest=100))
    p.page.wait_for_function(LOADED_JS, timeout=30000)
    assert ["value", NOT_SAVED] in p.js(ROWS_JS)
    assert p.errors == []


# Per text part of an element (the text between <wbr>s): how many lines it is drawn on, and its text.
PART_LINES_JS = """(sel) => {
  const el = document.querySelector(sel);
  const out = [];
  for (const node of el.childNodes) {
    if (node.nodeType !== 3 || !node.textContent) continue;
    const r = document.createRange();
    r.selectNodeContents(node);
    const tops = new Set([...r.getClientRects()].map((q) => Math.round(q.top)));
    out.push([node.textContent, tops.size]);
  }
  return { parts: out, height: el.getBoundingClientRect().height,
           line: parseFloat(getComputedStyle(el).lineHeight) || 16 };
}"""
LONG = "encoder.layers.11.self_attention.query_key_value.lora_A.default.weight"


@pytest.mark.parametrize("width", [1000, 1400, 1920])
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_long_names_break_only_after_dots_and_underscores(browser: Any, tmp_path: Path, theme: str, width: int) -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config.small_test())
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    g = gv.trace(loss, model=model, capture=cap)
    payload = graph_payload(g)
    leaf = g.find("blocks.0.mlp.c_fc.weight")
    node = next(n for n in payload["nodes"] if n["id"] == leaf)
    node["names"] = [LONG]  # a name longer than the panel is wide
    state = {"graph_data": payload, "expanded": [], "height": 560, "selected": leaf}
    p = MountedPage(browser, tmp_path, state, viewport=(width + 40, 720), width=width)
    if theme == "dark":
        p.js(SET_THEME_JS, DARK)
    p.page.wait_for_function(TITLE_IS_JS, arg=LONG, timeout=10000)
    title = p.js(PART_LINES_JS, "[data-testid=gradviz-details-title]")
    parts = [t for t, _ in title["parts"]]
    assert "".join(parts) == LONG and parts[:3] == ["encoder.", "layers.", "11."], parts
    assert title["height"] > 1.5 * title["line"], title  # it wraps ...
    assert all(lines == 1 for _, lines in title["parts"]), title  # ... but never inside a part
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"details-names-{theme}-{width}.png"
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(shot))
    assert p.errors == []


# JupyterLab's own rules for description lists in an output area (its jlab_core CSS), added after ours.
LAB_OUTPUT_CSS_JS = """() => {
  document.body.classList.add('jp-OutputArea-output');
  const s = document.createElement('style');
  s.textContent = `.jp-OutputArea-output dl, .jp-OutputArea-output dt, .jp-OutputArea-output dd { display: block; }
    .jp-OutputArea-output dl { width: 100%; overflow: hidden; padding: 0; margin: 0; }
    .jp-OutputArea-output dt { font-weight: bold; float: left; width: 20%; padding: 0; margin: 0; }
    .jp-OutputArea-output dd { float: left; width: 80%; padding: 0; margin: 0; }`;
  document.head.appendChild(s);
}"""
COLUMNS_JS = """() => {
  const dl = document.querySelector('.gradviz-details dl');
  const panel = dl.getBoundingClientRect().width;
  const rows = [...dl.querySelectorAll('dt')].map((dt) => {
    const dd = dt.nextElementSibling;
    const range = document.createRange();
    range.selectNodeContents(dt);
    const box = { dt: dt.getBoundingClientRect().width, dd: dd.getBoundingClientRect().width };
    dt.style.whiteSpace = 'pre';  // the name's width on one line, then back
    const maxName = range.getBoundingClientRect().width;
    dt.style.whiteSpace = '';
    return { name: dt.textContent, ...box, maxName };
  });
  return { panel, rows };
}"""


@pytest.mark.parametrize("width", [1000, 560])  # beside the canvas; under it (a narrow cell)
def test_a_box_with_long_leaf_rows_keeps_room_for_the_values(browser: Any, tmp_path: Path, width: int) -> None:
    """A box's rows are named by its leaves' dotted paths: the name column takes at most half the panel
    (wrapping after "." and "_"), so values are never squeezed to a few letters per line."""
    torch.manual_seed(0)
    model = add_lora(GPT2(GPT2Config.small_test()))  # leaves such as attn.c_attn.base.weight
    with gv.capture(model) as cap:
        loss = gpt2_loss(model)
    loss.backward()
    w = gv.GraphWidget(loss, model=model, capture=cap, height=560)
    w.overlay = gv.gradient_flow(model)  # a row per leaf of the selected box
    w.expanded = ["blocks.0"]
    w.selected = "blocks.0"
    p = MountedPage(browser, tmp_path, exported_state(w), viewport=(width + 40, 900), width=width)
    p.js(LAB_OUTPUT_CSS_JS)  # as inside a JupyterLab output area
    p.page.wait_for_selector(".gradviz-details dl dt")
    out = p.js(COLUMNS_JS)
    long = [r for r in out["rows"] if "." in r["name"] and len(r["name"]) >= 20]
    assert long, f"no long leaf row in the box's details: {[r['name'] for r in out['rows']]}"
    for r in out["rows"]:
        assert r["dt"] <= 0.5 * out["panel"] + 1, f"name column {r['dt']:.0f} of {out['panel']:.0f} px: {r['name']}"
        assert r["dd"] >= 0.4 * out["panel"], f"value column {r['dd']:.0f} of {out['panel']:.0f} px beside {r['name']}"
        assert r["dt"] >= min(r["maxName"], 0.5 * out["panel"]) - 1, f"name squeezed to {r['dt']:.0f} px: {r['name']}"
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / f"details-box-rows-{width}.png"))
    assert p.errors == []

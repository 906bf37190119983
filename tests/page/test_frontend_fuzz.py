"""Malformed traits never break the page: the built bundle, mounted again and again in ONE headless
Chromium page (the page kit's fake anywidget model), on a valid full state (graph, recording, overlay,
diff, findings, toggles, ...) with mutations applied: wrong types, missing keys, null, huge numbers,
NaN, "NaN" strings, deep nesting, unknown node ids, a cycle of module calls, HTML in names. Every case
must end without an uncaught page error or console error, with either the graph drawn or the error
box saying what was wrong (as text). Trait changes after the first draw are checked too: a malformed
value is refused with the box shown and the last good view kept, and a good value recovers."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pagekit
import pytest
from pagekit import BUNDLE, SCREENSHOTS, MountedPage, load_fixture

from gradviz_nb.export.html import FAKE_MODEL

pytestmark = pytest.mark.browser
browser = pagekit.browser

SEED = 20261125
RANDOM_CASES = 110
XSS = "<img src=x onerror=alert(1)><script>alert(2)</script><b>bold</b>"

# Once per page: the fake model's constructor and the bundle imported once; `mount` unmounts the last
# widget and renders a new one on a fresh fake model, `set` changes a trait as Python would.
INSTALL = (
    "async ([source]) => {\n"
    + FAKE_MODEL
    + """
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const mod = await import(url);
  const el = document.getElementById("host");
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const f = (window.fuzz = { mod, el, model: null, cleanup: null });
  // "<<deep>>" stands for a value nested 2,000 levels deep, built here (Playwright's argument
  // serialization stops at about a hundred levels).
  const deep = () => {
    let x = "bottom";
    for (let i = 0; i < 2000; i++) x = i % 2 ? [x] : { a: x };
    return x;
  };
  const expand = (x) => x === "<<deep>>" ? deep()
    : Array.isArray(x) ? x.map(expand)
    : x && typeof x === "object" ? Object.fromEntries(Object.entries(x).map(([k, v]) => [k, expand(v)])) : x;
  f.settle = async () => {
    const root = el.querySelector(".gradviz-root");
    const hook = root && root.__gradviz;
    if (hook) {
      try { await Promise.race([hook.idle(), sleep(10000)]); } catch (e) { /* reported below */ }
    }
    await frame();
  };
  f.outcome = (threw) => {
    const root = el.querySelector(".gradviz-root");
    const box = el.querySelector("[data-testid=gradviz-error]");
    const shown = !!box && !box.hidden && box.getBoundingClientRect().height > 0;
    const hook = root && root.__gradviz;
    return {
      threw,
      error: shown ? box.innerText : "",
      layout: root ? root.dataset.layout || "" : "",
      nodes: hook ? hook.cy.nodes().length : -1,
      unsafe: el.querySelectorAll("img, script, iframe, b, svg:not(.gradviz-icon):not(.gradviz-key-swatch)").length,
    };
  };
  f.mount = async (state) => {
    let threw = null;
    try {
      if (f.cleanup) await f.cleanup();
    } catch (e) { threw = "cleanup: " + String(e && e.stack || e); }
    f.cleanup = null;
    el.replaceChildren();
    f.model = gradvizFakeModel(expand(state), null);
    try {
      f.cleanup = await f.mod.default.render({ model: f.model, el });
    } catch (e) { threw = "render: " + String(e && e.stack || e); }
    await f.settle();
    return f.outcome(threw);
  };
  f.set = async ([name, value]) => {
    let threw = null;
    try { f.model.set(name, expand(value)); } catch (e) { threw = "set " + name + ": " + String(e && e.stack || e); }
    await f.settle();
    return f.outcome(threw);
  };
}
"""
)


def base_state() -> dict[str, Any]:
    """A valid state using every trait: the recorded MLP's graph with its recording, an overlay, a
    diff, findings, toggles, a selection and an open box."""
    fx = load_fixture("recording_mlp.json")
    graph = fx["graph"]
    ids = [n["id"] for n in graph["nodes"]]
    return {
        "graph_data": graph,
        "expanded": ["2"],
        "unfolded": [],
        "selected": "n1",
        "height": 500,
        "toggles": {"detach": ["n4:0"], "freeze": []},
        "verified": {},
        "can_verify": False,
        "overlay": {"title": "gradient L2 norm", "values": {i: float(k + 1) for k, i in enumerate(ids)},
                    "scale": "log", "encoding": "color", "marks": {"n7": "no-grad"}, "unit": ""},
        "recording": fx["recording"],
        "step": 2,
        "diff": {"status": {i: "same" for i in ids} | {"n5": "changed"}, "why": {"n5": "shape [2, 8] -> [2, 16]"},
                 "added_leaves": [], "removed_leaves": [], "gained": [], "lost": [], "hidden": [],
                 "memory": {}, "memory_total": [0, 0], "summary": "one change"},
        "findings": [{"kind": "no-grad", "target": "0.weight", "message": "gets no gradient", "evidence": "seen",
                      "fix": "unfreeze it", "step": 0, "node": "n7"}],
    }


BAD_VALUES: list[Callable[[random.Random], Any]] = [
    lambda r: None,
    lambda r: "NaN",
    lambda r: float("nan"),
    lambda r: float("inf"),
    lambda r: 1e308,
    lambda r: -(2**53) - 7,
    lambda r: -1,
    lambda r: 0,
    lambda r: 3.5,
    lambda r: True,
    lambda r: "",
    lambda r: XSS,
    lambda r: "unknown-node-zz",
    lambda r: [],
    lambda r: {},
    lambda r: [XSS, 7, None],
    lambda r: {"<i>k</i>": XSS},
    lambda r: "<<deep>>",  # nested 2,000 levels deep, built in the page
    lambda r: list(range(r.choice([3, 5000]))),
]


def _paths(x: Any, at: tuple[Any, ...] = (), depth: int = 0) -> list[tuple[Any, ...]]:
    """Every path into `x` (dict keys and list indices), a few levels deep, lists sampled."""
    out = [at]
    if depth >= 5:
        return out
    if isinstance(x, dict):
        for k, v in x.items():
            out += _paths(v, (*at, k), depth + 1)
    elif isinstance(x, list):
        for i in sorted({0, len(x) // 2, len(x) - 1}) if x else []:
            out += _paths(x[i], (*at, i), depth + 1)
    return out


def mutate(state: dict[str, Any], r: random.Random) -> str:
    """One random mutation of `state` in place; returns what it did (for failure messages)."""
    trait = r.choice(list(state))
    paths = _paths(state[trait], (trait,))
    path = r.choice(paths)
    parent: Any = state
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    how = r.random()
    if how < 0.2 and isinstance(parent, dict) and len(path) > 1:
        del parent[key]
        return f"delete {path}"
    if how < 0.3 and isinstance(parent[key], str):
        parent[key] = r.choice(["unknown-node-zz", XSS, "NaN", ""])
        return f"{path} = unknown id / html string"
    value = r.choice(BAD_VALUES)(r)
    parent[key] = value
    return f"{path} = {json.dumps(value, default=str)[:60]}"


def _call_cycle(s: dict[str, Any]) -> None:
    calls = s["graph_data"]["calls"]
    calls[0]["parent"], calls[2]["parent"] = calls[2]["id"], calls[0]["id"]


def _no_id(s: dict[str, Any]) -> None:
    del s["graph_data"]["nodes"][3]["id"]


def _edge_to_unknown(s: dict[str, Any]) -> None:
    s["graph_data"]["edges"][1]["target"] = XSS


# The audit's classes: name, mutation, the text the error box must show (None: the graph must draw,
# no box: the page ignores ids it does not know, since traits may name the next graph's ids for a moment).
AUDIT: list[tuple[str, Callable[[dict[str, Any]], None], str | None]] = [
    ("graph_data not an object", lambda s: s.update(graph_data=[1, 2]), "graph_data"),
    ("nodes not a list", lambda s: s["graph_data"].update(nodes={"n0": 1}), "graph_data.nodes"),
    ("a node without id", _no_id, "graph_data.nodes[3].id"),
    ("an edge to an unknown node", _edge_to_unknown, "graph_data.edges[1].target"),
    ("calls with a parent cycle", _call_cycle, "cycle"),
    ("expanded not a list", lambda s: s.update(expanded="2"), "expanded"),
    ("expanded with unknown ids", lambda s: s.update(expanded=["2", "nope", XSS]), None),
    ("selected unknown", lambda s: s.update(selected=XSS), None),
    ("height negative", lambda s: s.update(height=-50), "height"),
    ("height NaN", lambda s: s.update(height=float("nan")), "height"),
    ("height a string", lambda s: s.update(height="600px"), "height"),
    ("overlay malformed", lambda s: s["overlay"].update(values=[1, 2, 3]), "overlay.values"),
    ("recording malformed", lambda s: s["recording"]["steps"][0].update(received="lots"),
     "recording.steps[0].received"),
    ("recording with a huge pass", lambda s: s["recording"]["steps"][0].update({"pass": 10**12}),
     "recording.steps[0].pass"),
    ("toggles malformed", lambda s: s.update(toggles={"detach": "n4:0", "freeze": [None]}), "toggles.detach"),
    ("findings malformed", lambda s: s.update(findings={"kind": "no-grad"}), "findings"),
    ("findings with a bad row", lambda s: s["findings"].append(7), "findings[1]"),
    ("duplicate node ids", lambda s: s["graph_data"]["nodes"][2].update(id="n1"), "graph_data.nodes[2].id"),
    ("names with HTML", lambda s: s["graph_data"]["nodes"][3].update(label=XSS, names=[XSS]), None),
]


class Fuzz(MountedPage):
    def __init__(self, browser: Any, tmp_path: Path) -> None:
        super().__init__(browser, tmp_path, base_state(), viewport=(1040, 900), width=1000)
        self.js("() => gv.cleanup()")
        self.js(INSTALL, [BUNDLE.read_text()])
        self.cases = 0

    def mount(self, state: dict[str, Any]) -> dict[str, Any]:
        self.cases += 1
        out: dict[str, Any] = self.js("(s) => fuzz.mount(s)", state)
        return out

    def set(self, name: str, value: Any) -> dict[str, Any]:
        out: dict[str, Any] = self.js("(a) => fuzz.set(a)", [name, value])
        return out


def check(p: Fuzz, what: str, out: dict[str, Any], errors_before: int) -> list[str]:
    """What went wrong in one case (empty: nothing)."""
    bad = []
    if out["threw"]:
        bad.append(f"threw: {out['threw'][:300]}")
    if len(p.errors) > errors_before:
        bad.append(f"page/console errors: {p.errors[errors_before:][:3]}")
    if out["unsafe"]:
        bad.append(f"{out['unsafe']} elements made from data (HTML, not text)")
    if not out["error"] and out["layout"] != "idle":
        bad.append(f"neither the graph (layout {out['layout']!r}, {out['nodes']} elements) nor the error box")
    return [f"{what}: {b}" for b in bad]


def test_malformed_trait_sets_never_break_the_page(browser: Any, tmp_path: Path) -> None:
    p = Fuzz(browser, tmp_path)
    good = p.mount(base_state())
    assert good["error"] == "" and good["layout"] == "idle" and good["nodes"] > 5, good
    assert p.errors == []
    failures: list[str] = []

    # The audit's classes, each as a first render and as a change after a good first draw.
    for name, apply, expect in AUDIT:
        state = base_state()
        apply(state)
        n = len(p.errors)
        out = p.mount(state)
        failures += check(p, f"{name} (first render)", out, n)
        if expect is None and out["error"]:
            failures.append(f"{name}: the page should ignore this and draw, but says {out['error']!r}")
        if expect is not None and expect not in out["error"]:
            failures.append(f"{name}: the error box should name {expect!r}; it shows {out['error']!r}")
        changed = [k for k in state if state[k] != base_state()[k]]
        if expect is None or changed == ["graph_data"]:
            continue
        drawn = p.mount(base_state())
        n = len(p.errors)
        for k in changed:
            out = p.set(k, state[k])
        failures += check(p, f"{name} (as a change)", out, n)
        if expect not in out["error"]:
            failures.append(f"{name} (as a change): refused value not reported: {out['error']!r}")
        if out["nodes"] != drawn["nodes"]:
            failures.append(f"{name} (as a change): the last good view did not stay "
                            f"({drawn['nodes']} -> {out['nodes']})")
        for k in changed:
            out = p.set(k, base_state()[k])
        if out["error"] or out["layout"] != "idle":
            failures.append(f"{name}: a good value did not recover: {out}")

    # A malformed graph at first render, then a good one: the graph is drawn and the box is gone.
    bad = base_state()
    bad["graph_data"]["nodes"] = "many"
    assert "graph_data.nodes" in p.mount(bad)["error"]
    out = p.set("graph_data", base_state()["graph_data"])
    assert out["error"] == "" and out["layout"] == "idle" and out["nodes"] == good["nodes"], out

    # Seeded random mutations over the valid state.
    r = random.Random(SEED)
    for i in range(RANDOM_CASES):
        state = base_state()
        did = [mutate(state, r) for _ in range(r.choice([1, 1, 2, 3]))]
        n = len(p.errors)
        try:
            out = p.mount(state)
        except Exception as e:  # the evaluate itself failed: the page is broken
            failures.append(f"case {i} {did}: {e}")
            break
        failures += check(p, f"case {i} {did}", out, n)
        if i % 10 == 0:  # the same mutations as changes after a good first draw
            p.mount(base_state())
            n = len(p.errors)
            for k in [k for k in state if state[k] != base_state()[k]] + [k for k in base_state() if k not in state]:
                out = p.set(k, state.get(k))
            failures += check(p, f"case {i} {did} (as changes)", out, n)

    assert p.cases >= 100
    assert p.dialogs == [], p.dialogs
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:25])


def test_error_box_reads(browser: Any, tmp_path: Path) -> None:
    """The box as a reader sees it: what was wrong (user names as text), and what to do."""
    p = Fuzz(browser, tmp_path)
    state = base_state()
    _edge_to_unknown(state)
    _call_cycle(state)
    out = p.mount(state)
    text = out["error"]
    assert "The graph could not be drawn" in text
    assert "graph_data.edges[1].target: expected the id of a node in graph_data.nodes" in text
    assert XSS[:20] in text and out["unsafe"] == 0
    assert "What to do" in text
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    p.page.locator("#host").screenshot(path=str(SCREENSHOTS / "error_box.png"))
    box = p.page.locator("[data-testid=gradviz-error]").bounding_box()
    host = p.page.locator("#host").bounding_box()
    assert box and host and box["width"] <= host["width"] + 1 and box["height"] > 40
    # Dismissed, it hides; a later good graph draws with no box.
    p.page.click(".gradviz-error-close")
    assert p.page.locator("[data-testid=gradviz-error]").is_hidden()
    out = p.set("graph_data", copy.deepcopy(base_state()["graph_data"]))
    assert out["error"] == "" and out["layout"] == "idle"
    assert p.errors == []

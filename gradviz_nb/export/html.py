"""One self-contained HTML page: the widget's bundle, its current state and a tiny stand-in model.

The page needs no kernel and no network: the same ESM bundle anywidget loads is embedded (as a JSON
string, imported from a Blob URL), and a small fake model (get/set/on/off/save_changes/send) holds the
widget's synced traits. Everything interactive that the page computes itself keeps working: pan/zoom,
expand/collapse, details, what-if toggles, the backward stepper. A lazy widget's page (a big graph)
embeds every module call's chunk too, and the fake model answers the view's load requests from them.
A Content-Security-Policy forbids any network access (only inline, blob: and data: resources), so the
page can be opened from ``file://``.
"""

from __future__ import annotations

import html
import json
import os
import pathlib
from typing import TYPE_CHECKING, Any

from gradviz_nb.errors import GradvizError
from gradviz_nb.widgets.finite_json import finite_json

if TYPE_CHECKING:
    from gradviz_nb.tracing.graph import AutogradGraph
    from gradviz_nb.widgets.graph_widget import GraphWidget

BUNDLE = pathlib.Path(__file__).parent.parent / "static" / "widget.js"
# Traits that make no sense without a kernel: the page must not offer a re-run.
NO_KERNEL = {"verified": {}, "can_verify": False}

CSP = (
    "default-src 'none'; script-src 'unsafe-inline' blob:; worker-src blob:; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src blob: data:"
)

# The stand-in for anywidget's model, the ONE fake model (the page tests mount the bundle with it too,
# tests/pagekit.py). Backbone-like: `set` fires "change:<name>" only when the value changed; `saves`
# counts save_changes calls, `sent` keeps what the view sent (a re-run request has no kernel to go to);
# `on("msg:custom", f)` gets the replies to load requests, from the optional `chunks` map.
FAKE_MODEL = """
function gradvizFakeModel(state, chunks) {
  const listeners = {};
  // A lazy page's load requests are answered from `chunks` (call id -> Chunk), asynchronously as a
  // kernel would: every "msg:custom" listener gets ({kind: "chunks", chunks}, []).
  const answer = (msg) => {
    const calls = Array.isArray(msg.calls) ? msg.calls : null;
    const known = (c) => chunks && Object.prototype.hasOwnProperty.call(chunks, c);
    const missing = calls ? calls.filter((c) => !known(c)) : [];
    let reply = { kind: "chunks", chunks: [], error: "load: 'calls' must be a list of module call ids." };
    if (calls && missing.length) {
      reply.error = "load: unknown module call ids " + missing.map((c) => JSON.stringify(c)).join(", ") +
        (chunks ? "." : " (this page embeds no chunks).");
    } else if (calls) {
      reply = { kind: "chunks", chunks: [...new Set(calls)].map((c) => chunks[c]) };
    }
    setTimeout(() => { for (const f of listeners["msg:custom"] || []) f(reply, []); }, 0);
  };
  const model = {
    state, saves: 0, sent: [],
    get: (k) => model.state[k],
    set(k, v) {
      if (JSON.stringify(model.state[k]) === JSON.stringify(v)) return;
      model.state[k] = v;
      for (const f of listeners["change:" + k] || []) f();
    },
    on(ev, f) { (listeners[ev] ||= []).push(f); },
    off(ev, f) { listeners[ev] = (listeners[ev] || []).filter((g) => g !== f); },
    save_changes() { model.saves++; },
    send(msg) {
      model.sent.push(msg);
      if (msg && msg.kind === "load") answer(msg);
    },
    listenerCount: () => Object.values(listeners).reduce((n, l) => n + l.length, 0),
  };
  return model;
}
"""

# The page's module script; `window.gradvizModel` lets tests (and curious users) drive the model.
MOUNT = FAKE_MODEL + """
const read = (id) => JSON.parse(document.getElementById(id).textContent);
const chunks = document.getElementById("gradviz-chunks");
const model = gradvizFakeModel(read("gradviz-state"), chunks ? read("gradviz-chunks") : null);
window.gradvizModel = model;
const url = URL.createObjectURL(new Blob([read("gradviz-bundle")], { type: "text/javascript" }));
const widget = (await import(url)).default;
const el = document.getElementById("gradviz-host");
await widget.render({ model, el });
const root = el.querySelector(".gradviz-root");
window.gradvizReady = root && root.__gradviz ? root.__gradviz.idle() : Promise.resolve();
"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="gradviz_nb {version}">
<title>{title}</title>
<style>
  body {{ margin: 12px; font-family: system-ui, sans-serif; background: #fff; color: #222; }}
  h1 {{ font-size: 15px; font-weight: 600; margin: 0 0 6px; }}
  p.gradviz-caption {{ font-size: 12px; color: #555; margin: 0 0 8px; white-space: pre-wrap; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p class="gradviz-caption">{caption}</p>
<div id="gradviz-host"></div>
<script type="application/json" id="gradviz-state">{state}</script>
{chunks}<script type="application/json" id="gradviz-bundle">{bundle}</script>
<script type="module">{mount}</script>
</body>
</html>
"""


def script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: ``<``, ``>``, ``&`` and line separators escaped, so no
    ``</script>`` or ``<!--`` in user names (or in the bundle) can end or confuse the element."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


def widget_state(widget: GraphWidget) -> dict[str, Any]:
    """The widget's synced traits as plain JSON (anywidget/ipywidgets plumbing and private ones left out)."""
    import ipywidgets

    plumbing = set(ipywidgets.DOMWidget.class_trait_names(sync=True))
    names = [n for n in widget.trait_names(sync=True) if not n.startswith("_") and n not in plumbing]
    state = {n: getattr(widget, n) for n in sorted(names)}
    state.update(NO_KERNEL)
    plain: dict[str, Any] = json.loads(json.dumps(state, allow_nan=False))  # plain JSON, a copy
    return plain


def page_html(widget: GraphWidget, title: str | None = None) -> str:
    """The page's text (see :func:`export_html`)."""
    if not BUNDLE.exists():
        raise GradvizError("export_html: the front-end bundle gradviz_nb/static/widget.js is missing; "
                           "run `npm --prefix js ci && npm --prefix js run build`.")
    from gradviz_nb import __version__

    graph = widget.graph
    caption = "\n".join(graph.summary().splitlines()[:2])
    state = widget_state(widget)
    chunks = ""
    if "wiring" in state["graph_data"]:  # lazy: every box's records, for the fake model's load replies
        embedded = script_json(finite_json(widget.lazy_graph().all_chunks()))
        chunks = f'<script type="application/json" id="gradviz-chunks">{embedded}</script>\n'
    return PAGE.format(
        csp=CSP,
        version=__version__,
        title=html.escape(title or "gradviz_nb: autograd graph"),
        caption=html.escape(caption),
        state=script_json(state),
        chunks=chunks,
        bundle=script_json(BUNDLE.read_text(encoding="utf-8")),
        mount=MOUNT,
    )


def export_html(
    graph_or_widget: AutogradGraph | GraphWidget,
    path: str | os.PathLike[str],
    title: str | None = None,
    **traits: Any,
) -> pathlib.Path:
    """Write one self-contained HTML file showing the graph, interactive with no kernel and no network.

    ``graph_or_widget``: an :class:`AutogradGraph` (drawn as a fresh widget would be) or a
    ``GraphWidget`` (its current state: open boxes, selection, toggles, overlay, recording, diff).
    ``traits`` override synced traits, e.g. ``expanded=["blocks.0"]`` or ``overlay=mem.to_overlay()``.
    Returns the path written.

    Example::

        gv.export_html(g, "graph.html", title="GPT-2 small, LoRA adapters")
        widget.save_html("view.html")     # the same, from a widget
    """
    from gradviz_nb.tracing.graph import AutogradGraph
    from gradviz_nb.widgets.graph_widget import GraphWidget

    if isinstance(graph_or_widget, AutogradGraph):
        widget = GraphWidget(graph_or_widget)
    elif isinstance(graph_or_widget, GraphWidget):
        widget = graph_or_widget
        if traits:  # a copy with the overrides, leaving the user's widget as it is
            copy = GraphWidget(widget.graph, lazy=widget.lazy)
            for name, value in widget_state(widget).items():
                setattr(copy, name, value)
            widget = copy
    else:
        raise GradvizError(
            f"export_html: expected an AutogradGraph or a GraphWidget, got {type(graph_or_widget).__name__}."
        )
    for name, value in traits.items():
        if not widget.has_trait(name) or name.startswith("_"):
            raise GradvizError(f"export_html: GraphWidget has no trait {name!r} to set.")
        setattr(widget, name, value)
    out = pathlib.Path(path)
    out.write_text(page_html(widget, title), encoding="utf-8")
    return out

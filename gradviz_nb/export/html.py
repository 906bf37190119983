"""One self-contained HTML page: the widget's bundle, its current state and a tiny stand-in model.

The page needs no kernel and no network: the canvas bundle (``static/widget.js``) is embedded
gzip-compressed and base64-encoded, as the kernel's runtime model holds it (``gradviz_nb.widgets.runtime``:
0.3 MB instead of 0.67 MB), decoded with the browser's ``DecompressionStream`` and imported from a Blob
URL; a small fake model (get/set/on/off/save_changes/send) holds the
widget's synced traits. Everything interactive that the page computes itself keeps working: pan/zoom,
expand/collapse, details, what-if toggles, the backward stepper. A lazy widget's page (a big graph)
embeds the reply body of every module call's load request too, computed ahead by the kernel's own
handlers (``gradviz_nb.widgets.page.messages``); the fake model looks them up and wraps them in the
reply envelope with the request's id. The page is written from a state (``page.Snapshot``: the synced
traits, those answers, a caption), never from the widget class.
A Content-Security-Policy forbids any network access (only inline, blob: and data: resources), so the
page can be opened from ``file://``.
"""

from __future__ import annotations

import html
import json
import os
import pathlib
from typing import Any

from gradviz_nb.errors import GradvizError
from gradviz_nb.files import target, write_atomic
from gradviz_nb.validate import text
from gradviz_nb.widgets.page.state import Snapshot, page_snapshot
from gradviz_nb.widgets.runtime import ENCODING, encoded_bundle

BUNDLE = pathlib.Path(__file__).parent.parent / "static" / "widget.js"
# Traits that make no sense without a kernel: the page must not offer a re-run.
NO_KERNEL = {"verified": {}, "can_verify": False}

CSP = (
    "default-src 'none'; script-src 'unsafe-inline' blob:; worker-src blob:; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src blob: data:"
)

# The stand-in for anywidget's model, the ONE fake model (the page tests mount the bundle with it too,
# tests/pagekit.py). Backbone-like: `set` fires "change:<name>" only when the value changed; `saves`
# counts save_changes calls, `sent` keeps what the view sent. Requests (`PageRequest`: id, kind, body)
# are answered from `answers` (see gradviz_nb.widgets.page.messages.answers: the kernel's own reply
# bodies, by kind and argument), wrapped as `PageReply` with the request's id, asynchronously as a
# kernel would; what it cannot answer gets ok: false and an error. Malformed messages are ignored.
FAKE_MODEL = """
function gradvizFakeModel(state, answers) {
  const listeners = {};
  const table = answers || { load: {}, values: {}, why: {} };
  const has = (o, k) => o != null && Object.prototype.hasOwnProperty.call(o, k);
  const body = (kind, args) => {
    if (kind === "load") {
      const calls = args && args.calls;
      if (!Array.isArray(calls)) return { error: "load: 'calls' must be a list of module call ids." };
      const missing = calls.filter((c) => !has(table.load, c));
      if (missing.length) {
        return { error: "load: unknown module call id" + (missing.length > 1 ? "s " : " ") +
          missing.map((c) => JSON.stringify(c)).join(", ") + " (ids are GraphPayload.calls[].id, '' = top level)." };
      }
      return { body: { chunks: [...new Set(calls)].flatMap((c) => table.load[c].chunks) } };
    }
    if (kind === "values") {  // a leaf's summaries, saved within the export's budget (page/values.py)
      const node = args && args.node;
      if (typeof node !== "string") return { error: "values: 'node' must be a node id (a string)." };
      return { body: has(table.values, node) ? table.values[node]
        : { node, value: null, grad: null, missing: "not saved in this export" } };
    }
    if (kind === "why") {  // the doctor's answer for a leaf, saved for the first leaves (page/why.py)
      const node = args && args.node;
      if (typeof node !== "string") return { error: "why: 'node' must be a node id (a string)." };
      return { body: has(table.why, node) ? table.why[node]
        : { node, answer: null, missing: "not saved in this export" } };
    }
    return { error: kind + ": this page was exported without a kernel, so it cannot answer that; " +
      "run the notebook to use it." };
  };
  const answer = (msg) => {
    if (!msg || typeof msg !== "object" || !Number.isInteger(msg.id)) return;  // nothing to reply to
    const found = body(msg.kind, msg.body);
    const reply = found.error === undefined
      ? { id: msg.id, kind: "reply", ok: true, body: found.body }
      : { id: msg.id, kind: "reply", ok: false, error: found.error };
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
      answer(msg);
    },
    listenerCount: () => Object.values(listeners).reduce((n, l) => n + l.length, 0),
  };
  return model;
}
"""

# The page's module script; `window.gradvizModel` lets tests (and curious users) drive the model.
MOUNT = FAKE_MODEL + """
const read = (id) => JSON.parse(document.getElementById(id).textContent);
const answers = document.getElementById("gradviz-answers");
const model = gradvizFakeModel(read("gradviz-state"), answers ? read("gradviz-answers") : null);
window.gradvizModel = model;
const bundle = read("gradviz-bundle");  // {encoding: "gzip+base64", code}
const binary = atob(bundle.code);
const bytes = new Uint8Array(binary.length);
for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
const source = await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
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
{answers}<script type="application/json" id="gradviz-bundle">{bundle}</script>
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


def exported_state(view: Any) -> dict[str, Any]:
    """The synced traits the exported page of ``view`` (a widget, a snapshot, or anything ``GraphWidget``
    accepts) starts from, as plain JSON: what ``window.gradvizModel.state`` holds there."""
    snap = page_snapshot(view)
    state: dict[str, Any] = json.loads(json.dumps({**snap.state, **NO_KERNEL}, allow_nan=False))
    return dict(sorted(state.items()))


def page_html(snap: Snapshot, title: str | None = None) -> str:
    """The page's text for a snapshot (see :func:`export_html`)."""
    if not BUNDLE.exists():
        raise GradvizError("export_html: the front-end bundle gradviz_nb/static/widget.js is missing; "
                           "run `npm --prefix js ci && npm --prefix js run build`.")
    from gradviz_nb._version import __version__

    answers = ""
    if any(snap.answers.values()):  # lazy boxes' load replies, leaves' values and why replies
        answers = f'<script type="application/json" id="gradviz-answers">{script_json(snap.answers)}</script>\n'
    return PAGE.format(
        csp=CSP,
        version=__version__,
        title=html.escape(title or "gradviz_nb: autograd graph"),
        caption=html.escape(snap.caption),
        state=script_json(exported_state(snap)),
        answers=answers,
        bundle=script_json({"encoding": ENCODING, "code": encoded_bundle(BUNDLE)[0]}),
        mount=MOUNT,
    )


def write_html(snap: Snapshot, path: str | os.PathLike[str], title: str | None = None,
               who: str = "save_html") -> pathlib.Path:
    """Write the page of ``snap`` to ``path`` (checked first, written atomically: ``gradviz_nb.files``);
    returns the path written."""
    out = target("path", path, (".html", ".htm"), who)
    # A lone surrogate in a name is not UTF-8: backslashreplace writes it as \udXXX, which the page's JSON
    # reads back as the same character and HTML text shows as visible text.
    return write_atomic(out, page_html(snap, title).encode("utf-8", "backslashreplace"), who)


def export_html(source: Any, path: str | os.PathLike[str], title: str | None = None, **traits: Any) -> pathlib.Path:
    """Write one self-contained HTML file showing the graph, interactive with no kernel and no network.

    ``source``: anything ``GraphWidget`` draws (an :class:`AutogradGraph`, a loss tensor, a recording, a
    diff, a diagnosis, a memory report; drawn as a fresh widget would be), or a live widget (its current
    state: open boxes, selection, toggles, overlay, recording, diff). ``traits`` override synced traits,
    converted as the widget converts them, e.g. ``expanded=["blocks.0"]`` or ``overlay=mem``; a widget
    given is left as it is. Returns the path written.

    Example::

        gv.export_html(g, "graph.html", title="GPT-2 small, LoRA adapters")
        gv.export_html(gv.diff(before, after), "diff.html")
        widget.save_html("view.html")     # the same, from a widget
    """
    target("path", path, (".html", ".htm"), "export_html")  # before any work: a bad path costs nothing
    text("title", title, none_ok=True)
    try:
        snap = page_snapshot(source, **traits)
    except GradvizError as err:
        raise GradvizError(f"export_html: {err}") from None
    return write_html(snap, path, title, who="export_html")

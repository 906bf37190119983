// The `_esm` of every GraphWidget: a few kB that find the canvas code and hand the widget to it.
//
// The canvas (src/index.ts, 0.67 MB) is not in each widget's `_esm`: anywidget saves `_esm`
// in every widget's saved state, so a notebook with four graphs weighed 9 MB. Instead ONE hidden model
// per kernel (`GradvizRuntime`, gradviz_nb/widgets/runtime.py) holds the bundle, gzip-compressed and
// base64-encoded; each widget's `_runtime` trait references it ("IPY_MODEL_<id>", ipywidgets' widget
// reference). The saved state holds every live model once, so the code is saved once per notebook and a
// reopened notebook (or nbconvert's page, through the html manager) resolves the reference the same way.
// The decoded module is imported once per page and kept on `globalThis`, keyed by the bundle's digest:
// the second widget, and every widget of another notebook from the same gradviz_nb, start at once.
import type { AnyModel, AnyWidget, Initialize, InitializeProps, Render, RenderProps } from "@anywidget/types";

/** What the full bundle exports (`export default { render }` in src/index.ts). */
interface Canvas {
  render: Render;
  initialize?: Initialize;
}

/** The runtime model's synced traits (`GradvizRuntime`). */
interface Runtime {
  get(name: "code" | "encoding" | "digest"): unknown;
}

/** One promise per bundle digest, shared by every widget on the page (and every notebook in it). */
type Cache = Map<string, Promise<Canvas>>;
const KEY = "__gradvizRuntimes";
const cache = (): Cache => {
  const g = globalThis as typeof globalThis & { [KEY]?: Cache };
  return (g[KEY] ??= new Map());
};

/** How long a widget waits for its runtime model (restoring a big notebook can take a while). */
const WAIT_MS = 30_000;

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: no answer after ${ms / 1000} s`)), ms);
    p.then(
      (v) => (clearTimeout(timer), resolve(v)),
      (e: unknown) => (clearTimeout(timer), reject(e)),
    );
  });
}

/** `code` as JavaScript text: "gzip+base64" (what Python sends) or "text". */
async function decode(code: string, encoding: string): Promise<string> {
  if (encoding === "text") return code;
  if (encoding !== "gzip+base64") throw new Error(`unknown runtime encoding ${JSON.stringify(encoding)}`);
  if (typeof DecompressionStream === "undefined") {
    throw new Error("this browser has no DecompressionStream (Chrome 80, Firefox 113, Safari 16.4 or newer needed)");
  }
  const binary = atob(code);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return await new Response(stream).text();
}

/** Import JavaScript text as a module (a Blob URL, as anywidget itself imports `_esm`). */
async function importText(text: string): Promise<Canvas> {
  const url = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
  try {
    const mod = (await import(/* @vite-ignore */ url)) as { default?: Canvas };
    if (!mod.default || typeof mod.default.render !== "function") throw new Error("the runtime code exports no render");
    return mod.default;
  } finally {
    URL.revokeObjectURL(url);
  }
}

/** The runtime model `model._runtime` references, through the widget manager. */
async function runtimeOf(model: AnyModel): Promise<Runtime> {
  const ref = model.get("_runtime");
  const id = typeof ref === "string" ? ref.replace(/^IPY_MODEL_/, "") : "";
  if (!id) throw new Error("this widget names no runtime model (its `_runtime` trait is empty)");
  const manager = model.widget_manager as AnyModel["widget_manager"] | undefined;
  if (!manager || typeof manager.get_model !== "function") {
    throw new Error("this front end gives widgets no widget manager to find the runtime model with");
  }
  return (await withTimeout(manager.get_model(id), WAIT_MS, `runtime model ${id}`)) as unknown as Runtime;
}

/** The canvas module for `model`: from the page's cache, else decoded from its runtime model once. */
async function canvasFor(model: AnyModel): Promise<Canvas> {
  const runtime = await runtimeOf(model);
  const digest = String(runtime.get("digest") ?? "");
  const known = digest ? cache().get(digest) : undefined;
  if (known) return known;
  const code = runtime.get("code");
  if (typeof code !== "string" || !code) throw new Error("the runtime model holds no code");
  const loading = decode(code, String(runtime.get("encoding") ?? "text")).then(importText);
  if (digest) {
    cache().set(digest, loading);
    loading.catch(() => cache().delete(digest)); // a later widget may try again
  }
  return loading;
}

/** Say why nothing is drawn (the static picture below the widget, if any, shows the graph then). */
function showError(el: HTMLElement, err: unknown): void {
  const box = document.createElement("div");
  box.className = "gradviz-load-error";
  box.setAttribute("data-testid", "gradviz-load-error");
  box.style.cssText = "padding:8px 10px;border:1px solid #d33;border-radius:4px;color:#a00;font:13px system-ui,sans-serif";
  box.textContent = `gradviz_nb could not load its canvas: ${err instanceof Error ? err.message : String(err)}`;
  el.append(box);
  console.error("gradviz_nb: could not load the canvas code", err);
}

export default {
  // Once per model, before any view: starts loading the code (render waits for the same promise).
  async initialize(props: InitializeProps) {
    const canvas = await canvasFor(props.model).catch(() => undefined); // render reports the failure
    return canvas?.initialize?.(props);
  },
  async render(props: RenderProps) {
    let canvas: Canvas;
    try {
      canvas = await canvasFor(props.model);
    } catch (err) {
      showError(props.el, err);
      return;
    }
    return canvas.render(props);
  },
} satisfies AnyWidget;

// anywidget entry: builds the DOM, the core (disclosure, layout, selection, paint) and the features
// listed in `features/index.ts`, and wires the synced traits to them; in lazy mode it asks Python for
// the contents of module calls before it draws them open.
// Traits hold all state, so a saved notebook or exported page rebuilds the same view with no kernel.
import type { AnyWidget, RenderProps } from "@anywidget/types";
import css from "./styles.css";
import { GraphView } from "./view/graphview";
import { readTheme, type Theme } from "./view/theme";
import { watchTheme } from "./view/themewatch";
import { createDetails } from "./panels/details";
import { h } from "./panels/dom";
import { createLegend, createTooltip } from "./panels/legend";
import { createToolbar } from "./panels/toolbar";
import { pressKey, tapEdge, tapElement } from "./core/clicks";
import { createCore, type Core } from "./core/context";
import { createErrorBox, ERROR_BOX_CSS } from "./core/errorbox";
import { guardModel } from "./core/guard";
import { coreHooks, type CoreHooks } from "./core/hooks";
import { collapseEverything, expandEverything } from "./core/disclosure";
import { applyHeight, fitButton, followPanels, relayout, sizeUnderPanel, watchCamera } from "./core/drawing";
import type { Feature, Slots } from "./core/feature";
import { repaint, tooltipText } from "./core/paint";
import { setSelected } from "./core/selection";
import { connectTraits, loadPayload } from "./core/traits";
import type { Traits } from "./payload";
import { FEATURES, type FeatureHooks } from "./features";

/** `root.__gradviz`: the core's hooks and every feature's (documented in js/README.md). */
export type GradvizHooks = CoreHooks & FeatureHooks;

/** Never throws: malformed traits and failures show the error box inside the widget (`core/guard.ts`). */
function render(props: Pick<RenderProps<Traits>, "model" | "el">): () => void {
  try {
    return renderWidget(props);
  } catch (err) {
    return renderFailure(props.el, err);
  }
}

/** The widget's DOM shell: the root (holding the style element), and the canvas, spinner and body the
 *  view and panels go into; feature rows under the toolbar (`top`) and the side column (`side`: the
 *  findings sit beside the graph, or above it when the cell is too narrow for both, by flex-wrap). */
interface Shell {
  root: HTMLElement;
  style: HTMLStyleElement;
  canvas: HTMLElement;
  spinner: HTMLElement;
  body: HTMLElement;
  top: HTMLElement;
  side: HTMLElement;
}

function buildShell(el: HTMLElement): Shell {
  const root = h("div", { class: "gradviz-root", "data-testid": "gradviz-root" });
  const style = document.createElement("style");
  const canvas = h("div", { class: "gradviz-canvas", "data-testid": "gradviz-canvas" });
  const spinner = h("div", { class: "gradviz-spinner", "data-testid": "gradviz-spinner", role: "status" }, "laying out…");
  spinner.hidden = true;
  const body = h("div", { class: "gradviz-body" }, canvas, spinner);
  root.append(style);
  el.append(root);
  return { root, style, canvas, spinner, body, top: h("div", { class: "gradviz-top" }), side: h("div", { class: "gradviz-side" }) };
}

type Guard = ReturnType<typeof guardModel>["run"];

/** Every feature of `features/index.ts`, built on the core; their CSS and Cytoscape styles applied, and
 *  re-applied when the notebook's theme changes. Returns the features and what stops the theme watch. */
function installFeatures(core: Core, slots: Slots, style: HTMLStyleElement, theme: Theme, run: Guard): { features: Feature[]; stopTheme: () => void } {
  const features: Feature[] = FEATURES.map((make) => make(core, slots) as Feature);
  core.features = features;
  watchCamera(core);
  style.textContent = [css, ERROR_BOX_CSS, ...features.map((f) => f.css ?? "")].join("\n");
  // The first feature wins, so its rules go last.
  const restyle = (t: Theme): void => core.view.setStyles(t, [...features].reverse().flatMap((f) => f.styles?.(t) ?? []));
  restyle(theme);
  let font = theme.fontFamily;
  const stopTheme = watchTheme(core.root, theme, run("a theme change", (t: Theme) => {
    restyle(t);
    core.root.dataset.theme = t.dark ? "dark" : "light";
    if (t.fontFamily !== font) {
      font = t.fontFamily;
      void relayout(core, {}); // node sizes are measured in the font
    } else repaint(core); // legends and features' palettes follow
  }));
  core.root.dataset.theme = theme.dark ? "dark" : "light";
  return { features, stopTheme };
}

/** The page's own events: keys, focus on click, the synced traits, the pointer leaving the canvas, and
 *  resizes (a side panel may have moved under the canvas, or back beside it: the height follows).
 *  Returns what removes them all. */
function listen(core: Core, shell: Shell, run: Guard, setHeight: () => void): () => void {
  const { root, canvas, body } = shell;
  const onKey = run("a key", (e: KeyboardEvent) => pressKey(core, e));
  const onPointerDown = run("the pointer", (e: Event) => {
    const tag = (e.target as HTMLElement | null)?.tagName ?? "";
    if (!["BUTTON", "INPUT", "SELECT", "TEXTAREA", "OPTION"].includes(tag)) root.focus({ preventScroll: true });
  });
  root.addEventListener("keydown", onKey);
  // Cytoscape blurs the focused element on mousedown: take the focus when the button comes up.
  root.addEventListener("pointerup", onPointerDown, { capture: true });
  const disconnect = connectTraits(core, setHeight);
  const hideTooltip = (): void => core.tooltip.hide();
  canvas.addEventListener("mouseleave", hideTooltip);
  const resizeObserver = new ResizeObserver(run("a resize", () => {
    core.view.resize();
    followPanels(core);
  }));
  resizeObserver.observe(body);
  return () => {
    disconnect();
    root.removeEventListener("keydown", onKey);
    root.removeEventListener("pointerup", onPointerDown, { capture: true });
    canvas.removeEventListener("mouseleave", hideTooltip);
    resizeObserver.disconnect();
  };
}

/** The core's parts (view, toolbar, details, legend, tooltip) wired to it, the features on it, and the
 *  first drawing; returns the teardown. */
function renderWidget({ model: raw, el }: Pick<RenderProps<Traits>, "model" | "el">): () => void {
  // Every trait is validated before the code below reads it; listeners and handlers run guarded.
  const errorBox = createErrorBox();
  const { model, run, checkAll } = guardModel(raw, errorBox);
  const shell = buildShell(el);
  const { root, canvas, spinner, body, top, side } = shell;

  // The callbacks run after `core` exists (on user events), so they may name it here.
  const theme = readTheme(root);
  const view = new GraphView(canvas, theme, {
    tap: run("a click", (key: string, kind: string, shift: boolean) => {
      tapElement(core, key, kind, shift);
      tooltip.update(tooltipText(core, key)); // the hovered box's tooltip says what the click made of it
    }),
    tapEdge: run("a click on an edge", (key: string) => tapEdge(core, key)),
    background: run("a click", () => setSelected(core, "")),
    hover: run("the pointer", (key: string | null, client: { x: number; y: number }) => {
      if (!key) {
        tooltip.hide();
        return;
      }
      tooltip.show(tooltipText(core, key), client, body);
    }),
  });
  const toolbar = createToolbar({
    fit: run("Fit", () => fitButton(core)),
    fitWhole: run("Fit", () => fitButton(core, true)),
    zoomReset: run("the zoom reset", () => view.zoomReset()),
    relayout: run("Re-layout", () => relayout(core, {})),
    expandAll: run("Expand all", () => expandEverything(core)),
    collapseAll: run("Collapse all", () => collapseEverything(core)),
    savePNG: run("the PNG download", () => download(view.toPNGBlob(2), "gradviz.png")),
    saveSVG: run("the SVG download", () => download(new Blob([view.toSVG()], { type: "image/svg+xml" }), "gradviz.svg")),
  });
  const details = createDetails(
    () => setSelected(core, ""),
    (on) => {
      body.classList.toggle("gradviz-with-details", on);
      applyHeight(core, false); // under the canvas, the panel takes a share of the body
      view.resize();
    },
  );
  const legend = createLegend(() => {
    // Fits keep the legend's corner free of nodes.
    view.setBottomReserve(legend.element.hidden ? 0 : legend.element.offsetHeight + 8);
  });
  const tooltip = createTooltip();
  body.append(details.element, legend.element, tooltip.element);
  root.append(toolbar.element, toolbar.status.element, top, errorBox.element, h("div", { class: "gradviz-main" }, side, body));
  root.tabIndex = 0;
  // JupyterLab must not take the keys we handle while the widget has focus.
  root.setAttribute("data-lm-suppress-shortcuts", "true");

  const core: Core = createCore(model, { root, body, spinner, view, toolbar, details, legend, tooltip });
  const { features, stopTheme } = installFeatures(core, { top, side, body, tools: toolbar.tools }, shell.style, theme, run);
  const setHeight = (): void => applyHeight(core);
  const unlisten = listen(core, shell, run, setHeight);
  const stopUnder = sizeUnderPanel(core, details.element);
  const hooks = Object.assign(coreHooks(core), ...features.map((f) => f.hooks ?? {})) as GradvizHooks;
  (root as HTMLElement & { __gradviz?: GradvizHooks }).__gradviz = hooks;

  checkAll();
  run("drawing the graph", () => {
    setHeight();
    // A refused graph is not drawn (nor are the open boxes reset to fit it): a good one will be.
    if (!errorBox.graphRefused) loadPayload(core);
  })();

  return () => {
    unlisten();
    stopUnder();
    stopTheme();
    core.loader.dispose();
    core.messenger.dispose();
    for (const f of features) f.dispose?.();
    toolbar.dispose();
    view.destroy();
    root.remove();
  };
}

/** `render` itself failed (nothing it built can be trusted): a plain box in `el` saying so. */
function renderFailure(el: HTMLElement, err: unknown): () => void {
  for (const child of [...el.children]) if (child.classList.contains("gradviz-root")) child.remove();
  const box = document.createElement("div");
  box.setAttribute("role", "alert");
  box.dataset.testid = "gradviz-error";
  box.style.cssText =
    "padding:8px 10px;border-left:4px solid #d32f2f;background:rgba(211,47,47,0.1);font:12px/1.45 system-ui,sans-serif;overflow-wrap:anywhere;white-space:pre-wrap";
  box.textContent =
    `The graph widget could not start: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}\n` +
    "What to do: run the cell again; if this comes back, report this message (and the browser console) as a bug.";
  el.append(box);
  return () => box.remove();
}

/** Save `blob` as a file through the browser's download (a temporary blob: link). */
function download(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  a.style.display = "none";
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export default { render } satisfies AnyWidget<Traits>;

// anywidget entry: builds the DOM and panels, hands them to the controllers in `widget/` through one
// shared context, and wires the synced traits (graph_data, expanded, unfolded, selected, height,
// toggles, verified, can_verify, overlay, recording, step, diff, findings) to them; in lazy mode it asks Python
// for the contents of module calls before it draws them open.
// Traits hold all state, so a saved notebook or exported page rebuilds the same view with no kernel.
import type { AnyWidget, RenderProps } from "@anywidget/types";
import css from "./styles.css";
import { search } from "./state/search";
import { firstNonfinite, passCursor } from "./state/stepper";
import { GraphView } from "./view/graphview";
import { readTheme } from "./view/theme";
import { createDetails } from "./panels/details";
import { createDiffPanel } from "./panels/diff";
import { createFindingsPanel } from "./panels/findings";
import { h } from "./panels/dom";
import { createLegend, createTooltip } from "./panels/legend";
import { createSearch } from "./panels/search";
import { createStepper } from "./panels/stepper";
import { createToolbar } from "./panels/toolbar";
import { createWhatIfPanel } from "./panels/whatif";
import { tapEdge, tapElement } from "./widget/clicks";
import { createContext, type Traits, type WidgetContext } from "./widget/context";
import { createDebugHook, type DebugHook } from "./widget/debughook";
import { collapseEverything, expandEverything } from "./widget/disclosure";
import { relayout } from "./widget/drawing";
import { tooltipText } from "./widget/paint";
import { reveal } from "./widget/reveal";
import { setSelected } from "./widget/selection";
import { setByModule, setPlaying, setSpeed, stepperKey, userSeek, userStep } from "./widget/stepper";
import { connectTraits, loadPayload } from "./widget/traits";
import { setWhatIfMode, userToggle } from "./widget/whatif";

export type { DebugHook } from "./widget/debughook";

function render({ model, el }: Pick<RenderProps<Traits>, "model" | "el">): () => void {
  const root = h("div", { class: "gradviz-root", "data-testid": "gradviz-root" });
  const style = document.createElement("style");
  style.textContent = css;
  const canvas = h("div", { class: "gradviz-canvas", "data-testid": "gradviz-canvas" });
  const spinner = h("div", { class: "gradviz-spinner", "data-testid": "gradviz-spinner", role: "status" }, "laying out…");
  spinner.hidden = true;
  const body = h("div", { class: "gradviz-body" }, canvas, spinner);
  root.append(style);
  el.append(root);

  // The panels' callbacks run after `ctx` exists (on user events), so they may name it here.
  const view = new GraphView(canvas, readTheme(root), {
    tap: (key, kind, shift) => tapElement(ctx, key, kind, shift),
    tapEdge: (key) => tapEdge(ctx, key),
    background: () => setSelected(ctx, ""),
    hover(key, client) {
      if (!key) {
        tooltip.hide();
        return;
      }
      tooltip.show(tooltipText(ctx, key), client, body);
    },
  });
  const searchBox = createSearch({
    query(q) {
      const { hits, total } = search(ctx.payload, q);
      searchBox.show(hits, total);
    },
    pick: (hit) => void reveal(ctx, hit.id, hit),
    clear() {
      if (ctx.focus === null) return;
      ctx.focus = null;
      void relayout(ctx, { fit: true });
    },
  });
  const toolbar = createToolbar(
    {
      fit: () => view.fit(),
      zoomReset: () => view.zoomReset(),
      relayout: () => void relayout(ctx, {}),
      expandAll: () => void expandEverything(ctx),
      collapseAll: () => void collapseEverything(ctx),
      whatIf: () => setWhatIfMode(ctx, !ctx.wi.mode),
      savePNG: () => download(view.toPNGBlob(2), "gradviz.png"),
      saveSVG: () => download(new Blob([view.toSVG()], { type: "image/svg+xml" }), "gradviz.svg"),
    },
    [searchBox.input],
  );
  const diffPanel = createDiffPanel();
  const findingsPanel = createFindingsPanel((node) => void reveal(ctx, node));
  const whatIfPanel = createWhatIfPanel({
    reset: () => userToggle(ctx, { detach: [], freeze: [] }),
    verify: () => model.send({ kind: "verify" }),
  });
  const details = createDetails(() => setSelected(ctx, ""));
  const stepper = createStepper({
    seek: (c) => userSeek(ctx, c),
    step: (dir) => userStep(ctx, dir),
    togglePlay: () => setPlaying(ctx, !ctx.step.playing),
    setSpeed: (v) => setSpeed(ctx, v),
    setPass: (p) => ctx.step.rix && userSeek(ctx, passCursor(ctx.step.rix, p)),
    setByModule: (on) => setByModule(ctx, on),
    firstNonfinite: () => ctx.step.rix && userSeek(ctx, firstNonfinite(ctx.step.rix.steps)),
  });
  const legend = createLegend(() => {
    // Fits keep the legend's corner free of nodes.
    view.setBottomReserve(legend.element.hidden ? 0 : legend.element.offsetHeight + 8);
  });
  const tooltip = createTooltip();
  body.append(details.element, stepper.details, legend.element, tooltip.element, searchBox.results);
  // The findings sit beside the graph, or above it when the cell is too narrow for both (flex-wrap).
  const main = h("div", { class: "gradviz-main" }, findingsPanel.element, body);
  root.append(toolbar.element, diffPanel.element, whatIfPanel.element, stepper.element, toolbar.info, toolbar.message, main);
  root.tabIndex = 0;
  // JupyterLab must not take the keys we handle while the widget has focus.
  root.setAttribute("data-lm-suppress-shortcuts", "true");

  const ctx: WidgetContext = createContext(model, {
    root,
    body,
    spinner,
    view,
    toolbar,
    searchBox,
    diffPanel,
    findingsPanel,
    whatIfPanel,
    details,
    stepper,
    legend,
    tooltip,
  });

  const setHeight = (): void => {
    body.style.height = `${Math.max(120, Number(model.get("height")) || 600)}px`;
    root.style.setProperty("--gv-body-h", body.style.height); // the findings column never outgrows the graph
    view.resize();
  };
  const onKey = (e: KeyboardEvent): void => stepperKey(ctx, e);
  const onPointerDown = (e: Event): void => {
    const tag = (e.target as HTMLElement | null)?.tagName ?? "";
    if (!["BUTTON", "INPUT", "SELECT", "TEXTAREA", "OPTION"].includes(tag)) root.focus({ preventScroll: true });
  };
  root.addEventListener("keydown", onKey);
  // Cytoscape blurs the focused element on mousedown: take the focus when the button comes up.
  root.addEventListener("pointerup", onPointerDown, { capture: true });
  const disconnect = connectTraits(ctx, setHeight);
  const hideTooltip = (): void => tooltip.hide();
  canvas.addEventListener("mouseleave", hideTooltip);
  const resizeObserver = new ResizeObserver(() => view.resize());
  resizeObserver.observe(body);

  (root as HTMLElement & { __gradviz?: DebugHook }).__gradviz = createDebugHook(ctx);

  setHeight();
  loadPayload(ctx);

  return () => {
    disconnect();
    ctx.loader.dispose();
    searchBox.dispose();
    if (ctx.step.timer) clearInterval(ctx.step.timer);
    root.removeEventListener("keydown", onKey);
    root.removeEventListener("pointerup", onPointerDown, { capture: true });
    canvas.removeEventListener("mouseleave", hideTooltip);
    resizeObserver.disconnect();
    view.destroy();
    root.remove();
  };
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

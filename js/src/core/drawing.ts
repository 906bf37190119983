// Laying out and drawing the current view: counts, messages, spinner and the `data-layout*`
// attributes; after a layout lands, the selection and every decoration are painted again.
import { drawnItems, neighbourhood, tooBigText } from "../state/cap";
import { plural } from "../state/labels";
import { callKey, nodeKey, visibleGraph, type VisibleGraph } from "../state/quotient";
import { READABLE_ZOOM, type Anchor } from "../view/graphview";
import { NOTHING, type Core } from "./context";
import { focusName, showSelection } from "./selection";
import { repaint } from "./paint";

/** Above this many visible elements, say that the graph is big (it still renders). */
export const BIG_GRAPH = 2500;

/** What is drawn for the current state: the quotient graph, or (a first view too big to draw)
 *  nothing but the neighbourhood of the search pick. */
export function currentGraph(ctx: Core): VisibleGraph {
  if (!ctx.tooBig) return visibleGraph(ctx.payload, ctx.expanded, ctx.index, ctx.folded);
  return ctx.focus !== null ? neighbourhood(ctx.payload, ctx.focus) : NOTHING;
}

function viewMessage(ctx: Core, shown: number): string {
  const { tooBig, focus, index } = ctx;
  if (tooBig && focus === null) {
    return tooBigText(drawnItems(visibleGraph(ctx.payload, ctx.expanded, index, ctx.folded).counts), index.order.length > 0);
  }
  if (focus !== null) return `Showing the neighbourhood of ${focusName(ctx, focus)}; clear the search to go back.`;
  if (shown <= BIG_GRAPH) return "";
  return (
    `Large graph: ${shown} nodes on screen. Layout runs in the background; ` +
    (index.order.length ? "collapse module boxes to see less." : "capture modules (gv.capture) to get collapsible boxes.")
  );
}

/** Lay out and draw (`graph` when the caller already computed it); resolves once drawn. */
export function relayout(
  ctx: Core,
  options: { anchor?: Anchor; fit?: boolean; incremental?: boolean },
  graph = currentGraph(ctx),
): Promise<void> {
  const { root, toolbar, view, index } = ctx;
  const counts = (ctx.counts = graph.counts);
  const shown = counts.nodes + counts.collapsed;
  toolbar.setCounts(
    `${plural(counts.nodes, "node")}` +
      (index.order.length && !ctx.tooBig ? ` · ${plural(counts.collapsed, "closed box")} · ${plural(counts.expanded, "open box")}` : "") +
      (counts.folded ? ` · ${plural(counts.folded, "folded stack")}` : ""),
  );
  toolbar.setMessage(viewMessage(ctx, shown));
  root.dataset.visibleNodes = String(counts.nodes);
  root.dataset.visibleBoxes = String(counts.collapsed);
  root.dataset.expandedBoxes = String(counts.expanded);
  root.dataset.foldedBoxes = String(counts.folded);
  root.dataset.layout = "running";
  if (ctx.spinner.hidden) setSpinner(ctx, "laying out…"); // a change may have said what it does already
  view.setReserve(reserveOf(ctx));
  view.setLayoutScale(ctx.features.map((f) => f.layoutScale?.() ?? null).find((f) => f) ?? null);
  ctx.running++;
  const job = view
    .show(graph, options)
    .then((applied) => {
      if (applied) afterLayout(ctx, shown, options);
    })
    .catch((err: unknown) => {
      root.dataset.layout = "error";
      toolbar.setMessage(`Layout failed: ${err instanceof Error ? err.message : String(err)}`);
    })
    .finally(() => {
      if (--ctx.running === 0) {
        setSpinner(ctx, null);
        if (root.dataset.layout === "running") root.dataset.layout = "idle";
      }
    });
  ctx.pending = Promise.all([ctx.pending, job]);
  return job;
}

function afterLayout(ctx: Core, shown: number, options: { anchor?: Anchor; fit?: boolean }): void {
  const { root, view } = ctx;
  // The element under the pointer may be gone (an unfolded stack): no stale tooltip over the new view.
  ctx.tooltip.hide();
  root.dataset.layoutMs = String(Math.round(view.lastLayoutMs));
  root.dataset.simpleLayout = String(view.simpleLayout);
  root.dataset.layoutIncremental = String(view.lastLayoutIncremental);
  root.dataset.rerouted = String(view.rerouted);
  if (view.simpleLayout) {
    ctx.toolbar.setMessage(
      `Large graph: ${shown} items on screen, drawn with a plain layered layout (straight edges; open ` +
        "boxes may overlap). " +
        (ctx.index.order.length ? "Collapse module boxes for the full layout." : "Capture modules (gv.capture) to get collapsible boxes."),
    );
  }
  for (const f of ctx.features) f.laidOut?.();
  showSelection(ctx);
  repaint(ctx);
  // The height follows the content (up to the `height` trait); the legend appeared (or changed size)
  // with this paint: fit again around it, at a zoom where labels read.
  applyHeight(ctx, !!options.fit);
  if (options.fit && !options.anchor) fitView(ctx);
}

/** Fit the view; when that would make labels unreadable, show what the cell is about at a readable
 *  zoom instead (the selection, else a feature's focus such as the first finding, else the loss) and
 *  say so on the message line. */
export function fitView(ctx: Core): void {
  const { view } = ctx;
  const focus = focusKey(ctx);
  const full = view.fitReadable(focus);
  ctx.root.dataset.fitZoom = full.toFixed(3);
  if (full >= READABLE_ZOOM - 1e-9) {
    if (ctx.toolbar.message.dataset.kind === "zoom") ctx.toolbar.setMessage("");
    return;
  }
  if (ctx.toolbar.message.textContent && ctx.toolbar.message.dataset.kind !== "zoom") return; // a more important message
  const what = focus ? focusName(ctx, focus.slice(2)) : view.cy.nodes('[kind = "root"]').nonempty() ? "the loss" : "the first rows";
  ctx.toolbar.setMessage(
    `Showing ${what} at ${Math.round(READABLE_ZOOM * 100)}% so labels read; the whole graph fits only at ` +
      `${Math.round(full * 100)}% (Fit). Scroll to move, or close boxes to see more at once.`,
  );
  ctx.toolbar.message.dataset.kind = "zoom";
}

/** The element the first view should show: the selected node or box when drawn, else the first
 *  feature that names one (null: the view's default, the loss). */
function focusKey(ctx: Core): string | null {
  const id = ctx.model.get("selected") || "";
  if (id) {
    for (const key of [nodeKey(id), callKey(id)]) if (ctx.view.cy.getElementById(key).nonempty()) return key;
  }
  for (const f of ctx.features) {
    const key = f.focus?.();
    if (key && ctx.view.cy.getElementById(key).nonempty()) return key;
  }
  return null;
}

/** Body height: the content's (at the largest fit zoom), never above the `height` trait; it grows
 *  with any layout and shrinks only on a fit (no jumping cell while the user opens boxes). */
export function applyHeight(ctx: Core, mayShrink = true): void {
  const { body, root, view, model } = ctx;
  const limit = Math.max(120, Number(model.get("height")) || 600);
  const content = view.contentHeight();
  const least = body.classList.contains("gradviz-with-side") ? 360 : 160;
  const now = parseFloat(body.style.height) || 0;
  let px = content === null ? limit : Math.min(limit, Math.max(least, content));
  if (!mayShrink && px < now) px = Math.min(now, limit);
  if (Math.abs(px - now) < 1) return;
  body.style.height = `${px}px`;
  root.style.setProperty("--gv-body-h", body.style.height); // the side column never outgrows the graph
  view.resize();
}

export function setSpinner(ctx: Core, text: string | null): void {
  if (text !== null) ctx.spinner.textContent = text;
  ctx.spinner.hidden = text === null;
}

/** The extra label lines nodes need room for, from the first feature that asks for any. */
function reserveOf(ctx: Core): ((key: string) => string[][] | null) | null {
  for (const f of ctx.features) {
    const r = f.reserve?.();
    if (r) return r;
  }
  return null;
}

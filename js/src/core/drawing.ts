// Laying out and drawing the current view: counts, messages, spinner and the `data-layout*`
// attributes; after a layout lands, the selection and every decoration are painted again.
import { drawnItems, neighbourhood, tooBigText } from "../state/cap";
import { plural } from "../state/labels";
import { visibleGraph, type VisibleGraph } from "../state/quotient";
import type { Anchor } from "../view/graphview";
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
  setSpinner(ctx, "laying out…");
  view.setReserve(reserveOf(ctx));
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
  // The legend appeared (or changed size) with this paint: fit again around it.
  if (options.fit && !options.anchor) view.fitReadable();
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

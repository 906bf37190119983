// Laying out and drawing the current view: counts, messages, spinner and the `data-layout*`
// attributes; after a layout lands, the selection and every decoration are painted again.
import { drawnItems, neighbourhood, tooBigText } from "../state/cap";
import { plural } from "../state/labels";
import { foldKey } from "../state/fold";
import { callKey, ghostKey, nodeKey, representative, visibleGraph, type VisibleGraph } from "../state/quotient";
import { isParamId, PARAM_PREFIX, unreachedParams } from "../state/unreached";
import type { Framing, Subject } from "../view/camera";
import type { Anchor } from "../view/graphview";
import { MOUNT_ZOOM } from "../view/bigview/bigview";
import { NOTHING, type Core } from "./context";
import { focusName, nodeById, showSelection } from "./selection";
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
      (index.order.length && !ctx.tooBig ? ` · ${plural(counts.collapsed + counts.expanded, "box")} (${counts.expanded} open)` : "") +
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
        (ctx.index.order.length ? "Collapse module boxes for the full layout." : "Capture modules (gv.capture) to get collapsible boxes.") +
        (view.big ? ` Below ${Math.round(MOUNT_ZOOM * 100)}% nodes are drawn as plain shapes without labels (click one to select it).` : ""),
    );
  }
  root.dataset.bigView = String(!!view.big);
  for (const f of ctx.features) f.laidOut?.();
  showSelection(ctx);
  repaint(ctx);
  // The height follows the content (up to the `height` trait); the legend appeared (or changed size)
  // with this paint: fit again around it, at a zoom where labels read.
  applyHeight(ctx, !!options.fit);
  if (options.fit && !options.anchor) fitView(ctx);
}

/** Frame the view's subject (view/camera.ts): the selection, else the boxes Python just opened, else
 *  the first feature's (lost leaves, a change, a finding, the running node), else a weak one (folded
 *  stacks), else the loss. */
export function fitView(ctx: Core): void {
  ctx.view.camera.frame(subjectOf(ctx));
}

/** The toolbar's Fit: the whole graph when its labels read, else the neighbourhood of the selection (or of
 *  what the view is about); again: the whole graph (view/camera.ts fitAll). `whole` (the zoom chip, "N%
 *  fits"): the whole graph at once. */
export function fitButton(ctx: Core, whole = false): void {
  ctx.view.fit(selectedSubject(ctx) ?? ctx.view.camera.subject, whole);
}

/** The selected node or box as a subject (its drawn representative), null when nothing is selected. */
function selectedSubject(ctx: Core): Subject | null {
  const id = ctx.model.get("selected") || "";
  if (!id) return null;
  const keys = [...new Set(selectedKeys(ctx, id).map((k) => drawnKey(ctx, k)).filter((k): k is string => k !== null))];
  return keys.length ? { keys, withLoss: true, name: focusName(ctx, id) } : null;
}

/** Boxes open at the last framed layout, per payload: what Python opened since is the new subject. */
const openAtFrame = new WeakMap<Core, { gen: number; open: Set<string> }>();

/** The keys standing for a selection: a node's, a call's, or for a parameter outside the graph its cut's
 *  ghost (or the box that ghost is drawn in, while closed). */
function selectedKeys(ctx: Core, id: string): string[] {
  const ghost = isParamId(id) ? unreachedParams(ctx.payload).get(id.slice(PARAM_PREFIX.length)) : undefined;
  if (ghost) return ctx.view.cy.getElementById(ghostKey(ghost.id)).nonempty() || !ghost.call ? [ghostKey(ghost.id)] : [callKey(ghost.call)];
  return [nodeById(ctx, id) ? nodeKey(id) : callKey(id)];
}

function subjectOf(ctx: Core): Subject | null {
  const last = openAtFrame.get(ctx);
  openAtFrame.set(ctx, { gen: ctx.payloadGen, open: new Set(ctx.expanded) });
  const drawn = (s: Subject | null): Subject | null => {
    const keys = s ? [...new Set(s.keys.map((k) => drawnKey(ctx, k)).filter((k): k is string => k !== null))] : [];
    return s && keys.length ? { ...s, keys } : null;
  };
  const selected = selectedSubject(ctx);
  if (selected) return selected;
  // Deepest first: the box a person opened, not its ancestors.
  const depth = (c: string): number => ctx.index.chain.get(c)?.length ?? 0;
  const opened = [...ctx.expanded].filter((c) => !last?.open.has(c)).sort((a, b) => depth(b) - depth(a));
  // Only a change after the first view of a payload: the boxes a payload opens with are its own default.
  const boxes = last && last.gen === ctx.payloadGen ? drawn({ keys: opened.map(callKey), withLoss: true, name: opened.join(", ") }) : null;
  if (boxes) return boxes;
  let weak: Subject | null = null;
  for (const f of ctx.features) {
    const s = drawn(f.subject?.() ?? null);
    if (s && !s.weak) return s;
    weak ??= s;
  }
  return drawn(cutSubject(ctx)) ?? weak;
}

/** A graph whose gradient path is cut by a detach (a ghost that cuts parameters off): the cut is what
 *  the first view is about, not the loss at its tail. Null when nothing is cut. */
function cutSubject(ctx: Core): Subject | null {
  const ghost = (ctx.payload.ghosts ?? []).find((g) => g.kind === "detached" && g.cut.length > 0 && (g.targets.length > 0 || g.source));
  if (!ghost) return null;
  const at = ghost.targets.length ? ghost.targets : [ghost.source!];
  return { keys: at.map(nodeKey), withLoss: true, name: `the ${ghost.label || "detach"} that cuts ${plural(ghost.cut.length, "parameter")} off` };
}

/** The drawn element standing for a node or call key: itself, or the closed box or folded stack
 *  around it; null when nothing is drawn for it. */
function drawnKey(ctx: Core, key: string): string | null {
  const cy = ctx.view.cy;
  let rep = key;
  if (cy.getElementById(key).empty()) {
    const id = key.slice(2);
    const node = key.startsWith("n:") ? nodeById(ctx, id) : undefined;
    if (node) rep = representative(node, ctx.index, ctx.expanded, ctx.folded);
    else if (key.startsWith("c:")) {
      const closed = (ctx.index.chain.get(id) ?? []).find((c) => !ctx.expanded.has(c));
      const group = closed === undefined ? undefined : ctx.folded.get(closed);
      if (closed !== undefined) rep = group ? foldKey(group.id) : callKey(closed);
    }
  }
  return cy.getElementById(rep).nonempty() ? rep : null;
}

/** The toolbar's zoom chip and `data-fit-zoom` follow every frame and fit of the camera. */
export function watchCamera(ctx: Core): void {
  ctx.view.camera.onFramed = (f: Framing) => {
    ctx.root.dataset.fitZoom = f.fitZoom.toFixed(3);
    ctx.toolbar.setZoom({ percent: (f.whole ? f.zoom : f.fitZoom) * 100, fits: f.whole, outside: f.outside });
  };
}

/** Up to this many drawn items a graph sizes itself: its canvas may grow past the `height` trait (up to
 *  SMALL_GRAPH_PX) so that it is shown whole at a readable zoom, not cut off at 100% (a 12-node MLP is
 *  about 650 px tall; the notebooks ask for 380-420 px). Bigger graphs keep the trait as their height. */
export const SMALL_GRAPH = 40;
const SMALL_GRAPH_PX = 900;

/** Body height: the content's (at the largest fit zoom), never above the `height` trait (a small graph:
 *  up to SMALL_GRAPH_PX); it grows with any layout and shrinks only on a fit (no jumping cell while the
 *  user opens boxes). */
export function applyHeight(ctx: Core, mayShrink = true): void {
  const { body, root, view, model, counts } = ctx;
  const content = view.contentHeight();
  const asked = Math.max(120, Number(model.get("height")) || 600);
  const small = counts.nodes + counts.collapsed + counts.folded <= SMALL_GRAPH && counts.nodes + counts.collapsed > 0;
  const whole = small ? view.contentHeight(1) : null; // at 100%: the height that shows it whole and readable
  const limit = whole !== null ? Math.max(asked, Math.min(SMALL_GRAPH_PX, whole + 24)) : asked;
  const least = body.classList.contains("gradviz-with-side") ? 360 : 160;
  // A side panel laid out under the canvas (a narrow cell) takes a share of the body: the canvas keeps
  // the height it needs and the body grows by the panel (it squeezed a stepper's canvas to 270 px).
  const share = canvasShare(ctx);
  const now = (parseFloat(body.style.height) || 0) * share;
  let px = content === null ? limit : Math.min(limit, Math.max(least, content));
  if (!mayShrink && px < now) px = Math.min(now, limit);
  if (Math.abs(px - now) < 1) return;
  body.style.height = `${Math.round(px / share)}px`;
  root.style.setProperty("--gv-body-h", body.style.height); // the side column never outgrows the graph
  view.resize();
}

/** After a resize: when a side panel moved under the canvas (or back beside it), the height follows,
 *  once per move. Not on every resize: a host that sizes the cell from its content (marimo) answers a
 *  height change with another resize, and the cell never settled. */
const panelWasUnder = new WeakMap<Core, boolean>();
export function followPanels(ctx: Core): void {
  const under = canvasShare(ctx) < 1;
  if (under === (panelWasUnder.get(ctx) ?? false)) return;
  panelWasUnder.set(ctx, under);
  applyHeight(ctx, false);
}

/** Most a details panel laid out under the canvas (a narrow cell) takes: about 16 rows; more scrolls. */
export const UNDER_MAX = 280;

/** Under the canvas (a narrow cell), the details panel takes the height of what it says, up to UNDER_MAX
 *  (`--gv-under-h`, read by styles.css): at 42% of a body that then grew to keep the canvas, a finding's
 *  click grew the doctor's widget by 650 px of mostly empty panel. Follows the panel's content as it
 *  changes (values arriving, "Why?" answered); returns what stops following. */
export function sizeUnderPanel(ctx: Core, panel: HTMLElement): () => void {
  const fit = (): void => {
    if (panel.hidden) return;
    let content = 20; // the panel's padding and border
    for (const c of panel.children) {
      if (c instanceof HTMLElement && getComputedStyle(c).position !== "absolute") content += c.offsetHeight;
    }
    const px = `${Math.round(Math.min(UNDER_MAX, Math.max(80, content)))}px`;
    if (ctx.body.style.getPropertyValue("--gv-under-h") === px) return;
    ctx.body.style.setProperty("--gv-under-h", px);
    applyHeight(ctx, true);
    ctx.view.resize();
  };
  const watch = new ResizeObserver(fit);
  const observe = (): void => {
    watch.disconnect();
    for (const c of panel.children) watch.observe(c);
  };
  new MutationObserver(observe).observe(panel, { childList: true });
  observe();
  return () => watch.disconnect();
}

/** The share of the body the canvas gets: 1, unless a side panel is laid out under it (narrow cells).
 *  Measured only then, so a host that sizes the canvas apart from the body never makes it grow. */
function canvasShare(ctx: Core): number {
  const canvas = ctx.view.cy.container();
  const b = ctx.body.clientHeight;
  if (!canvas || b <= 0) return 1;
  const c = canvas.getBoundingClientRect();
  const panels = ctx.body.querySelectorAll<HTMLElement>(".gradviz-details:not([hidden]), .gradviz-step-details:not([hidden])");
  const under = [...panels].some((p) => p.offsetHeight > 0 && p.getBoundingClientRect().top >= c.bottom - 1);
  return under ? Math.min(1, Math.max(0.5, c.height / b)) : 1;
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

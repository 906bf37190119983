// Synced traits -> view. Traits hold all state, so a saved notebook or exported page rebuilds the
// same view with no kernel; the custom messages only carry lazy-mode load requests and replies.
import { normalizeDiff } from "../state/diff";
import { canonical } from "../state/expansion";
import { foldedCalls, indexFolds } from "../state/fold";
import { reviveNodes } from "../state/finite";
import { inflate } from "../state/lazy";
import { normalizeOverlay } from "../state/overlay";
import { indexCalls } from "../state/quotient";
import { normalizeToggles } from "../state/whatif";
import { EMPTY, newLoader, type Disclosure, type WidgetContext } from "./context";
import { change } from "./disclosure";
import { relayout } from "./drawing";
import { repaint, showDiff } from "./paint";
import { isDrawn, reveal } from "./reveal";
import { showSelection } from "./selection";
import { loadRecording, takeStep } from "./stepper";
import { applyWhatIf, recomputeWhatIf, takeToggles } from "./whatif";

export function loadPayload(ctx: WidgetContext): void {
  const { model } = ctx;
  // Requests for the old payload's contents are dropped (their replies, if any, are stale).
  ctx.payloadGen++;
  ctx.loader.dispose();
  ctx.loader = newLoader(ctx);
  ({ payload: ctx.payload, lazy: ctx.lazy } = inflate(model.get("graph_data") || EMPTY));
  reviveNodes(ctx.payload.nodes);
  ctx.index = indexCalls(ctx.payload);
  ctx.folds = indexFolds(ctx.payload, ctx.index);
  ctx.wi.toggles = normalizeToggles(model.get("toggles"));
  recomputeWhatIf(ctx);
  ctx.wi.deco = null;
  ctx.overlay = normalizeOverlay(model.get("overlay"));
  ctx.diff = normalizeDiff(model.get("diff"));
  showDiff(ctx);
  ctx.findingsPanel.show(model.get("findings") || []);
  loadRecording(ctx);
  // Nothing is open until the first view is loaded and checked against the cap.
  ctx.expanded = new Set();
  ctx.unfolded = new Set();
  ctx.folded = foldedCalls(ctx.folds, ctx.expanded, ctx.unfolded);
  ctx.toolbar.setNotes(ctx.payload.meta?.notes ?? []);
  ctx.toolbar.setBoxesAvailable(ctx.index.order.length > 0);
  const wanted: Disclosure = {
    expanded: new Set(canonical(model.get("expanded") || [], ctx.index)),
    unfolded: new Set(model.get("unfolded") || []),
  };
  void change(ctx, () => wanted, { action: "Drawing the graph", fit: true, initial: true, fromTrait: true });
}

/** Listen to every synced trait and to custom messages; returns the function that stops listening. */
export function connectTraits(ctx: WidgetContext, setHeight: () => void): () => void {
  const { model } = ctx;
  const handlers: [string, () => void][] = [
    ["change:graph_data", () => loadPayload(ctx)],
    ["change:expanded", () => onExpanded(ctx)],
    ["change:unfolded", () => onUnfolded(ctx)],
    ["change:selected", () => onSelected(ctx)],
    ["change:height", setHeight],
    ["change:toggles", () => takeToggles(ctx)],
    ["change:verified", () => applyWhatIf(ctx)],
    ["change:can_verify", () => applyWhatIf(ctx)],
    ["change:overlay", () => onOverlay(ctx)],
    ["change:recording", () => onRecording(ctx)],
    ["change:step", () => takeStep(ctx)],
    ["change:diff", () => onDiff(ctx)],
    ["change:findings", () => ctx.findingsPanel.show(model.get("findings") || [])],
  ];
  const onCustom = (msg: unknown): void => ctx.loader.receive(msg);
  for (const [event, f] of handlers) model.on(event, f);
  model.on("msg:custom", onCustom);
  return () => {
    for (const [event, f] of handlers) model.off(event, f);
    model.off("msg:custom", onCustom);
  };
}

function onExpanded(ctx: WidgetContext): void {
  const incoming = new Set(canonical(ctx.model.get("expanded") || [], ctx.index));
  void change(ctx, (cur) => ({ expanded: incoming, unfolded: cur.unfolded }), { action: "Opening the requested boxes", fit: true, fromTrait: true });
}

function onUnfolded(ctx: WidgetContext): void {
  const incoming = new Set<string>(ctx.model.get("unfolded") || []);
  void change(ctx, (cur) => ({ expanded: cur.expanded, unfolded: incoming }), {
    action: "Unfolding the requested stacks",
    incremental: true,
    fromTrait: true,
  });
}

/** Python (or a user click) chose an element: one hidden in a closed box or stack is revealed. */
function onSelected(ctx: WidgetContext): void {
  const id = ctx.model.get("selected") || "";
  if (id && !isDrawn(ctx, id)) void reveal(ctx, id);
  else showSelection(ctx);
}

function onOverlay(ctx: WidgetContext): void {
  ctx.overlay = normalizeOverlay(ctx.model.get("overlay"));
  repaint(ctx);
}

function onRecording(ctx: WidgetContext): void {
  loadRecording(ctx);
  void relayout(ctx, {}); // node sizes depend on the recording's "data | grad" lines
}

function onDiff(ctx: WidgetContext): void {
  ctx.diff = normalizeDiff(ctx.model.get("diff"));
  showDiff(ctx);
  repaint(ctx);
  showSelection(ctx);
}


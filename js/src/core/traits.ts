// Synced traits -> view. Traits hold all state, so a saved notebook or exported page rebuilds the
// same view with no kernel; the custom messages only carry requests (lazy loads, verify) and replies.
// The core handles the graph's own traits; each feature handles the ones it declares.
import { canonical } from "../state/expansion";
import { foldedCalls, indexFolds } from "../state/fold";
import { reviveNodes } from "../state/finite";
import { inflate } from "../state/lazy";
import { indexCalls } from "../state/quotient";
import { EMPTY, newLoader, type Core, type Disclosure } from "./context";
import { change } from "./disclosure";
import { isDrawn, reveal } from "./reveal";
import { showSelection } from "./selection";

export function loadPayload(ctx: Core): void {
  const { model } = ctx;
  // Requests for the old payload's contents are dropped (their replies, if any, are stale).
  ctx.payloadGen++;
  ctx.loader.dispose();
  ctx.loader = newLoader(ctx);
  ({ payload: ctx.payload, lazy: ctx.lazy } = inflate(model.get("graph_data") || EMPTY));
  reviveNodes(ctx.payload.nodes);
  ctx.index = indexCalls(ctx.payload);
  ctx.folds = indexFolds(ctx.payload, ctx.index);
  for (const f of ctx.features) f.loaded?.();
  // Nothing is open until the first view is loaded and checked against the cap.
  ctx.expanded = new Set();
  ctx.unfolded = new Set();
  ctx.folded = foldedCalls(ctx.folds, ctx.expanded, ctx.unfolded);
  ctx.toolbar.setNotes(ctx.payload.meta?.notes ?? [], ctx.payload.meta?.num_nodes || ctx.payload.nodes.length);
  ctx.toolbar.setBoxesAvailable(ctx.index.order.length > 0);
  const wanted: Disclosure = {
    expanded: new Set(canonical(model.get("expanded") || [], ctx.index)),
    unfolded: new Set(model.get("unfolded") || []),
  };
  void change(ctx, () => wanted, { action: "Drawing the graph", fit: true, initial: true, fromTrait: true });
}

/** Listen to every synced trait and to custom messages; returns the function that stops listening. */
export function connectTraits(ctx: Core, setHeight: () => void): () => void {
  const { model } = ctx;
  const handlers: [string, () => void][] = [
    ["change:graph_data", () => loadPayload(ctx)],
    ["change:expanded", () => onExpanded(ctx)],
    ["change:unfolded", () => onUnfolded(ctx)],
    ["change:selected", () => onSelected(ctx)],
    ["change:height", setHeight],
  ];
  for (const f of ctx.features) for (const [name, on] of Object.entries(f.traits ?? {})) handlers.push([`change:${name}`, on]);
  const onCustom = (msg: unknown): void => ctx.messenger.receive(msg);
  for (const [event, f] of handlers) model.on(event, f);
  model.on("msg:custom", onCustom);
  return () => {
    for (const [event, f] of handlers) model.off(event, f);
    model.off("msg:custom", onCustom);
  };
}

function onExpanded(ctx: Core): void {
  const incoming = new Set(canonical(ctx.model.get("expanded") || [], ctx.index));
  void change(ctx, (cur) => ({ expanded: incoming, unfolded: cur.unfolded }), { action: "Opening the requested boxes", fit: true, fromTrait: true });
}

function onUnfolded(ctx: Core): void {
  const incoming = new Set<string>(ctx.model.get("unfolded") || []);
  void change(ctx, (cur) => ({ expanded: cur.expanded, unfolded: incoming }), {
    action: "Unfolding the requested stacks",
    incremental: true,
    fromTrait: true,
  });
}

/** Python (or a user click) chose an element: one hidden in a closed box or stack is revealed. */
function onSelected(ctx: Core): void {
  const id = ctx.model.get("selected") || "";
  if (id && !isDrawn(ctx, id)) void reveal(ctx, id);
  else showSelection(ctx);
}

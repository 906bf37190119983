// Bringing a node or call on screen (a search pick, `selected` set from Python, the debug hook):
// open and load the calls around it, unfold its stack, select it and centre on it.
import { neighbourhood } from "../state/cap";
import { groupsAround } from "../state/fold";
import { missingCalls, TOP } from "../state/lazy";
import { callKey, callShown, ghostKey, nodeKey, representative } from "../state/quotient";
import { isParamId, PARAM_PREFIX, unreachedParams } from "../state/unreached";
import type { Core } from "./context";
import { change, ensureLoaded } from "./disclosure";
import { relayout } from "./drawing";
import { nodeById, setSelected } from "./selection";

/** Whether node or call `id` is drawn as itself now. */
export function isDrawn(ctx: Core, id: string): boolean {
  if (isParamId(id)) return false; // never drawn as itself: reveal shows its cut
  const node = nodeById(ctx, id);
  if (ctx.tooBig) return ctx.focus !== null && !!node && neighbourhoodHas(ctx, id);
  if (node) return representative(node, ctx.index, ctx.expanded, ctx.folded) === nodeKey(id);
  return callShown(id, ctx.index, ctx.expanded, ctx.folded);
}

const neighbourhoodHas = (ctx: Core, id: string): boolean => !!ctx.view.shown?.items.some((i) => i.key === nodeKey(id));

/** Bring node or call `id` on screen: open (and load) the calls around it, unfold its stack,
 *  select it and centre on it at a readable zoom. */
export async function reveal(ctx: Core, id: string, label = id): Promise<void> {
  if (isParamId(id)) return revealParam(ctx, id, label);
  const { index, folds } = ctx;
  const node = nodeById(ctx, id);
  const call = node ? node.call : index.calls.has(id) ? id : null;
  if (!node && call === null) return;
  if (ctx.tooBig) {
    await revealNeighbourhood(ctx, id);
    return;
  }
  const chain = call ? (index.chain.get(call) ?? []) : [];
  // A node needs every call around it open; a call needs its ancestors open (it stays a box).
  const open = node ? chain : chain.slice(0, -1);
  const ok = await change(
    ctx,
    (cur) => ({ expanded: new Set([...cur.expanded, ...open]), unfolded: new Set([...cur.unfolded, ...(call ? groupsAround(call, folds, index) : [])]) }),
    { action: `Showing ${label}`, incremental: true },
  );
  if (!ok) return;
  setSelected(ctx, id);
  centreOn(ctx, node ? nodeKey(id) : callKey(id));
}

/** A parameter outside the graph: open the box its cut's ghost is drawn in, select it, centre on the ghost. */
async function revealParam(ctx: Core, id: string, label: string): Promise<void> {
  const ghost = unreachedParams(ctx.payload).get(id.slice(PARAM_PREFIX.length));
  if (!ghost) return;
  const chain = ghost.call ? (ctx.index.chain.get(ghost.call) ?? []) : [];
  setSelected(ctx, id); // its details at once (the closed box around it marked), while its boxes open
  if (!ctx.tooBig) {
    const ok = await change(
      ctx,
      (cur) => ({ expanded: new Set([...cur.expanded, ...chain]), unfolded: new Set([...cur.unfolded, ...(ghost.call ? groupsAround(ghost.call, ctx.folds, ctx.index) : [])]) }),
      { action: `Showing ${label}`, incremental: true },
    );
    if (!ok) return;
  }
  setSelected(ctx, id);
  centreOn(ctx, ghostKey(ghost.id));
}

/** Nothing but neighbourhoods is drawn: show the match's (a box: its first node's). */
async function revealNeighbourhood(ctx: Core, id: string): Promise<void> {
  const { payload, index } = ctx;
  const target = nodeById(ctx, id) ?? payload.nodes.find((n) => n.call === id || (index.chain.get(n.call) ?? []).includes(id));
  if (!target) return;
  ctx.focus = target.id;
  const graph = neighbourhood(payload, target.id);
  const calls = new Set<string>(graph.items.map((i) => (i.type === "node" ? i.node.call : TOP)));
  if (!(await ensureLoaded(ctx, missingCalls(ctx.lazy, calls)))) return;
  await relayout(ctx, { fit: true });
  setSelected(ctx, target.id);
  centreOn(ctx, nodeKey(target.id));
}

/** Centre the viewport on an element, zooming in to at least 1:1 so its label reads. */
function centreOn(ctx: Core, key: string): void {
  const { cy } = ctx.view;
  const ele = cy.getElementById(key);
  if (ele.empty()) return;
  cy.zoom(Math.max(cy.zoom(), 1));
  cy.center(ele);
}

// What a click on the canvas means: a folded stack unfolds; in what-if mode a node or box toggles
// (leaf: freeze, op: detach, box: detach, shift: freeze); with a recording an op or leaf moves the
// stepper there; otherwise a box opens or closes and a node is selected.
import { CALL_PREFIX, tensorsOfEdges, toggleItem, toggleTensors } from "../state/whatif";
import { stepForNode } from "../state/stepper";
import type { WidgetContext } from "./context";
import { closeCall, openCall, unfoldGroup } from "./disclosure";
import { setSelected } from "./selection";
import { userSeek } from "./stepper";
import { userToggle } from "./whatif";

// A click on a box means open / close (it does not select: a panel popping up on every open would
// cover the graph). Python can still select a call by setting `selected`.
export function tapElement(ctx: WidgetContext, key: string, kind: string, shift: boolean): void {
  const id = key.slice(2);
  const { toggles } = ctx.wi;
  // A folded stack is not a toggle target, even in what-if mode: a click unfolds it.
  if (kind === "folded") {
    void unfoldGroup(ctx, id);
    return;
  }
  if (ctx.wi.mode && kind !== "root" && kind !== "ghost") {
    if (kind === "leaf") userToggle(ctx, toggleItem(toggles, "freeze", id));
    else if (kind === "op") userToggle(ctx, toggleItem(toggles, "detach", id));
    else if (shift) userToggle(ctx, toggleItem(toggles, "freeze", CALL_PREFIX + id));
    else userToggle(ctx, toggleItem(toggles, "detach", CALL_PREFIX + id));
    return;
  }
  const { rix, cursor } = ctx.step;
  if (rix && (kind === "op" || kind === "leaf")) {
    const at = stepForNode(rix, cursor, id);
    if (at !== null) {
      userSeek(ctx, at);
      return;
    }
  }
  if (kind === "collapsed") void openCall(ctx, id);
  else if (kind === "expanded") void closeCall(ctx, id);
  else setSelected(ctx, id);
}

/** In what-if mode a click on an edge detaches (or restores) the tensors it carries. */
export function tapEdge(ctx: WidgetContext, key: string): void {
  const edge = ctx.view.shown?.edges.find((e) => e.key === key);
  if (!ctx.wi.mode || !edge || edge.ghost) return;
  userToggle(ctx, toggleTensors(ctx.wi.toggles, tensorsOfEdges(ctx.payload, edge.edges)));
}

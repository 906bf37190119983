// What a click on the canvas means: each feature in list order may take it (a folded stack unfolds;
// in what-if mode a node or box toggles; with a recording an op or leaf moves the stepper there);
// otherwise a box opens or closes and a node is selected.
import type { Core } from "./context";
import { closeCall, openCall } from "./disclosure";
import { setSelected } from "./selection";

// A click on a box means open / close (it does not select: a panel popping up on every open would
// cover the graph). Python can still select a call by setting `selected`.
export function tapElement(ctx: Core, key: string, kind: string, shift: boolean): void {
  if (kind === "ghost") return; // a ghost stub takes the pointer for its tooltip only
  for (const f of ctx.features) if (f.click?.(key, kind, shift)) return;
  const id = key.slice(2);
  if (kind === "collapsed") void openCall(ctx, id);
  else if (kind === "expanded") void closeCall(ctx, id);
  else setSelected(ctx, id);
}

/** A click on an edge (only while a feature made edges take clicks). */
export function tapEdge(ctx: Core, key: string): void {
  for (const f of ctx.features) if (f.tapEdge?.(key)) return;
}

/** A key press while the widget has focus: the first feature that handles it takes it. */
export function pressKey(ctx: Core, e: KeyboardEvent): void {
  for (const f of ctx.features) {
    if (f.key?.(e)) {
      e.preventDefault();
      e.stopPropagation();
      return;
    }
  }
}

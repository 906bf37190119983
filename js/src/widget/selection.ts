// The selected element (the `selected` trait): its details panel and its highlight on the canvas.
import type { GraphNode } from "../payload";
import { callDetails, nodeDetails, nodeTitle } from "../state/labels";
import { withUnit } from "../state/numbers";
import { callKey, nodeKey } from "../state/quotient";
import { whatIfIndex } from "../state/whatif";
import type { WidgetContext } from "./context";

export function nodeById(ctx: WidgetContext, id: string): GraphNode | undefined {
  const i = whatIfIndex(ctx.payload).pos.get(id);
  return i === undefined ? undefined : ctx.payload.nodes[i];
}

export function focusName(ctx: WidgetContext, id: string): string {
  const n = nodeById(ctx, id);
  return n ? nodeTitle(n) : id;
}

export function setSelected(ctx: WidgetContext, id: string): void {
  if (ctx.model.get("selected") !== id) {
    ctx.model.set("selected", id);
    ctx.model.save_changes();
  }
  showSelection(ctx);
}

export function showSelection(ctx: WidgetContext): void {
  const { details, view, diff } = ctx;
  const id = ctx.model.get("selected") || "";
  const node = id ? nodeById(ctx, id) : undefined;
  const call = !node && id ? ctx.index.calls.get(id) : undefined;
  if (node) {
    const rows = nodeDetails(node);
    const st = diff?.status[node.id];
    if (diff && st) {
      rows.push(["diff", st]);
      if (diff.why[node.id]) rows.push(["why", diff.why[node.id]]);
      const mem = diff.memory[node.id];
      if (mem) rows.push(["saved for backward", `${withUnit(mem[0], "B")} → ${withUnit(mem[1], "B")}`]);
    }
    details.show(nodeTitle(node), rows);
    view.select(nodeKey(node.id));
  } else if (call) {
    details.show(`${call.id} · ${call.type}`, callDetails(call, call.size || ctx.index.size.get(call.id) || 0));
    view.select(callKey(call.id));
  } else {
    details.hide();
    view.select(null);
  }
}

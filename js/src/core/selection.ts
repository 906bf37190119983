// The selected element (the `selected` trait): its details panel and its highlight on the canvas.
import type { GraphNode } from "../payload";
import { callDetails, nodeDetails, nodeTitle } from "../state/labels";
import { callKey, ghostKey, nodeKey } from "../state/quotient";
import { paramNode, unreachedParams, unreachedText, PARAM_PREFIX } from "../state/unreached";
import { graphIndex } from "../state/graphindex";
import type { DetailRow, LeadRows } from "../panels/details";
import type { Core } from "./context";

export function nodeById(ctx: Core, id: string): GraphNode | undefined {
  const i = graphIndex(ctx.payload).pos.get(id);
  return i === undefined ? undefined : ctx.payload.nodes[i];
}

export function focusName(ctx: Core, id: string): string {
  const n = nodeById(ctx, id) ?? paramNode(ctx.payload, id);
  return n ? nodeTitle(n) : id;
}

export function setSelected(ctx: Core, id: string): void {
  if (ctx.model.get("selected") !== id) {
    ctx.model.set("selected", id);
    ctx.model.save_changes();
  }
  showSelection(ctx);
}

export function showSelection(ctx: Core): void {
  const { details, view } = ctx;
  const id = ctx.model.get("selected") || "";
  const param = id ? paramNode(ctx.payload, id) : undefined;
  const node = id ? (nodeById(ctx, id) ?? param) : undefined;
  const call = !node && id ? ctx.index.calls.get(id) : undefined;
  if (node) {
    // A parameter outside the graph has no node: its facts are mostly blanks (and its page id), so they fold.
    const rows: DetailRow[] = param ? nodeDetails(node).filter(([label]) => label !== "id") : nodeDetails(node);
    const lead: DetailRow[] = [];
    let collapse = !!param;
    for (const f of ctx.features) {
      rows.push(...(f.details?.(node) ?? []));
      const first: LeadRows | null | undefined = f.leadDetails?.(node);
      if (first) {
        lead.push(...first.rows);
        collapse ||= first.collapse;
      }
    }
    const ghost = param ? unreachedParams(ctx.payload).get(id.slice(PARAM_PREFIX.length)) : undefined;
    if (ghost) lead.unshift(["outside", unreachedText(ghost)]);
    details.show(nodeTitle(node), rows, { rows: lead, collapse });
    view.select(ghost ? ghostShown(ctx, ghost.id, ghost.call) : nodeKey(node.id));
  } else if (call) {
    const rows: DetailRow[] = callDetails(call, call.size || ctx.index.size.get(call.id) || 0);
    for (const f of ctx.features) rows.push(...(f.callDetails?.(call) ?? []));
    details.show(`${call.id} · ${call.type}`, rows);
    view.select(callKey(call.id));
  } else {
    details.hide();
    view.select(null);
  }
}

/** The drawn element standing for a ghost: itself, or the innermost drawn box around it (closed). */
function ghostShown(ctx: Core, id: string, call: string): string {
  const cy = ctx.view.cy;
  if (cy.getElementById(ghostKey(id)).nonempty()) return ghostKey(id);
  const chain = call ? (ctx.index.chain.get(call) ?? []) : [];
  for (let i = chain.length - 1; i >= 0; i--) if (cy.getElementById(callKey(chain[i])).nonempty()) return callKey(chain[i]);
  return ghostKey(id);
}

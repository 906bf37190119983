// The module-call tree of a payload, indexed once: each call's chain of ancestors, its node count,
// and payload order. The one place the page derives the tree (quotient, folds, reveal, search use it).
import type { GraphPayload, ModuleCall } from "../payload";

/** Call-tree facts derived once per payload: ancestors, children, node counts. */
export interface CallIndex {
  calls: Map<string, ModuleCall>;
  /** Call id -> chain from the outermost call down to the call itself (never includes ""). */
  chain: Map<string, string[]>;
  /** Call id -> number of payload nodes inside it, recursively. */
  size: Map<string, number>;
  /** Call ids in payload order (parents before children). */
  order: string[];
}

export function indexCalls(payload: GraphPayload): CallIndex {
  const calls = new Map<string, ModuleCall>();
  const chain = new Map<string, string[]>();
  const order: string[] = [];
  for (const c of payload.calls) {
    calls.set(c.id, c);
    order.push(c.id);
  }
  const chainOf = (id: string, seen: Set<string>): string[] => {
    const known = chain.get(id);
    if (known) return known;
    const call = calls.get(id);
    // Unknown parent or a cycle (bad payload): treat the call as top level rather than loop.
    const parent = call && call.parent && calls.has(call.parent) && !seen.has(call.parent) ? call.parent : "";
    seen.add(id);
    const result = parent ? [...chainOf(parent, seen), id] : [id];
    chain.set(id, result);
    return result;
  };
  for (const id of order) chainOf(id, new Set());
  const size = new Map<string, number>();
  for (const n of payload.nodes) {
    if (!n.call || !calls.has(n.call)) continue;
    for (const c of chain.get(n.call) ?? []) size.set(c, (size.get(c) ?? 0) + 1);
  }
  return { calls, chain, size, order };
}

// Lazy mode (big graphs): the payload carries the whole topology as compact `wiring` plus full node
// records only for the calls in `loaded`. `inflate` turns it into a full-length payload (placeholder
// records where nothing is loaded yet), so the quotient, what-if, overlay and stepper code work on it
// unchanged; `applyChunks` fills records in as the kernel (or an exported page) sends them.
import type { Chunk, GraphEdge, GraphNode, GraphPayload, ModuleCall } from "../payload";
import { reviveNodes } from "./finite";

/** The top level as a "call" in `loaded` and in load requests. */
export const TOP = "";

export interface LazyState {
  /** Call ids whose direct member nodes have full records ("" = the top level). */
  loaded: Set<string>;
  /** Node id -> index into payload.nodes. */
  pos: Map<string, number>;
}

const KIND = { o: "op", l: "leaf", r: "root" } as const;

/** A full-length payload from a lazy one (the same object back, with `null` state, when eager). */
export function inflate(payload: GraphPayload): { payload: GraphPayload; lazy: LazyState | null } {
  const w = payload.wiring;
  if (!w) return { payload, lazy: null };
  const sent = new Map<string, GraphNode>();
  for (const n of payload.nodes) sent.set(n.id, n);
  const calls: (ModuleCall | undefined)[] = payload.calls;
  const pos = new Map<string, number>();
  const nodes: GraphNode[] = w.ids.map((id, i) => {
    pos.set(id, i);
    const known = sent.get(id);
    if (known) return known;
    const call = w.calls[i] >= 0 ? calls[w.calls[i]] : undefined;
    return {
      id,
      kind: KIND[w.kinds[i] as keyof typeof KIND] ?? "op",
      op: w.ops[w.op[i]] ?? "",
      label: w.labels[i] ?? "",
      module: call?.path ?? "",
      call: call?.id ?? "",
      names: w.names[String(i)] ?? [],
      shape: null,
      dtype: "",
      requires_grad: true,
      saved: [],
      value: null,
    };
  });
  const edges: GraphEdge[] = [];
  for (let k = 0; k + 3 < w.edges.length; k += 4) {
    edges.push({ source: w.ids[w.edges[k]], target: w.ids[w.edges[k + 1]], output_nr: w.edges[k + 2], input_nr: w.edges[k + 3], shape: null });
  }
  for (const [slot, shape] of payload.edge_shapes ?? []) if (edges[slot]) edges[slot].shape = shape;
  const full: GraphPayload = { ...payload, nodes, edges };
  return { payload: full, lazy: { loaded: new Set(payload.loaded ?? []), pos } };
}

/** Patch records and edge shapes in place: the payload and its node objects stay the same (what-if's
 *  index is cached per payload object, chunks never change the topology, and a visible graph computed
 *  before the chunks arrived still points at the right records). */
export function applyChunks(payload: GraphPayload, lazy: LazyState, chunks: readonly Chunk[]): void {
  for (const chunk of chunks) {
    reviveNodes(chunk.nodes);
    for (const n of chunk.nodes) {
      const i = lazy.pos.get(n.id);
      if (i !== undefined) Object.assign(payload.nodes[i], n);
    }
    for (const [slot, shape] of chunk.edge_shapes) {
      const e = payload.edges[slot];
      if (e) e.shape = shape;
    }
    lazy.loaded.add(chunk.call);
  }
}

/** Calls whose member nodes the view would draw with `expanded` open and are not loaded yet:
 *  the top level and every expanded call (a collapsed box needs only its call record). */
export function missingCalls(lazy: LazyState | null, expanded: Iterable<string>): string[] {
  if (!lazy) return [];
  const missing: string[] = [];
  if (!lazy.loaded.has(TOP)) missing.push(TOP);
  for (const c of expanded) if (!lazy.loaded.has(c)) missing.push(c);
  return missing;
}

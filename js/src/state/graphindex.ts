// The graph's toggle-independent index: node positions and kinds, slot arrays (source, target,
// output_nr), CSR in/out lists and a topological order, built once per payload (cached). What-if,
// the neighbourhood cap and node look-ups all read it.
import type { GraphPayload } from "../payload";

export const OP = 0;
export const LEAF = 1;
export const ROOT = 2;

/** Toggle-independent facts of one payload, as flat arrays. */
export interface GraphIndex {
  payload: GraphPayload;
  ids: string[];
  pos: Map<string, number>;
  /** 0 op, 1 leaf, 2 root. */
  kind: Uint8Array;
  /** Node indices, producers before consumers. */
  topo: Int32Array;
  /** Per payload edge (slot): source / target node index, output_nr. */
  src: Int32Array;
  tgt: Int32Array;
  out: Int32Array;
  /** CSR lists of slot indices: incoming (by target) and outgoing (by source). */
  inStart: Int32Array;
  inSlots: Int32Array;
  outStart: Int32Array;
  outSlots: Int32Array;
  /** Call id -> parent call id, for call membership. */
  callParent: Map<string, string>;
}

const cache = new WeakMap<GraphPayload, GraphIndex>();

export function graphIndex(payload: GraphPayload): GraphIndex {
  const known = cache.get(payload);
  if (known) return known;
  const n = payload.nodes.length;
  const ids = payload.nodes.map((x) => x.id);
  const pos = new Map<string, number>();
  ids.forEach((id, i) => pos.set(id, i));
  const kind = new Uint8Array(n);
  payload.nodes.forEach((x, i) => (kind[i] = x.kind === "leaf" ? LEAF : x.kind === "root" ? ROOT : OP));
  const edges = payload.edges.filter((e) => pos.has(e.source) && pos.has(e.target));
  const m = payload.edges.length;
  const src = new Int32Array(m).fill(-1);
  const tgt = new Int32Array(m).fill(-1);
  const out = new Int32Array(m);
  const inCount = new Int32Array(n + 1);
  const outCount = new Int32Array(n + 1);
  payload.edges.forEach((e, i) => {
    const s = pos.get(e.source);
    const t = pos.get(e.target);
    if (s === undefined || t === undefined) return; // bad payload edge: ignored
    src[i] = s;
    tgt[i] = t;
    out[i] = e.output_nr;
    inCount[t + 1]++;
    outCount[s + 1]++;
  });
  for (let i = 0; i < n; i++) {
    inCount[i + 1] += inCount[i];
    outCount[i + 1] += outCount[i];
  }
  const inStart = inCount.slice();
  const outStart = outCount.slice();
  const inSlots = new Int32Array(edges.length);
  const outSlots = new Int32Array(edges.length);
  const inFill = inStart.slice(0, n);
  const outFill = outStart.slice(0, n);
  for (let i = 0; i < m; i++) {
    if (src[i] < 0) continue;
    inSlots[inFill[tgt[i]]++] = i;
    outSlots[outFill[src[i]]++] = i;
  }
  // Kahn's algorithm over distinct producer -> consumer pairs (multi-slot edges count per slot,
  // consistently on both sides).
  const indeg = new Int32Array(n);
  for (let i = 0; i < m; i++) if (src[i] >= 0) indeg[tgt[i]]++;
  const topo = new Int32Array(n);
  let head = 0;
  let tail = 0;
  for (let v = 0; v < n; v++) if (indeg[v] === 0) topo[tail++] = v;
  while (head < tail) {
    const u = topo[head++];
    for (let k = outStart[u]; k < outStart[u + 1]; k++) {
      const v = tgt[outSlots[k]];
      if (--indeg[v] === 0) topo[tail++] = v;
    }
  }
  // A cycle (impossible in an autograd graph) would leave nodes out: append them so nothing is lost.
  if (tail < n) {
    const seen = new Uint8Array(n);
    for (let i = 0; i < tail; i++) seen[topo[i]] = 1;
    for (let v = 0; v < n; v++) if (!seen[v]) topo[tail++] = v;
  }
  const callParent = new Map<string, string>();
  for (const c of payload.calls) callParent.set(c.id, c.parent);
  const index: GraphIndex = { payload, ids, pos, kind, topo, src, tgt, out, inStart, inSlots, outStart, outSlots, callParent };
  cache.set(payload, index);
  return index;
}

// Search by name or op over the WHOLE payload (every node and every module call, loaded or not: in
// lazy mode labels, ops and leaf names come with the wiring), case-insensitive substring. Ranking:
// exact matches first, then leaves, boxes, ops (roots with ops); forward order within a rank.
import type { GraphPayload } from "../../payload";
import { nodeTitle } from "../../state/labels";
import { ghostKey } from "../../state/quotient";
import { PARAM_PREFIX, unreachedParams } from "../../state/unreached";

export const MAX_RESULTS = 50;

export interface SearchHit {
  /** "n:<node id>" or "c:<call id>" (the element key it would have on screen). */
  key: string;
  /** Node or call id, for `selected`. */
  id: string;
  /** One line to show in the results list. */
  label: string;
}

interface Entry {
  hit: SearchHit;
  /** Lower-cased texts matched against ("\u0000"-joined, so no match spans two texts). */
  text: string;
  fields: string[];
  rank: number;
}

const RANK = { exact: 0, leaf: 1, box: 2, op: 3 } as const;

export interface SearchIndex {
  entries: Entry[];
}

const cache = new WeakMap<GraphPayload, SearchIndex>();

/** Built once per payload object (node records patched in by lazy chunks keep labels and names). */
export function searchIndex(payload: GraphPayload): SearchIndex {
  const known = cache.get(payload);
  if (known) return known;
  const entries: Entry[] = [];
  for (const c of payload.calls) {
    const fields = [c.id, c.type].map((s) => s.toLowerCase());
    entries.push({ hit: { key: "c:" + c.id, id: c.id, label: `${c.id} · ${c.type}` }, text: fields.join("\u0000"), fields, rank: RANK.box });
  }
  // Nodes come in walk order, from the loss backwards; calls in forward order. Sorting nodes by their
  // call's position (stable) makes hits read forwards: blocks.0 before blocks.47.
  const callPos = new Map(payload.calls.map((c, i) => [c.id, i]));
  const nodes = [...payload.nodes].sort((a, b) => (callPos.get(a.call) ?? -1) - (callPos.get(b.call) ?? -1));
  for (const n of nodes) {
    const fields = [n.label, n.op, ...n.names].filter(Boolean).map((s) => s.toLowerCase());
    const where = n.call ? ` · in ${n.call}` : "";
    const label = nodeTitle(n) + (n.kind === "leaf" ? "" : n.op && n.op !== nodeTitle(n) ? ` (${n.op})` : "") + where;
    entries.push({ hit: { key: "n:" + n.id, id: n.id, label }, text: fields.join("\u0000"), fields, rank: n.kind === "leaf" ? RANK.leaf : RANK.op });
  }
  // A parameter a cut left outside the graph (a dead adapter): found by name, drawn as its cut's ghost.
  for (const [name, g] of unreachedParams(payload)) {
    const fields = [name.toLowerCase()];
    const label = `${name} · no path to the loss (cut in ${g.where || "(top level)"})`;
    entries.push({ hit: { key: ghostKey(g.id), id: PARAM_PREFIX + name, label }, text: fields[0], fields, rank: RANK.leaf });
  }
  const index = { entries };
  cache.set(payload, index);
  return index;
}

/** Up to `limit` hits, best first, and how many matched in all. */
export function search(payload: GraphPayload, query: string, limit = MAX_RESULTS): { hits: SearchHit[]; total: number } {
  const q = query.trim().toLowerCase();
  if (!q) return { hits: [], total: 0 };
  // One bucket per rank keeps payload order inside a rank without sorting every match.
  const buckets: SearchHit[][] = [[], [], [], []];
  let total = 0;
  for (const e of searchIndex(payload).entries) {
    if (!e.text.includes(q)) continue;
    total++;
    const rank = e.fields.includes(q) ? RANK.exact : e.rank;
    if (buckets[rank].length < limit) buckets[rank].push(e.hit);
  }
  return { hits: buckets.flat().slice(0, limit), total };
}

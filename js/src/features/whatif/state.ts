// What-if: which leaves lose their gradient if some tensors are detached or some leaves frozen.
// Pure (no DOM). The SAME rule as Python's gradviz_nb/analysis/what_if.py, which
// tests/test_what_if_agreement.py checks on a corpus of real traced models:
// 1. A cut removes edge slots: detaching tensor (u, output_nr) removes every slot carrying that
//    output; freezing a leaf removes every slot leaving it.
// 2. A node still exists in the re-run forward if it is an unfrozen leaf, or an op (or root) with at
//    least one uncut input slot from a node that still exists (visited in topological order).
// 3. Backward runs a node if it exists and reaches a root through uncut slots between existing
//    nodes. A leaf loses its gradient when backward no longer runs it.
// Everything that does not depend on the toggles (adjacency, topological order) is indexed once per
// payload, so one answer costs O(V + E).
import type { GraphPayload, Toggles, WhatIfAnswer } from "../../payload";

import { graphIndex, LEAF, ROOT, type GraphIndex } from "../../state/graphindex";

export const EMPTY_TOGGLES: Toggles = { detach: [], freeze: [] };

/** A tensor as the toggles name it: "<node id>:<output_nr>". */
export const tensorKey = (node: string, outputNr: number): string => `${node}:${outputNr}`;
export const CALL_PREFIX = "call:";

/** The full evaluation: the answer plus per-element facts the view draws. */
export interface WhatIfState {
  answer: WhatIfAnswer;
  /** Per payload edge: 1 when its slot is cut by a detach (freezes are not cuts). */
  cutSlot: Uint8Array;
  /** Per node: 1 when frozen (leaves only). */
  frozen: Uint8Array;
  /** Per node: 1 when backward still runs it (roots included). */
  runs: Uint8Array;
  /** Per node: 1 for a leaf that loses its gradient. */
  lost: Uint8Array;
  /** True when nothing is toggled. */
  empty: boolean;
}

/** Non-leaf nodes inside the call whose id is `name`; failing that (no call has that id), inside
 *  every call of module path `name`; nested calls count. Python's `_call_members`. */
export function callMembers(ix: GraphIndex, name: string): Uint8Array {
  const chosen = new Set<string>();
  for (const c of ix.payload.calls) if (c.id === name) chosen.add(c.id);
  if (chosen.size === 0) for (const c of ix.payload.calls) if (c.path === name) chosen.add(c.id);
  const members = new Uint8Array(ix.ids.length);
  if (chosen.size === 0) return members;
  const inside = new Map<string, boolean>();
  const isInside = (call: string): boolean => {
    const known = inside.get(call);
    if (known !== undefined) return known;
    const seen: string[] = [];
    let c = call;
    let result = false;
    while (c) {
      const k = inside.get(c);
      if (k !== undefined) {
        result = k;
        break;
      }
      if (chosen.has(c)) {
        result = true;
        break;
      }
      seen.push(c);
      if (seen.length > ix.payload.calls.length + 1) break; // bad payload: a cycle
      c = ix.callParent.get(c) ?? "";
    }
    for (const s of seen) inside.set(s, result);
    inside.set(call, result);
    return result;
  };
  ix.payload.nodes.forEach((node, i) => {
    if (ix.kind[i] !== LEAF && node.call && isInside(node.call)) members[i] = 1;
  });
  return members;
}

/** Mark the slots each detach item cuts: "<node>:<output_nr>", "<node>", "call:<call id>". */
function markCuts(ix: GraphIndex, items: readonly string[], cutSlot: Uint8Array): void {
  const tensors = new Map<number, Set<number>>(); // node -> cut output_nrs
  const add = (u: number, o: number): void => {
    let s = tensors.get(u);
    if (!s) tensors.set(u, (s = new Set()));
    s.add(o);
  };
  const allOutputs = (u: number): void => {
    for (let k = ix.outStart[u]; k < ix.outStart[u + 1]; k++) add(u, ix.out[ix.outSlots[k]]);
  };
  for (const item of items) {
    if (typeof item !== "string") continue;
    const whole = ix.pos.get(item);
    if (whole !== undefined) {
      allOutputs(whole);
      continue;
    }
    if (item.startsWith(CALL_PREFIX)) {
      const members = callMembers(ix, item.slice(CALL_PREFIX.length));
      for (let u = 0; u < members.length; u++) {
        if (!members[u]) continue;
        for (let k = ix.outStart[u]; k < ix.outStart[u + 1]; k++) {
          const e = ix.outSlots[k];
          if (!members[ix.tgt[e]]) add(u, ix.out[e]);
        }
      }
      continue;
    }
    const colon = item.lastIndexOf(":");
    if (colon > 0) {
      const u = ix.pos.get(item.slice(0, colon));
      const o = Number(item.slice(colon + 1));
      if (u !== undefined && Number.isInteger(o)) add(u, o);
    }
  }
  for (const [u, outs] of tensors) {
    for (let k = ix.outStart[u]; k < ix.outStart[u + 1]; k++) {
      const e = ix.outSlots[k];
      if (outs.has(ix.out[e])) cutSlot[e] = 1;
    }
  }
}

/** Mark frozen leaves: "<leaf id>" or "call:<call id>" (every leaf named under the call's path;
 *  like Python's `_leaves(path)`: leaves named exactly the path first, else the "<path>." prefix). */
function markFrozen(ix: GraphIndex, items: readonly string[], frozen: Uint8Array): void {
  const nodes = ix.payload.nodes;
  for (const item of items) {
    if (typeof item !== "string") continue;
    const i = ix.pos.get(item);
    if (i !== undefined) {
      if (ix.kind[i] === LEAF) frozen[i] = 1;
      continue;
    }
    if (!item.startsWith(CALL_PREFIX)) continue;
    const call = ix.payload.calls.find((c) => c.id === item.slice(CALL_PREFIX.length));
    if (!call) continue;
    const path = call.path;
    let named = false;
    for (let j = 0; j < nodes.length; j++) {
      if (ix.kind[j] === LEAF && nodes[j].names.includes(path)) {
        frozen[j] = 1;
        named = true;
      }
    }
    if (named) continue;
    const prefix = path + ".";
    for (let j = 0; j < nodes.length; j++) {
      if (ix.kind[j] === LEAF && nodes[j].names.some((name) => name.startsWith(prefix))) frozen[j] = 1;
    }
  }
}

export function evaluate(payload: GraphPayload, toggles: Toggles | null | undefined): WhatIfState {
  const ix = graphIndex(payload);
  const n = ix.ids.length;
  const m = ix.src.length;
  const detach = toggles?.detach ?? [];
  const freeze = toggles?.freeze ?? [];
  const cutSlot = new Uint8Array(m);
  const frozen = new Uint8Array(n);
  markCuts(ix, detach, cutSlot);
  markFrozen(ix, freeze, frozen);
  // Step 2: existence in the re-run forward, producers first.
  const exists = new Uint8Array(n);
  for (let t = 0; t < n; t++) {
    const v = ix.topo[t];
    if (ix.kind[v] === LEAF) {
      exists[v] = frozen[v] ? 0 : 1;
      continue;
    }
    for (let k = ix.inStart[v]; k < ix.inStart[v + 1]; k++) {
      const e = ix.inSlots[k];
      if (!cutSlot[e] && exists[ix.src[e]]) {
        exists[v] = 1;
        break;
      }
    }
  }
  // Step 3: from the existing roots, against the edges, through uncut slots.
  const runs = new Uint8Array(n);
  const stack = new Int32Array(n);
  let top = 0;
  for (let v = 0; v < n; v++) {
    if (ix.kind[v] === ROOT && exists[v]) {
      runs[v] = 1;
      stack[top++] = v;
    }
  }
  while (top > 0) {
    const v = stack[--top];
    for (let k = ix.inStart[v]; k < ix.inStart[v + 1]; k++) {
      const e = ix.inSlots[k];
      const u = ix.src[e];
      if (!runs[u] && exists[u] && !cutSlot[e]) {
        runs[u] = 1;
        stack[top++] = u;
      }
    }
  }
  const lost = new Uint8Array(n);
  const lostIds: string[] = [];
  const pruned: string[] = [];
  let running = 0;
  let total = 0;
  for (let v = 0; v < n; v++) {
    if (ix.kind[v] === ROOT) continue;
    total++;
    if (runs[v]) running++;
    else {
      pruned.push(ix.ids[v]);
      if (ix.kind[v] === LEAF) {
        lost[v] = 1;
        lostIds.push(ix.ids[v]);
      }
    }
  }
  return {
    answer: { lost_ids: lostIds, pruned, runs: running, total },
    cutSlot,
    frozen,
    runs,
    lost,
    empty: detach.length === 0 && freeze.length === 0,
  };
}

/** The page's answer to a set of toggles; Python's `AutogradGraph.what_if` gives the same. */
export function whatIf(payload: GraphPayload, toggles: Toggles): WhatIfAnswer {
  return evaluate(payload, toggles).answer;
}

// --- Toggle editing (pure: new objects, canonical order) -----------------------------------------

export function normalizeToggles(t: Partial<Toggles> | null | undefined): Toggles {
  const strings = (xs: unknown): string[] => (Array.isArray(xs) ? xs.filter((x): x is string => typeof x === "string") : []);
  return { detach: strings(t?.detach), freeze: strings(t?.freeze) };
}

export function sameToggles(a: Toggles, b: Toggles): boolean {
  const eq = (x: string[], y: string[]) => x.length === y.length && [...x].sort().join("\u0000") === [...y].sort().join("\u0000");
  return eq(a.detach, b.detach) && eq(a.freeze, b.freeze);
}

/** Add `item` to `list` if absent, else remove it. */
export function toggleItem(t: Toggles, list: keyof Toggles, item: string): Toggles {
  const current = t[list];
  const next = current.includes(item) ? current.filter((x) => x !== item) : [...current, item];
  return { ...t, [list]: next };
}

/** Toggle a group of tensors ("<node>:<out>") together: remove all when all are detached, else add
 *  the missing ones. */
export function toggleTensors(t: Toggles, tensors: readonly string[]): Toggles {
  const have = new Set(t.detach);
  const all = tensors.length > 0 && tensors.every((x) => have.has(x));
  if (all) {
    const drop = new Set(tensors);
    return { ...t, detach: t.detach.filter((x) => !drop.has(x)) };
  }
  return { ...t, detach: [...t.detach, ...tensors.filter((x) => !have.has(x))] };
}

/** The distinct tensors carried by some payload edges, as toggle strings. */
export function tensorsOfEdges(payload: GraphPayload, edgeIndices: readonly number[]): string[] {
  const seen = new Set<string>();
  for (const i of edgeIndices) {
    const e = payload.edges[i];
    if (e) seen.add(tensorKey(e.source, e.output_nr));
  }
  return [...seen];
}

/** The summary line: "3 of 148 leaves lose gradient: a, b, c…; backward runs 412 of 531 nodes". */
export function summaryText(payload: GraphPayload, state: WhatIfState, shown = 5): string {
  const ix = graphIndex(payload);
  let leaves = 0;
  for (let v = 0; v < ix.kind.length; v++) if (ix.kind[v] === LEAF) leaves++;
  const names = state.answer.lost_ids.slice(0, shown).map((id) => leafName(payload, ix.pos.get(id)!));
  const more = state.answer.lost_ids.length > shown ? "…" : "";
  const head =
    `${state.answer.lost_ids.length} of ${leaves} ${leaves === 1 ? "leaf loses" : "leaves lose"} gradient` +
    (names.length ? `: ${names.join(", ")}${more}` : "");
  return `${head}; backward runs ${state.answer.runs} of ${state.answer.total} nodes`;
}

export function leafName(payload: GraphPayload, i: number): string {
  const n = payload.nodes[i];
  return n.names.length ? n.names[0] : n.label || n.id;
}

/** What a click does in what-if mode (null: not a toggle): a leaf freezes, an op detaches its outputs,
 *  a box detaches its outputs (shift: freezes its parameters); roots, ghosts and stacks toggle nothing. */
export function clickToggles(t: Toggles, key: string, kind: string, shift: boolean): Toggles | null {
  if (kind === "root" || kind === "ghost" || kind === "folded") return null;
  const id = key.slice(2);
  if (kind === "leaf") return toggleItem(t, "freeze", id);
  if (kind === "op") return toggleItem(t, "detach", id);
  return toggleItem(t, shift ? "freeze" : "detach", CALL_PREFIX + id);
}

/** The answer as the `whatIf()` hook gives it (copies: a test may keep it). */
export function answerCopy(state: WhatIfState): WhatIfAnswer {
  const a = state.answer;
  return { lost_ids: [...a.lost_ids], pruned: [...a.pruned], runs: a.runs, total: a.total };
}

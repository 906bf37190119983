// Checkpointing what-if: saved-for-backward bytes before/after, recompute and lost gradients when some
// module calls are marked checkpointed. Pure (no DOM). The SAME rule as Python's
// gradviz_nb/analysis/checkpointing.py (`plan`, `reentrant_cuts`), read from the same table (the
// `checkpoint_table` trait); tests/unit/test_checkpointing_agreement.py proves the two equal.
// 1. Marks inside a marked call are ignored (the outer checkpoint packs the inner one).
// 2. A checkpointed call's ops save nothing; the checkpoint keeps the call's inputs and the RNG state,
//    held from just before its first op. Each storage is charged once, to its earliest holder.
// 3. Recompute: non-reentrant re-runs the call from its first to its last saving op (that last op's
//    FLOPs not counted when it saved no output); reentrant the whole call.
// 4. Reentrant calls, in forward order, none of whose inputs still requires grad once the earlier cuts
//    are made (no producer exists, or each is inside a cut call) cut their outputs (no grad_fn): the
//    what-if rule says which leaves lose gradient. Such a checkpoint keeps nothing and is never
//    recomputed; ops left with no input that requires grad are not recorded (their saves go too).
import type { CheckpointMode, CheckpointTable, GraphPayload } from "../../payload";
import { graphIndex, LEAF, ROOT, type GraphIndex } from "../../state/graphindex";

export type Marks = Record<string, CheckpointMode>;
export const MODES: readonly CheckpointMode[] = ["non_reentrant", "reentrant"];

export interface CheckpointAnswer {
  before: number;
  after: number;
  /** Call id -> activation bytes held inside it ("" is the whole graph). */
  perCallBefore: Record<string, number>;
  perCallAfter: Record<string, number>;
  /** Bytes the checkpoints themselves keep (inputs, RNG states). */
  kept: number;
  forwardOps: number;
  recomputedOps: number;
  forwardFlops: number;
  recomputedFlops: number;
  /** Leaf ids that lose their gradient, and the reentrant calls that cut them off. */
  lost: string[];
  cut: string[];
  /** Marks inside a marked call (no effect). */
  ignored: string[];
  /** Marks that take effect, in forward order. */
  outer: string[];
}

/** Whether a table is usable (the trait is {} for graphs without module calls). */
export function hasTable(t: Partial<CheckpointTable> | null | undefined): t is CheckpointTable {
  return !!t && Array.isArray(t.ops) && Array.isArray(t.storages) && Array.isArray(t.inputs) && typeof t.rng_bytes === "number";
}

export function normalizeMarks(m: unknown): Marks {
  const out: Marks = {};
  if (!m || typeof m !== "object") return out;
  for (const [k, v] of Object.entries(m as Record<string, unknown>)) if (MODES.includes(v as CheckpointMode)) out[k] = v as CheckpointMode;
  return out;
}

export function sameMarks(a: Marks, b: Marks): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => a[k] === b[k]);
}

/** A click cycles a box: off -> non_reentrant -> reentrant -> off. */
export function cycleMark(m: Marks, call: string): Marks {
  const next: Marks = { ...m };
  const now = m[call];
  if (now === undefined) next[call] = "non_reentrant";
  else if (now === "non_reentrant") next[call] = "reentrant";
  else delete next[call];
  return next;
}

function chain(parent: Map<string, string>, call: string): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  for (let c = call; c && !seen.has(c); c = parent.get(c) ?? "") {
    seen.add(c);
    out.push(c);
  }
  return out;
}

function charges(
  table: CheckpointTable,
  calls: readonly string[],
  parent: Map<string, string>,
  frames: [string, number, number[]][],
  dropped: (id: string) => boolean,
): Record<string, number> {
  const size = (s: number): number => (s < table.storages.length ? table.storages[s] : table.rng_bytes);
  const owner = new Map<number, [number, string]>();
  for (const op of table.ops) {
    if (dropped(op.id)) continue;
    for (const s of op.saved) {
      const o = owner.get(s);
      if (!o || op.seq < o[0]) owner.set(s, [op.seq, op.call]);
    }
  }
  for (const [call, seq, storages] of frames) {
    for (const s of storages) {
      const o = owner.get(s);
      if (!o || seq - 0.5 <= o[0]) owner.set(s, [seq - 0.5, call]);
    }
  }
  const totals: Record<string, number> = { "": 0 };
  for (const c of calls) totals[c] = 0;
  for (const [s, [, call]] of owner) {
    const b = size(s);
    totals[""] += b;
    for (const c of chain(parent, call)) totals[c] = (totals[c] ?? 0) + b;
  }
  return totals;
}

/** The answer for `marks` (unknown call ids and modes are ignored). */
export function evaluate(table: CheckpointTable, payload: GraphPayload, marks: Marks): CheckpointAnswer {
  const calls = payload.calls.map((c) => c.id);
  const parent = new Map(payload.calls.map((c) => [c.id, c.parent] as [string, string]));
  const chosen = calls.filter((c) => marks[c] === "non_reentrant" || marks[c] === "reentrant");
  const chosenSet = new Set(chosen);
  const outer = chosen.filter((c) => !chain(parent, c).slice(1).some((a) => chosenSet.has(a)));
  const outerSet = new Set(outer);
  const box = new Map<string, string>();
  for (const op of table.ops) box.set(op.id, chain(parent, op.call).find((a) => outerSet.has(a)) ?? "");
  const cut = reentrantCuts(payload, table, outer, marks);
  const cutSet = new Set(cut);
  const gone = new Set<string>();
  if (cut.length) {
    const ix = graphIndex(payload);
    const [exists] = existing(payload, cut);
    for (const op of table.ops) if (!exists[ix.pos.get(op.id) ?? -1]) gone.add(op.id);
  }
  const before = charges(table, calls, parent, [], () => false);
  const inputs = new Map(table.inputs.map((i) => [i.call, i] as const));
  const extra = table.storages.length;
  const frames: [string, number, number[]][] = [];
  outer.forEach((c, k) => {
    if (cutSet.has(c)) return; // no node holds its ctx: it keeps nothing
    let first = Infinity;
    for (const op of table.ops) if (box.get(op.id) === c && op.seq < first) first = op.seq;
    frames.push([c, first === Infinity ? 0 : first, [...(inputs.get(c)?.storages ?? []), extra + k]]);
  });
  const after = charges(table, calls, parent, frames, (id) => box.get(id) !== "" || gone.has(id));
  const keptSet = new Set(frames.flatMap(([, , s]) => s));
  let kept = 0;
  for (const s of keptSet) kept += s < extra ? table.storages[s] : table.rng_bytes;
  const [recomputedOps, recomputedFlops] = recomputed(table, box, outer.filter((c) => !cutSet.has(c)), marks);
  const lost = cut.length ? lostLeaves(payload, cut) : [];
  let forwardFlops = 0;
  for (const op of table.ops) forwardFlops += op.flops;
  return {
    before: before[""], after: after[""], perCallBefore: before, perCallAfter: after, kept,
    forwardOps: table.ops.length, recomputedOps, forwardFlops, recomputedFlops,
    lost, cut, ignored: chosen.filter((c) => !outerSet.has(c)), outer,
  };
}

function recomputed(table: CheckpointTable, box: Map<string, string>, outer: string[], marks: Marks): [number, number] {
  let ops = 0;
  let flops = 0;
  for (const c of outer) {
    const mine = table.ops.filter((op) => box.get(op.id) === c);
    if (marks[c] === "reentrant") {
      ops += mine.length;
      for (const op of mine) flops += op.flops;
      continue;
    }
    const packing = mine.filter((op) => op.packs).map((op) => op.seq);
    if (!packing.length) continue;
    const lo = Math.min(...packing);
    const hi = Math.max(...packing);
    for (const op of mine) {
      if (op.seq < lo || op.seq > hi) continue;
      ops++;
      if (!(op.seq === hi && !op.saves_output)) flops += op.flops;
    }
  }
  return [ops, flops];
}

/** Reentrant calls whose outputs would have no grad_fn (no input producer exists), in forward order. */
export function reentrantCuts(payload: GraphPayload, table: CheckpointTable, outer: string[], marks: Marks): string[] {
  const producers = new Map(table.inputs.map((i) => [i.call, i.producers] as const));
  const ix = graphIndex(payload);
  const cuts: string[] = [];
  for (const c of outer) {
    if (marks[c] !== "reentrant") continue;
    const [exists, boxOf] = existing(payload, cuts);
    const alive = (p: string): boolean => {
      const i = ix.pos.get(p);
      return i !== undefined && exists[i] === 1 && boxOf[i] < 0;
    };
    if (!(producers.get(c) ?? []).some(alive)) cuts.push(c);
  }
  return cuts;
}

/** Leaves backward no longer reaches once the cut calls' outputs have no grad_fn (the what-if rule for
 *  detaching those calls' outputs), in payload order. */
function lostLeaves(payload: GraphPayload, cuts: string[]): string[] {
  const ix = graphIndex(payload);
  const [exists, boxOf] = existing(payload, cuts);
  const n = ix.ids.length;
  const runs = new Uint8Array(n);
  const stack: number[] = [];
  for (let v = 0; v < n; v++) if (ix.kind[v] === ROOT && exists[v]) (runs[v] = 1), stack.push(v);
  while (stack.length) {
    const v = stack.pop()!;
    for (let k = ix.inStart[v]; k < ix.inStart[v + 1]; k++) {
      const u = ix.src[ix.inSlots[k]];
      const crossing = boxOf[u] >= 0 && boxOf[v] !== boxOf[u];
      if (!runs[u] && exists[u] && !crossing) (runs[u] = 1), stack.push(u);
    }
  }
  const lost: string[] = [];
  for (let v = 0; v < n; v++) if (ix.kind[v] === LEAF && !runs[v]) lost.push(ix.ids[v]);
  return lost;
}

/** Per node: 1 when the node is inside one of `calls` (nested calls count; leaves never). */
function members(ix: GraphIndex, calls: Set<string>): Uint8Array {
  const out = new Uint8Array(ix.ids.length);
  ix.payload.nodes.forEach((node, i) => {
    if (ix.kind[i] === LEAF) return;
    const seen = new Set<string>();
    for (let c = node.call; c && !seen.has(c); c = ix.callParent.get(c) ?? "") {
      seen.add(c);
      if (calls.has(c)) {
        out[i] = 1;
        return;
      }
    }
  });
  return out;
}

/** Per node: 1 when it still exists in a forward where the cut calls' outputs have no grad_fn; and the
 *  index of the cut call holding it (-1: none). */
function existing(payload: GraphPayload, cuts: string[]): [Uint8Array, Int32Array] {
  const ix = graphIndex(payload);
  const n = ix.ids.length;
  const boxOf = new Int32Array(n).fill(-1);
  cuts.forEach((c, k) => {
    const inside = members(ix, new Set([c]));
    for (let v = 0; v < n; v++) if (inside[v] && boxOf[v] < 0) boxOf[v] = k;
  });
  const exists = new Uint8Array(n);
  for (let t = 0; t < n; t++) {
    const v = ix.topo[t];
    if (ix.kind[v] === LEAF) {
      exists[v] = 1;
      continue;
    }
    for (let k = ix.inStart[v]; k < ix.inStart[v + 1]; k++) {
      const u = ix.src[ix.inSlots[k]];
      const crossing = boxOf[u] >= 0 && boxOf[v] !== boxOf[u];
      if (exists[u] && !crossing) {
        exists[v] = 1;
        break;
      }
    }
  }
  return [exists, boxOf];
}

/** "1.5 KiB", as Python's format_bytes. */
export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB"];
  let x = n;
  for (const unit of units) {
    if (Math.abs(x) < 1024 || unit === "GiB") return unit === "B" ? `${x.toFixed(0)} B` : `${x.toFixed(1)} ${unit}`;
    x /= 1024;
  }
  return `${n} B`;
}

/** The summary line the panel shows. */
export function summaryText(a: CheckpointAnswer): string {
  if (!a.outer.length) return "No box checkpointed: shift-click a module box (or click it in checkpoint mode).";
  const share = a.forwardFlops ? a.recomputedFlops / a.forwardFlops : a.forwardOps ? a.recomputedOps / a.forwardOps : 0;
  const basis = a.forwardFlops ? "estimated FLOPs" : "ops";
  let text =
    `${a.outer.length} checkpointed: saved for backward ${formatBytes(a.before)} → ${formatBytes(a.after)} ` +
    `(${formatBytes(a.before - a.after)} less; checkpoints keep ${formatBytes(a.kept)}); ` +
    `backward re-runs ${a.recomputedOps} of ${a.forwardOps} forward ops (${Math.round(share * 100)}% of forward ${basis})`;
  if (a.lost.length) text += `; ${a.lost.length} ${a.lost.length === 1 ? "leaf loses" : "leaves lose"} gradient (reentrant ${a.cut.join(", ")})`;
  return text;
}

/** Why a leaf loses its gradient, for its tooltip and the details panel. */
export function lostCause(a: CheckpointAnswer, payload: GraphPayload, leafId: string): string {
  if (!a.lost.includes(leafId)) return "";
  const types = new Map(payload.calls.map((c) => [c.id, c.type] as const));
  const named = a.cut.map((c) => `${c} (${types.get(c) ?? "module"})`).join(", ");
  return (
    `Loses its gradient: the reentrant checkpoint of ${named} has no tensor input that requires grad, so its ` +
    "output has no grad_fn. Fix: use_reentrant=False, or make the input require grad " +
    "(model.enable_input_require_grads())."
  );
}

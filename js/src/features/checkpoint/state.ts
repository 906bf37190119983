// Checkpointing what-if: saved-for-backward bytes before/after, recompute and lost gradients when some
// module calls are marked checkpointed. Pure (no DOM). The SAME rule as Python's
// gradviz_nb/analysis/checkpointing.py (`plan`, `reentrant_cuts`), read from the same table (the
// `checkpoint_table` trait); tests/unit/test_checkpointing_agreement.py proves the two equal.
// 1. A checkpointed call's ops save nothing; the outermost checkpoint keeps the call's inputs and the RNG
//    state, held from just before its first op. A checkpoint nested in another keeps only its RNG state,
//    and only when it runs with grad in forward (no reentrant one around it); its inputs are packed by the
//    one around it. A non-reentrant checkpoint that packed nothing is freed at once (keeps nothing). Each
//    storage is charged once, to its earliest holder.
// 2. Recompute: non-reentrant re-runs the call from its first to its last pack (its own ops' saves; a marked
//    child's inputs, saved at the child's start when non-reentrant, at its end when reentrant), that last
//    op's FLOPs not counted when it saved no output; reentrant the whole call. Then each marked child
//    backward reaches is recomputed again on its own: nested blocks run once more per level.
// 3. Marks inside a cut reentrant call (4.) have no effect.
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
  /** Marks inside a cut reentrant call (no effect). */
  ignored: string[];
  /** Outermost marks, in forward order. */
  outer: string[];
  /** Marks inside a marked call that take effect, in forward order. */
  nested: string[];
  /** Why part of the answer is not exact (empty: all of it is); Verify measures it. */
  inexact: string[];
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

type Op = CheckpointTable["ops"][number];
type Holder = [number, number, Op | null]; // position, start, own op

/** The marked calls as PyTorch nests them (Python's `_Marks`): innermost marked ancestor, marked children,
 *  the ops each holds (nested calls' included, in seq order), the innermost mark around each op. */
class Nesting {
  mode = new Map<string, CheckpointMode>();
  parent = new Map<string, string>();
  children = new Map<string, string[]>([["", []]]);
  ops = new Map<string, Op[]>();
  own = new Map<string, string>();

  constructor(table: CheckpointTable, calls: string[], callParent: Map<string, string>, marks: Marks,
              public cut: Set<string>, public gone: Set<string>) {
    for (const c of calls) if (marks[c] === "non_reentrant" || marks[c] === "reentrant") this.mode.set(c, marks[c]);
    for (const c of this.mode.keys()) {
      const p = chain(callParent, c).slice(1).find((a) => this.mode.has(a)) ?? "";
      this.parent.set(c, p);
      this.children.set(c, this.children.get(c) ?? []);
      this.ops.set(c, []);
    }
    for (const c of this.mode.keys()) {
      const p = this.parent.get(c)!;
      if (!this.children.has(p)) this.children.set(p, []);
      this.children.get(p)!.push(c);
    }
    for (const op of table.ops) {
      const around = chain(callParent, op.call).filter((a) => this.mode.has(a));
      this.own.set(op.id, around[0] ?? "");
      for (const a of around) this.ops.get(a)!.push(op);
    }
    for (const list of this.ops.values()) list.sort((x, y) => x.seq - y.seq);
  }

  private ancestors(c: string): string[] {
    const out: string[] = [];
    for (let a = this.parent.get(c) ?? ""; a; a = this.parent.get(a) ?? "") out.push(a);
    return out;
  }

  insideCut(c: string): boolean {
    return this.ancestors(c).some((a) => this.cut.has(a));
  }

  underReentrant(c: string): boolean {
    return this.ancestors(c).some((a) => this.mode.get(a) === "reentrant");
  }

  holders(c: string): Holder[] {
    const out: Holder[] = [];
    for (const op of this.ops.get(c)!) if (this.own.get(op.id) === c && op.packs && !this.gone.has(op.id)) out.push([op.seq, op.seq, op]);
    for (const d of this.children.get(c) ?? []) {
      const mine = this.ops.get(d)!;
      if (!mine.length || this.cut.has(d)) continue;
      const first = mine[0].seq;
      const last = mine[mine.length - 1].seq;
      out.push(this.mode.get(d) === "non_reentrant" ? [first - 0.5, first, null] : [last + 0.5, first, null]);
    }
    return out;
  }

  held(c: string): boolean {
    if (this.cut.has(c) || this.insideCut(c)) return false;
    return this.mode.get(c) === "reentrant" || this.holders(c).length > 0;
  }

  rerun(c: string, out: [number, number]): void {
    const mine = this.ops.get(c)!;
    if (this.mode.get(c) === "reentrant") {
      out[0] += mine.length;
      for (const op of mine) out[1] += op.flops;
    } else {
      const hs = this.holders(c);
      let lo = Infinity;
      let top = hs[0];
      for (const h of hs) {
        lo = Math.min(lo, h[1]);
        if (h[0] > top[0]) top = h;
      }
      const [hi, , last] = top;
      const skip = last !== null && !last.saves_output;
      for (const op of mine) {
        if (op.seq < lo || op.seq > hi) continue;
        out[0]++;
        if (!(skip && op === last)) out[1] += op.flops;
      }
    }
    for (const d of this.children.get(c) ?? []) if (this.held(d)) this.rerun(d, out);
  }
}

/** The answer for `marks` (unknown call ids and modes are ignored). */
export function evaluate(table: CheckpointTable, payload: GraphPayload, marks: Marks): CheckpointAnswer {
  const calls = payload.calls.map((c) => c.id);
  const parent = new Map(payload.calls.map((c) => [c.id, c.parent] as [string, string]));
  const chosen = calls.filter((c) => marks[c] === "non_reentrant" || marks[c] === "reentrant");
  const cut = reentrantCuts(payload, table, chosen, marks);
  const cutSet = new Set(cut);
  const gone = new Set<string>();
  if (cut.length) {
    const ix = graphIndex(payload);
    const [exists] = existing(payload, cut);
    for (const op of table.ops) if (!exists[ix.pos.get(op.id) ?? -1]) gone.add(op.id);
  }
  const m = new Nesting(table, calls, parent, marks, cutSet, gone);
  const outer = chosen.filter((c) => !m.parent.get(c));
  const nested = chosen.filter((c) => m.parent.get(c) && !m.insideCut(c));
  const ignored = chosen.filter((c) => m.parent.get(c) && m.insideCut(c));
  const before = charges(table, calls, parent, [], () => false);
  const inputs = new Map(table.inputs.map((i) => [i.call, i] as const));
  const extra = table.storages.length;
  const frames: [string, number, number[]][] = [];
  for (const c of chosen) {
    // alive after forward: each keeps an RNG state, an outermost one its inputs too
    if (!m.held(c) || m.underReentrant(c)) continue;
    const mine = m.parent.get(c) ? [] : inputs.get(c)?.storages ?? [];
    const ops = m.ops.get(c)!;
    frames.push([c, ops.length ? ops[0].seq : 0, [...mine, extra + frames.length]]);
  }
  const after = charges(table, calls, parent, frames, (id) => m.own.get(id) !== "" || gone.has(id));
  const keptSet = new Set(frames.flatMap(([, , s]) => s));
  let kept = 0;
  for (const s of keptSet) kept += s < extra ? table.storages[s] : table.rng_bytes;
  const redo: [number, number] = [0, 0];
  for (const c of outer) if (m.held(c)) m.rerun(c, redo);
  const lost = cut.length ? lostLeaves(payload, cut) : [];
  let forwardFlops = 0;
  for (const op of table.ops) forwardFlops += op.flops;
  return {
    before: before[""], after: after[""], perCallBefore: before, perCallAfter: after, kept,
    forwardOps: table.ops.length, recomputedOps: redo[0], forwardFlops, recomputedFlops: redo[1],
    lost, cut, ignored, outer, nested, inexact: inexact(table, m, parent),
  };
}

/** Checkpoints with no input that still requires grad (Python's `_inexact`): what they compute from such an
 *  input alone is in no graph, yet recompute runs it again and a non-reentrant one keeps the input. */
function inexact(table: CheckpointTable, m: Nesting, parent: Map<string, string>): string[] {
  const callOf = new Map(table.ops.map((op) => [op.id, op.call] as const));
  const producers = new Map(table.inputs.map((i) => [i.call, i.producers] as const));
  const alive = (p: string): boolean => {
    if (m.gone.has(p)) return false;
    const call = callOf.get(p);
    return call === undefined || !chain(parent, call).some((a) => m.cut.has(a));
  };
  const out: string[] = [];
  for (const c of m.mode.keys()) {
    if (m.held(c) && !(producers.get(c) ?? []).some(alive)) {
      out.push(`${c} has no input that requires grad, so what it computes from its inputs alone is in no graph`);
    }
  }
  return out;
}

/** Reentrant calls whose outputs would have no grad_fn (no input producer exists), in forward order. */
export function reentrantCuts(payload: GraphPayload, table: CheckpointTable, chosen: string[], marks: Marks): string[] {
  const producers = new Map(table.inputs.map((i) => [i.call, i.producers] as const));
  const ix = graphIndex(payload);
  const parent = new Map(payload.calls.map((c) => [c.id, c.parent] as [string, string]));
  const cuts: string[] = [];
  for (const c of chosen) {
    if (marks[c] !== "reentrant" || chain(parent, c).some((a) => cuts.includes(a))) continue;
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

/** "4.9 KiB less" or "4.9 KiB more" (checkpoints can keep more than the block saved), as Python's `difference`. */
export function difference(before: number, after: number): string {
  if (after === before) return "no change";
  return `${formatBytes(Math.abs(before - after))} ${after < before ? "less" : "more"}`;
}

/** The verdict a user came for, which leads the status line in the bad colour: the leaves the marks cut
 *  off ("12 leaves lose gradient (reentrant blocks.0 …)"), or "" when none. */
export function verdictText(a: CheckpointAnswer): string {
  if (!a.lost.length) return "";
  const cut = a.cut.length > 2 ? `${a.cut[0]} … ${a.cut[a.cut.length - 1]}` : a.cut.join(", ");
  return `${a.lost.length} ${a.lost.length === 1 ? "leaf loses" : "leaves lose"} gradient (reentrant ${cut})`;
}

/** The costs after the verdict: bytes saved for backward, what backward re-runs, what is not exact. */
export function summaryText(a: CheckpointAnswer): string {
  if (!a.outer.length) return "No box checkpointed: shift-click a module box (or click it in checkpoint mode).";
  const share = a.forwardFlops ? a.recomputedFlops / a.forwardFlops : a.forwardOps ? a.recomputedOps / a.forwardOps : 0;
  const basis = a.forwardFlops ? "estimated FLOPs" : "ops";
  const count = a.outer.length + a.nested.length;
  const inner = a.nested.length ? ` (${a.nested.length} nested)` : "";
  let text =
    `${count} checkpointed${inner}: saved for backward ${formatBytes(a.before)} → ${formatBytes(a.after)} ` +
    `(${difference(a.before, a.after)}; checkpoints keep ${formatBytes(a.kept)}); ` +
    `backward re-runs ${a.recomputedOps} of ${a.forwardOps} forward ops (${Math.round(share * 100)}% of forward ${basis})`;
  if (a.inexact.length) text += `; not exact: ${a.inexact.join("; ")} (Verify measures it)`;
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

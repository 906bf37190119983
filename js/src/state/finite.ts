// Numbers that JSON cannot carry arrive as "NaN", "Infinity", "-Infinity" (gradviz_nb/widgets/finite_json.py):
// turned back into numbers here, field by field of the contract (never a user's name that happens to read "NaN").
import type { GraphNode, RecordedGrad, Recording } from "../payload";

const NAMED: Record<string, number> = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };

export function num(x: unknown): number {
  return typeof x === "string" && x in NAMED ? NAMED[x] : (x as number);
}

export function nums(a: unknown[] | null | undefined): number[] | null {
  return Array.isArray(a) ? a.map(num) : null;
}

/** Node values (forward values of small tensors), in place. */
export function reviveNodes(nodes: GraphNode[]): void {
  for (const n of nodes) if (Array.isArray(n.value)) n.value = nums(n.value);
}

function grad(g: RecordedGrad | null): RecordedGrad | null {
  return g && { ...g, norm: num(g.norm), mean: num(g.mean), max_abs: num(g.max_abs), value: nums(g.value) };
}

/** Every number of a recording (gradient statistics, values), as a copy. */
export function reviveRecording(r: Recording): Recording {
  return {
    ...r,
    steps: r.steps.map((s) => ({
      ...s,
      received: s.received.map(grad),
      sent: s.sent.map(grad),
      leaf_before: grad(s.leaf_before),
      leaf_after: grad(s.leaf_after),
    })),
    values: Object.fromEntries(Object.entries(r.values).map(([k, v]) => [k, nums(v) ?? []])),
  };
}

export function reviveValues(values: Record<string, unknown>): Record<string, number> {
  return Object.fromEntries(Object.entries(values).map(([k, v]) => [k, num(v)]));
}

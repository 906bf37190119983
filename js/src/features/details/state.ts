// What the details panel shows of a leaf's values, read on demand (the trace computes no statistics):
// pure functions over the reply to a "values" request, so node tests can check them.
import type { GraphNode, TensorSummary, ValuesReplyBody } from "../../payload";
import { num } from "../../state/finite";
import { summaryRows } from "../../state/labels";

export const LOADING = "loading…";

/** Rows for a leaf: "loading…" while the request is out, the values and .grad once it came back, or
 *  why nothing was read. A small leaf's values are on the node already (shown by the core's rows), so
 *  only its .grad is added then. `answer` is the reply body, an error text, or undefined (waiting). */
export function valueRows(node: GraphNode, answer: ValuesReplyBody | string | undefined): [string, string][] {
  const known = Array.isArray(node.value) && node.value.length > 0;
  if (answer === undefined) return known ? [[".grad", LOADING]] : [["value", LOADING]];
  if (typeof answer === "string") return [[known ? ".grad" : "value", answer]];
  if (answer.missing) return [[known ? ".grad" : "value", answer.missing]];
  const rows: [string, string][] = [];
  if (!known) rows.push(...(answer.value ? summaryRows("value", revive(answer.value)) : [["value", "not readable"] as [string, string]]));
  rows.push(...(answer.grad ? summaryRows(".grad", revive(answer.grad)) : [[".grad", "None"] as [string, string]]));
  return rows;
}

/** Statistics that JSON could not carry ("Infinity") back to numbers. */
export function revive(s: TensorSummary): TensorSummary {
  const n = (x: number | null): number | null => (x === null ? null : num(x));
  return { ...s, norm: n(s.norm), mean: n(s.mean), std: n(s.std), min: n(s.min), max: n(s.max) };
}

/** True when the payload carries the summaries itself (a graph saved by an older version). */
export function carried(node: GraphNode): boolean {
  return node.stats !== undefined || node.grad !== undefined;
}

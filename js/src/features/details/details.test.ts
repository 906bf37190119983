// Values on demand (features/details/state.ts): "loading…" while the "values" request is out, then the
// value and .grad rows from the reply, or why nothing was read; a small leaf adds only its .grad.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { GraphNode, TensorSummary, ValuesReplyBody } from "../../payload";
import { carried, LOADING, valueRows } from "./state";

const leaf = (more: Partial<GraphNode>): GraphNode => ({
  id: "n1", kind: "leaf", op: "AccumulateGrad", label: "w", module: "", call: "", names: ["w"], shape: [4096],
  dtype: "float32", requires_grad: true, saved: [], value: null, ...more,
});
const summary: TensorSummary = { numel: 4096, head: [0.5, -0.25, 0, 1, 2, 3, 4, 5], norm: 12.5, mean: 0.01, std: 0.2,
  min: -1, max: 5, nonfinite: 0, skipped: "" };
const reply = (more: Partial<ValuesReplyBody>): ValuesReplyBody => ({ node: "n1", value: summary, grad: null, missing: "", ...more });

test("loading, then the value and .grad rows of a large leaf", () => {
  assert.deepEqual(valueRows(leaf({}), undefined), [["value", LOADING]]);
  const rows = valueRows(leaf({}), reply({ grad: { ...summary, norm: "Infinity" as unknown as number } }));
  const terms = rows.map(([k]) => k);
  assert.deepEqual(terms.slice(0, 4), ["value", "  norm", "  mean ± std", "  min … max"]);
  assert.equal(rows[0][1], "[0.5, -0.25, 0, 1, 2, 3, 4, 5, …] 4,096 values");
  const g = terms.indexOf(".grad");
  assert.equal(rows[g + 1][1], "inf"); // JSON's "Infinity" revived to a number, then formatted
  assert.deepEqual(valueRows(leaf({}), reply({})).at(-1), [".grad", "None"]);
});

test("a small leaf's values are on the node: only its .grad is asked for", () => {
  const small = leaf({ value: [1, 2, 3], shape: [3] });
  assert.deepEqual(valueRows(small, undefined), [[".grad", LOADING]]);
  assert.deepEqual(valueRows(small, reply({ grad: null })), [[".grad", "None"]]);
});

test("why nothing was read: gone, not in this export, an error", () => {
  assert.deepEqual(valueRows(leaf({}), reply({ value: null, missing: "not saved in this export" })),
    [["value", "not saved in this export"]]);
  assert.deepEqual(valueRows(leaf({}), "not read: boom"), [["value", "not read: boom"]]);
  assert.deepEqual(valueRows(leaf({}), reply({ value: null })).slice(0, 1), [["value", "not readable"]]);
});

test("a payload that carries summaries (an older saved graph) is not asked again", () => {
  assert.equal(carried(leaf({})), false);
  assert.equal(carried(leaf({ grad: null })), true);
  assert.equal(carried(leaf({ stats: summary })), true);
});

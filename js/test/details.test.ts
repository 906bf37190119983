// Values and gradients in the details panel (state/labels.ts nodeDetails): the value of a small tensor
// with its statistics, a large leaf's first values and statistics, and its .grad when traced.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { GraphNode, TensorSummary } from "../src/payload";
import { nodeDetails, summarizeValues } from "../src/state/labels";

const leaf = (more: Partial<GraphNode>): GraphNode => ({
  id: "n1", kind: "leaf", op: "AccumulateGrad", label: "w", module: "", call: "", names: ["w"], shape: [3],
  dtype: "float32", requires_grad: true, saved: [], value: null, ...more,
});

test("a small tensor: all its values known, statistics as torch computes them", () => {
  const s = summarizeValues([1, 2, 3, 4]);
  assert.equal(s.norm, Math.sqrt(30));
  assert.equal(s.mean, 2.5);
  assert.ok(Math.abs((s.std ?? 0) - 1.2909944487358056) < 1e-12); // torch.tensor([1., 2, 3, 4]).std()
  assert.deepEqual([s.min, s.max, s.nonfinite], [1, 4, 0]);
  const withNaN = summarizeValues([1, "NaN", 3]);
  assert.deepEqual([withNaN.mean, withNaN.nonfinite, withNaN.numel], [2, 1, 3]);
});

test("rows: value and stats, .grad when traced, None, and why stats are missing", () => {
  const grad: TensorSummary = { numel: 4096, head: [0.5, -0.25, 0, 1, 2, 3, 4, 5], norm: 12.5, mean: 0.01, std: 0.2, min: -1, max: 5, nonfinite: 0, skipped: "" };
  const all = nodeDetails(leaf({ value: [1, 2, 3], grad }));
  const valueAt = all.findIndex(([k]) => k === "value");
  assert.deepEqual(all.slice(valueAt, valueAt + 4), [
    ["value", "[1, 2, 3]"], ["  norm", "3.742"], ["  mean ± std", "2 ± 1"], ["  min … max", "1 … 3"]]);
  assert.equal(new Map(all).get(".grad (traced)"), "[0.5, -0.25, 0, 1, 2, 3, 4, 5, …] 4,096 values");
  const gradAt = all.findIndex(([k]) => k === ".grad (traced)");
  assert.deepEqual(all[gradAt + 1], ["  norm", "12.5"]);
  assert.deepEqual(all[gradAt + 2], ["  mean ± std", "0.01 ± 0.2"]);
  assert.equal(new Map(nodeDetails(leaf({ grad: null }))).get(".grad (traced)"), "None");
  const big: TensorSummary = { ...grad, numel: 38597376, norm: null, mean: null, std: null, min: null, max: null, nonfinite: null, skipped: "statistics skipped: over 1,048,576 elements" };
  const bigRows = new Map(nodeDetails(leaf({ stats: big })));
  assert.match(bigRows.get("value") ?? "", /38,597,376 values$/);
  assert.equal(bigRows.get("  stats"), "statistics skipped: over 1,048,576 elements");
  // An op with nothing known shows no value rows; a scalar shows one number and no statistics.
  assert.ok(!new Map(nodeDetails(leaf({ kind: "op", names: [] }))).has("value"));
  const scalar = nodeDetails(leaf({ value: [0.25], shape: [] }));
  assert.deepEqual(scalar.filter(([k]) => k.startsWith("  ")), []);
  assert.equal(new Map(scalar).get("value"), "0.25");
});

// Unit tests of the checkpointing rule (state.ts) on a hand-checked graph; agreement with Python's
// gradviz_nb/analysis/checkpointing.py on real traced models is tests/unit/test_checkpointing_agreement.py.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { CheckpointTable, GraphPayload } from "../../payload";
import { cycleMark, evaluate, formatBytes, lostCause, normalizeMarks, summaryText, verdictText } from "./state";

const node = (id: string, kind: "op" | "leaf" | "root", call: string, names: string[] = []) => ({
  id, kind, op: kind === "op" ? "MmBackward0" : "", label: id, module: call, call, names, shape: null, dtype: "float32",
  requires_grad: true, saved: [], value: null,
});
const edge = (source: string, target: string) => ({ source, target, output_nr: 0, input_nr: 0, shape: null });
const call = (id: string, parent = "") => ({ id, path: id, type: "Block", parent, index: 1, size: 1 });
// x (no grad) -> b0.inner: a (w0) -> b1: b (w1) -> loss. a saves x (100 B), b saves a's output (200 B).
const payload: GraphPayload = {
  version: 1,
  nodes: [node("w0", "leaf", "b0.inner", ["b0.inner.w"]), node("w1", "leaf", "b1", ["b1.w"]), node("a", "op", "b0.inner"), node("b", "op", "b1"), node("r", "root", "")],
  edges: [edge("w0", "a"), edge("a", "b"), edge("w1", "b"), edge("b", "r")],
  calls: [call("b0"), call("b0.inner", "b0"), call("b1")],
  ghosts: [],
  meta: { torch_version: "", captured: true, notes: [], num_nodes: 5, num_edges: 4 },
};
const table: CheckpointTable = {
  rng_bytes: 5056,
  storages: [100, 200],
  ops: [
    { id: "a", call: "b0.inner", seq: 1, flops: 10, saved: [0], packs: true, saves_output: false },
    { id: "b", call: "b1", seq: 2, flops: 20, saved: [1], packs: true, saves_output: true },
  ],
  inputs: [
    { call: "b0", storages: [], producers: [] },
    { call: "b0.inner", storages: [], producers: [] },
    { call: "b1", storages: [1], producers: ["a"] },
  ],
};

test("no marks: after equals before, nothing recomputed", () => {
  const a = evaluate(table, payload, {});
  assert.equal(a.before, 300);
  assert.equal(a.after, 300);
  assert.deepEqual([a.recomputedOps, a.recomputedFlops, a.lost.length], [0, 0, 0]);
  assert.equal(a.perCallBefore.b0, 100);
});

test("non-reentrant: the block's saves go, its input and the RNG state stay", () => {
  const a = evaluate(table, payload, { b1: "non_reentrant" });
  assert.equal(a.after, 100 + 200 + 5056); // storage 1 is now held by b1's checkpoint (its input)
  assert.equal(a.perCallAfter.b1, 200 + 5056);
  assert.equal(a.kept, 5256);
  assert.deepEqual([a.recomputedOps, a.recomputedFlops], [1, 20]);
  assert.deepEqual(a.lost, []);
});

test("reentrant with no input that requires grad: its leaves lose gradient, and the cut cascades", () => {
  const one = evaluate(table, payload, { b0: "reentrant" });
  assert.deepEqual(one.cut, ["b0"]);
  assert.deepEqual(one.lost, ["w0"]);
  assert.match(lostCause(one, payload, "w0"), /reentrant checkpoint of b0 \(Block\)/);
  // no node holds the cut checkpoint's ctx: it keeps nothing, and backward never re-runs it
  assert.deepEqual([one.after, one.kept, one.recomputedOps], [200, 0, 0]);
  const both = evaluate(table, payload, { b0: "reentrant", b1: "reentrant" });
  assert.deepEqual(both.cut, ["b0", "b1"]); // b1's only input comes out of the cut b0
  assert.deepEqual(both.lost, ["w0", "w1"]);
  const mixed = evaluate(table, payload, { b0: "non_reentrant", b1: "reentrant" });
  assert.deepEqual(mixed.lost, []); // non-reentrant b0 keeps a grad_fn on its output
});

test("a mark inside a marked box takes effect: its own RNG state, its own recompute", () => {
  const alone = evaluate(table, payload, { b0: "non_reentrant" });
  const a = evaluate(table, payload, { b0: "non_reentrant", "b0.inner": "non_reentrant" });
  assert.deepEqual([a.outer, a.nested, a.ignored], [["b0"], ["b0.inner"], []]);
  assert.equal(a.after - alone.after, 5056); // the inner checkpoint runs with grad: it keeps its RNG state
  assert.deepEqual([a.perCallAfter["b0.inner"], a.perCallAfter.b0], [5056, 2 * 5056]);
  // b0's last pack is the inner checkpoint's inputs, at its start: b0's recompute stops there, the inner re-runs a
  assert.deepEqual([alone.recomputedOps, a.recomputedOps], [1, 1]);
  // under a reentrant b0 the inner one runs under no_grad in forward: no RNG state kept, but it re-runs a again
  const r = evaluate(table, payload, { b1: "reentrant", b0: "reentrant", "b0.inner": "non_reentrant" });
  assert.deepEqual([r.cut, r.ignored], [["b0", "b1"], ["b0.inner"]]); // b0 has no input that requires grad: never re-run
  // a reentrant mark inside with no input that requires grad is cut: the non-reentrant b0 then packs nothing
  const cut = evaluate(table, payload, { b0: "non_reentrant", "b0.inner": "reentrant" });
  assert.deepEqual([cut.cut, cut.lost, cut.after, cut.kept], [["b0.inner"], ["w0"], 200, 0]);
});

test("nothing about a box with no input that requires grad is exact; the bar never shows a negative", () => {
  const a = evaluate(table, payload, { b0: "non_reentrant" });
  assert.equal(a.inexact.length, 1);
  assert.match(a.inexact[0], /^b0 has no input that requires grad/);
  assert.match(summaryText(a), /not exact: b0 has no input/);
  assert.deepEqual(evaluate(table, payload, { b1: "non_reentrant" }).inexact, []); // a's output requires grad
  const more = evaluate(table, payload, { b1: "non_reentrant" }); // keeps 5056 B of RNG for 200 B of saves
  assert.ok(more.after > more.before);
  assert.match(summaryText(more), /\(4\.9 KiB more;/);
  assert.doesNotMatch(summaryText(more), /-\d/);
});

test("marks cycle and normalise; text", () => {
  assert.deepEqual(cycleMark({}, "b0"), { b0: "non_reentrant" });
  assert.deepEqual(cycleMark({ b0: "non_reentrant" }, "b0"), { b0: "reentrant" });
  assert.deepEqual(cycleMark({ b0: "reentrant" }, "b0"), {});
  assert.deepEqual(normalizeMarks({ b0: "reentrant", b1: "maybe", b2: 3 }), { b0: "reentrant" });
  assert.equal(formatBytes(1536), "1.5 KiB");
  const trap = evaluate(table, payload, { b0: "reentrant" });
  assert.equal(verdictText(trap), "1 leaf loses gradient (reentrant b0)"); // the verdict, apart from the costs
  assert.doesNotMatch(summaryText(trap), /loses gradient/);
  assert.equal(verdictText(evaluate(table, payload, { b1: "non_reentrant" })), "");
});

// Unit tests of the what-if rule (js/src/state/whatif.ts). Agreement with Python's what_if on real
// traced models is tests/test_what_if_agreement.py; here: hand-checked cases, toggle editing, speed.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import type { GraphEdge, GraphNode, GraphPayload } from "../../payload";
import { evaluate, normalizeToggles, sameToggles, summaryText, tensorsOfEdges, toggleItem, toggleTensors, whatIf } from "./state";

const nested: GraphPayload = JSON.parse(
  readFileSync(new URL("../../tests/fixtures/nested_modules.json", import.meta.url), "utf8"),
);
const none = { detach: [], freeze: [] };
const sorted = (xs: string[]) => [...xs].sort((a, b) => Number(a) - Number(b));

test("no toggles: every leaf keeps its gradient, every op runs", () => {
  const a = whatIf(nested, none);
  assert.deepEqual(a, { lost_ids: [], pruned: [], runs: 13, total: 13 });
});

test("detaching the first block's output loses embed's path but not the tied head weight", () => {
  // 7 (relu of blocks.0) feeds 9: cutting it prunes 4, 5, 6, 7 and leaf 2 keeps its gradient through 8.
  const a = whatIf(nested, { detach: ["7:0"], freeze: [] });
  assert.deepEqual(sorted(a.pruned), ["4", "5", "6", "7"]);
  assert.deepEqual(a.lost_ids, []); // 1 is tied (reached via head), 2 and 3 are used again in call 2
  assert.equal(a.runs, 9);
  // The same cut by node id, and by the call's box.
  assert.deepEqual(whatIf(nested, { detach: ["7"], freeze: [] }), a);
  assert.deepEqual(whatIf(nested, { detach: ["call:blocks.0 (call 2)"], freeze: [] }).lost_ids.sort(), ["2", "3"]);
});

test("a call id that is also a module path means that call only (as Python's _call_members)", () => {
  // "blocks.0" is call 1's id (and both calls' path): only call 1's box outputs are cut, so the
  // second call (nodes 8-10) still runs; its parameters keep their gradient through it.
  const a = whatIf(nested, { detach: ["call:blocks.0"], freeze: [] });
  assert.deepEqual(a, whatIf(nested, { detach: ["7:0"], freeze: [] }));
  assert.ok(!a.pruned.includes("10"));
});

test("freeze: a leaf, and a call's parameters by path prefix; frozen leaves are lost", () => {
  const a = whatIf(nested, { detach: [], freeze: ["2"] });
  assert.deepEqual(a.lost_ids, ["2"]);
  assert.deepEqual(sorted(a.pruned), ["2", "5", "8"]);
  const b = whatIf(nested, { detach: [], freeze: ["call:blocks.0.fc (call 2)"] });
  assert.deepEqual(sorted(b.lost_ids), ["2", "3"]);
  // Unknown items are ignored (Python raises; the page just shows no effect).
  assert.deepEqual(whatIf(nested, { detach: ["nope", "nope:1", "call:nope"], freeze: ["call:nope", "4"] }).lost_ids, []);
});

test("cutting the loss loses everything; the summary names lost leaves", () => {
  const s = evaluate(nested, { detach: ["13"], freeze: [] });
  assert.equal(s.answer.lost_ids.length, 3);
  assert.equal(s.answer.runs, 0);
  assert.equal(
    summaryText(nested, s),
    "3 of 3 leaves lose gradient: embed.weight, blocks.0.fc.weight, blocks.0.fc.bias; backward runs 0 of 13 nodes",
  );
  assert.equal(s.cutSlot.reduce((n, x) => n + x, 0), 1);
});

test("toggle editing", () => {
  let t = normalizeToggles({ detach: ["a:0", 3 as unknown as string] });
  assert.deepEqual(t, { detach: ["a:0"], freeze: [] });
  t = toggleItem(t, "freeze", "n1");
  assert.deepEqual(t.freeze, ["n1"]);
  assert.deepEqual(toggleItem(t, "freeze", "n1").freeze, []);
  t = toggleTensors(t, ["a:0", "b:0"]); // not all present: add the missing one
  assert.deepEqual(t.detach, ["a:0", "b:0"]);
  t = toggleTensors(t, ["a:0", "b:0"]); // all present: remove them
  assert.deepEqual(t.detach, []);
  assert.ok(sameToggles({ detach: ["x", "y"], freeze: [] }, { detach: ["y", "x"], freeze: [] }));
  assert.deepEqual(tensorsOfEdges(nested, [0, 11]), ["1:0"]);
});

/** A chain of `blocks` blocks with residual adds, a parameter per two ops, and a two-output split. */
function synthetic(target: number): GraphPayload {
  const nodes: GraphNode[] = [];
  const edges: GraphEdge[] = [];
  const add = (kind: GraphNode["kind"], call: string, names: string[] = []): string => {
    const id = "n" + nodes.length;
    nodes.push({ id, kind, op: kind === "leaf" ? "AccumulateGrad" : "AddBackward0", label: id, module: call, call, names, shape: null, dtype: "", requires_grad: true, saved: [], value: null });
    return id;
  };
  const link = (s: string, t: string, out = 0) => edges.push({ source: s, target: t, output_nr: out, input_nr: 0, shape: null });
  const calls: GraphPayload["calls"] = [];
  let prev = add("leaf", "", ["x"]);
  for (let b = 0; nodes.length < target - 1; b++) {
    const call = `blocks.${b}`;
    calls.push({ id: call, path: call, type: "Block", parent: "", index: 1, size: 0 });
    const residual = prev;
    for (let i = 0; i < 12; i++) {
      const op = add("op", call);
      link(prev, op);
      if (i % 2 === 0) link(add("leaf", call, [`${call}.w${i}`]), op);
      if (i === 5) {
        const split = op;
        const other = add("op", call);
        link(split, other, 1);
        prev = other;
        continue;
      }
      prev = op;
    }
    const sum = add("op", call);
    link(prev, sum);
    link(residual, sum);
    prev = sum;
  }
  link(prev, add("root", ""));
  return { version: 1, nodes, edges, calls, ghosts: [], meta: { torch_version: "", captured: true, notes: [], num_nodes: nodes.length, num_edges: edges.length } };
}

test("10,000-node graph: one answer per toggle in well under a frame (time printed, not asserted)", () => {
  const g = synthetic(10_000);
  const t0 = performance.now();
  whatIf(g, none); // builds the per-payload index once
  const indexMs = performance.now() - t0;
  const toggles = [
    { detach: ["n5000:0"], freeze: [] },
    { detach: ["call:blocks.300"], freeze: ["n10"] },
    { detach: [], freeze: ["call:blocks.7", "call:blocks.500"] },
    { detach: ["n9000", "n100:1"], freeze: [] },
  ];
  const runs = 50;
  const t1 = performance.now();
  let lost = 0;
  for (let i = 0; i < runs; i++) lost += whatIf(g, toggles[i % toggles.length]).lost_ids.length;
  const perToggle = (performance.now() - t1) / runs;
  assert.ok(lost > 0);
  const a = whatIf(g, { detach: ["call:blocks.300"], freeze: [] });
  assert.ok(a.lost_ids.length > 0 && a.runs < a.total);
  console.log(`whatIf on ${g.nodes.length} nodes / ${g.edges.length} edges: index ${indexMs.toFixed(1)} ms once, ${perToggle.toFixed(2)} ms per toggle`);
});

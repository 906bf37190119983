// Unit tests of the stepper's and the overlay's pure state (js/src/state/stepper.ts, overlay.ts,
// numbers.ts) on real recordings (tests/fixtures/make_recordings.py).
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import type { GraphPayload, Recording } from "../../payload";
import { binOf, fmt, scaleOf, withUnit } from "../../state/numbers";
import { normalizeOverlay, overlayDecorations } from "../overlay/state";
import { indexCalls, representative, visibleGraph } from "../../state/quotient";
import { formatShape, plural } from "../../state/labels";
import {
  indexRecording,
  firstNonfinite,
  nextCursor,
  nodeLines,
  normalizeRecording,
  passCursor,
  pendingLeaves,
  stepDecorations,
  stepDetails,
  stepForNode,
  stepView,
} from "./state";

const load = (name: string): { graph: GraphPayload; recording: Recording } =>
  JSON.parse(readFileSync(new URL(`../../tests/fixtures/${name}`, import.meta.url), "utf8"));
const scalar = load("recording_scalar.json");
const mlp = load("recording_mlp.json");

test("normalizeRecording: {} is none", () => {
  assert.equal(normalizeRecording({}), null);
  assert.equal(normalizeRecording(null), null);
  assert.ok(normalizeRecording(scalar.recording));
});

test("scalar: a (used by Mul and Add) receives 2 contributions that sum to its gradient", () => {
  const ix = indexRecording(scalar.recording, scalar.graph);
  assert.equal(ix.passes, 1);
  // Engine order: Tanh, Add, Mul, a, b.
  assert.deepEqual(scalar.recording.steps.map((s) => s.node), ["n0", "n1", "n3", "n2", "n4"]);
  let v = stepView(ix, 1); // Add ran: one delivery into a (n2) so far
  assert.deepEqual(v.contributions.get("n2")!.got, 1);
  assert.deepEqual(v.contributions.get("n2")!.total, 2);
  assert.deepEqual(nodeLines(ix, v, "n2"), ["data 2 | grad Σ 4.77e-7 …", "1 of 2 contributions"]);
  assert.deepEqual(pendingLeaves(ix, v), ["a: 1 of 2 contributions received"]);
  v = stepView(ix, 3); // a ran: its .grad is the sum
  const aStep = scalar.recording.steps[3];
  const parts = v.contributions.get("n2")!.partial!;
  assert.ok(Math.abs(parts[0] - aStep.leaf_after!.value![0]) < 1e-12);
  assert.deepEqual(nodeLines(ix, v, "n2")[1], "2 of 2 contributions ✓");
  // Flows of the Mul step go to a (n2) and b (n4): forward edges n2 -> n3 and n4 -> n3.
  assert.deepEqual(stepView(ix, 2).flows.map((f) => [f.to, f.from]).sort(), [["n2", "n3"], ["n4", "n3"]]);
});

test("details: explain lines, received stats, sent per input, leaf before / after", () => {
  const ix = indexRecording(scalar.recording, scalar.graph);
  const mul = stepDetails(ix, stepView(ix, 2))!;
  assert.equal(mul.title, "Mul · MulBackward0");
  assert.ok(mul.explain.some((l) => l.startsWith("grad_a = grad_out * b")));
  assert.deepEqual(mul.sections.map((s) => s.heading), ["received gradient", "sent gradients"]);
  assert.deepEqual(mul.sections[1].rows.map((r) => r[0]), ["input 0 → a", "input 1 → b"]);
  const a = stepDetails(ix, stepView(ix, 3))!;
  assert.ok(a.sections[0].heading.includes("sum of 2 contributions"));
  assert.deepEqual(a.sections.find((s) => s.heading === "leaf .grad")!.rows[0], [".grad before", "None"]);
  assert.equal(stepDetails(ix, stepView(ix, -1)), null);
});

test("cursor moves: clamp, jump to a node's step in the current pass, pass starts", () => {
  const ix = indexRecording(mlp.recording, mlp.graph);
  assert.equal(ix.passes, 2);
  assert.equal(nextCursor(ix, -1, -1), -1);
  assert.equal(nextCursor(ix, 19, 1), 19);
  assert.equal(passCursor(ix, 1), 10);
  assert.equal(stepForNode(ix, 3, "n7"), 9);
  assert.equal(stepForNode(ix, 12, "n7"), 19); // same node, pass 2
  assert.equal(stepForNode(ix, 12, "root0"), null);
});

test("pass 2 accumulates into .grad: leaf shows pass 1's .grad until it runs, then the sum", () => {
  const ix = indexRecording(mlp.recording, mlp.graph);
  const bias = "n9"; // 2.bias, runs at step 2 (pass 1) and 12 (pass 2)
  const p1 = mlp.recording.steps[2].leaf_after!.value![0];
  assert.equal(nodeLines(ix, stepView(ix, 11), bias)[0], `data ${fmt(mlp.graph.nodes.find((n) => n.id === bias)!.value![0])} | grad ${fmt(p1)}`);
  const after = mlp.recording.steps[12].leaf_after!.value![0];
  assert.ok(Math.abs(after - 2 * p1) < 1e-5);
  assert.ok(nodeLines(ix, stepView(ix, 12), bias)[0].endsWith(`grad ${fmt(after)}`));
  const d = stepDetails(ix, stepView(ix, 12))!;
  assert.equal(d.subtitle, "pass 2 of 2 · step 3 of 10");
  assert.ok(d.sections.find((s) => s.heading === "leaf .grad")!.rows.some((r) => r[1].includes("accumulated")));
});

test("canvas decorations: running node, flow edges, log colour bins, boxes by module", () => {
  const ix = indexRecording(mlp.recording, mlp.graph);
  const index = indexCalls(mlp.graph);
  const nodes = new Map(mlp.graph.nodes.map((n) => [n.id, n]));
  // All collapsed: Linear "2" holds n1 (Addmm), n2 (T), n3, n9.
  const collapsed = new Set<string>();
  const g = visibleGraph(mlp.graph, collapsed, index);
  const rep = (id: string) => representative(nodes.get(id)!, index, collapsed);
  const v = stepView(ix, 1); // Addmm of layer 2 runs and sends to n9, n4 (ReLU box), n2 (inside)
  const deco = stepDecorations(ix, v, g, rep);
  assert.ok(deco.classes.get("c:2")!.includes("st-run"));
  assert.ok([...deco.classes.values()].some((c) => c.includes("st-flow")));
  assert.ok(deco.classes.get("n:n0")!.startsWith("heat-"));
  // By module: from the MseLoss step, the next one is the first step inside box "2"; then the
  // first step outside it (ReLU, step 5).
  assert.equal(nextCursor(ix, 0, 1, rep), 1);
  assert.equal(nextCursor(ix, 1, 1, rep), 5);
  assert.equal(nextCursor(ix, 5, -1, rep), 1);
  assert.equal(nextCursor(ix, 3, -1, rep), 1);
});

test("numbers, scales, overlay decorations, labels", () => {
  assert.equal(fmt(2), "2");
  assert.equal(fmt(4.768e-7), "4.77e-7");
  assert.equal(fmt(-1.36811), "-1.368");
  assert.equal(withUnit(1536, "B"), "1.5 KiB");
  const s = scaleOf([1e-6, 1e-3, 1, 0, NaN], "log")!;
  assert.deepEqual([s.min, s.max], [1e-6, 1]);
  assert.equal(binOf(1e-6, s), 0);
  assert.equal(binOf(1, s), 8);
  assert.equal(binOf(0, s), -1);
  assert.equal(normalizeOverlay({}), null);
  const ov = normalizeOverlay({
    title: "gradient L2 norm",
    values: { n7: 0.5, n8: 0.001, "call:2": 3 },
    marks: { n3: "no-grad", n8: "nan" },
    scale: "log",
    encoding: "color",
    unit: "",
  })!;
  const index = indexCalls(mlp.graph);
  const d = overlayDecorations(mlp.graph, visibleGraph(mlp.graph, new Set(), index), ov, index);
  assert.equal(d.values.get("c:0"), 0.5); // max of visible members
  assert.equal(d.values.get("c:2"), 3); // its own "call:" key
  assert.equal(d.marks.get("c:0"), "nan"); // worst mark inside
  assert.equal(d.marks.get("c:2"), "no-grad");
  assert.ok(d.classes.get("c:2")!.includes("heat-8"));
  assert.equal(plural(16, "closed box"), "16 closed boxes");
  assert.equal(plural(1, "node"), "1 node");
  assert.equal(formatShape([]), "scalar");
});

test("firstNonfinite: where a NaN/Inf gradient is born in backward, else -1", () => {
  const steps = normalizeRecording(mlp.recording)!.steps;
  assert.equal(firstNonfinite(steps), -1); // a healthy recording
  const nan = { shape: [1], norm: NaN, mean: NaN, max_abs: NaN, nonfinite: true, value: null };
  const born = steps.findIndex((s, i) => i > 0 && s.sent.some((g) => g !== null)); // a step that sends something
  const poisoned = steps.map((s, i) => (i === born ? { ...s, sent: s.sent.map((g) => (g ? nan : g)) } : i > born ? { ...s, received: s.received.map((g) => (g ? nan : g)), sent: s.sent.map((g) => (g ? nan : g)) } : s));
  assert.equal(firstNonfinite(poisoned), born); // born there, carried downstream after it
  const fromRoot = steps.map((s) => ({ ...s, received: s.received.map((g) => (g ? nan : g)) }));
  assert.equal(firstNonfinite(fromRoot), 0); // NaN seeded at the root: the first step that touched it
});

test("Run to texts format numbers as Python's '.4g' does, ties to even included", async () => {
  const { g4 } = await import("./breakpoints");
  // Python: [format(x, ".4g") for x in these]
  const cases: [number, string][] = [
    [1234.5, "1234"], [1235.5, "1236"], [12345.6, "1.235e+04"], [0.00012345, "0.0001234"], [1.5e-5, "1.5e-05"],
    [1e6, "1e+06"], [3, "3"], [0.1, "0.1"], [2.5e-10, "2.5e-10"], [99999, "1e+05"], [-0.5, "-0.5"], [12.125, "12.12"],
    [NaN, "nan"], [Infinity, "inf"],
  ];
  for (const [x, want] of cases) assert.equal(g4(x), want, String(x));
});

test("Run to: the box and leaf rules read the last pick, and a rule without one says how to choose it", async () => {
  const { initialStepper, runToStop, panelFacts, pickOf, clickPick } = await import("./control");
  const m = initialStepper();
  m.rix = indexRecording(normalizeRecording(mlp.recording)!, mlp.graph);
  const callIds = new Set(mlp.graph.calls.map((c) => c.id));
  const none = runToStop(m, "module", mlp.graph.calls, 0)!;
  assert.equal(none.index, -1);
  assert.match(none.text, /never hit: click a module box first/);
  m.sv = stepView(m.rix, -1);
  assert.deepEqual(panelFacts(m, true)!.targets, { box: "", leaf: "" });
  const call = mlp.graph.calls[0];
  // a click on a box (open or closed) chooses it
  m.pick = clickPick("c:" + call.id, "collapsed", m.rix.nodes, callIds);
  assert.deepEqual(panelFacts(m, true)!.targets, { box: call.id, leaf: "" });
  const box = runToStop(m, "module", mlp.graph.calls, 0)!;
  const inBox = m.rix.steps.findIndex((s) => mlp.graph.nodes.find((n) => n.id === s.node)?.call.startsWith(call.id));
  assert.equal(box.index, inBox);
  assert.ok(box.last >= box.index);
  assert.ok(panelFacts(m, true)!.runText.startsWith(`Run to the first step in box ${call.id}: `));
  // then a click on a leaf: the leaf rule reads it, and the box rule no longer applies (no stale choice)
  const leaf = mlp.graph.nodes.find((n) => n.kind === "leaf" && m.rix!.steps.some((s) => s.node === n.id))!;
  m.pick = clickPick("n:" + leaf.id, "leaf", m.rix.nodes, callIds);
  assert.equal(m.pick!.kind, "leaf");
  assert.equal(panelFacts(m, true)!.targets.box, "");
  assert.equal(runToStop(m, "module", mlp.graph.calls, 0)!.index, -1);
  const got = runToStop(m, "leaf", mlp.graph.calls, 0)!;
  // its first delivery: the first step that sent a gradient into the leaf's buffer, before AccumulateGrad ran
  const delivered = m.rix.steps.findIndex((s) => (s.deliveries ?? []).some((d) => d[0] === leaf.id));
  assert.ok(delivered >= 0 && delivered < m.rix.steps.findIndex((s) => s.node === leaf.id));
  assert.equal(got.index, delivered);
  assert.deepEqual(got.each, m.rix.steps.flatMap((s, i) => ((s.deliveries ?? []).some((d) => d[0] === leaf.id) ? [i] : [])));
  m.sv = stepView(m.rix, got.index);
  const text = panelFacts(m, true)!.runText;
  assert.ok(text.includes(got.text));
  // an op node chosen: neither rule applies
  const op = mlp.graph.nodes.find((n) => n.kind === "op")!;
  m.pick = pickOf(op.id, m.rix.nodes, callIds);
  assert.deepEqual(panelFacts(m, true)!.targets, { box: "", leaf: "" });
  assert.match(runToStop(m, "leaf", mlp.graph.calls, 0)!.text, /click a leaf/);
  const bad = runToStop(m, "above", mlp.graph.calls, NaN)!;
  assert.match(bad.text, /finite threshold/);
  // no rule's internal name in what the user reads
  for (const rule of ["nonfinite", "zero", "above", "jump", "module", "leaf"] as const) {
    runToStop(m, rule, mlp.graph.calls, 1);
    assert.doesNotMatch(panelFacts(m, true)!.runText, /^Run to (nonfinite|zero|above|jump|module|leaf)\b/, rule);
  }
});

test("one value formatter: the stepper's panel shows 8 values and the count, as details do", async () => {
  const { fmtVec } = await import("../../state/numbers");
  const { formatHead, summarizeValues } = await import("../../state/labels");
  const values = Array.from({ length: 64 }, (_, i) => i / 4);
  const want = "[0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, …] 64 values";
  assert.equal(fmtVec(values), want);
  assert.equal(formatHead(summarizeValues(values)), want);
  assert.equal(fmtVec([1, 2, 3]), "[1, 2, 3]");
  assert.equal(fmtVec([0.5]), "0.5");
  // a [64, 1] gradient received and sent: the step's panel never lists all 64
  const ix = indexRecording(normalizeRecording(structuredClone(mlp.recording))!, mlp.graph);
  const k = ix.steps.findIndex((s) => (s.received ?? []).some((g) => g?.value));
  const g = ix.steps[k].received!.find((r) => r?.value)!;
  g.value = values;
  g.shape = [64, 1];
  const rows = stepDetails(ix, stepView(ix, k))!.sections.flatMap((s) => s.rows);
  const shown = rows.find(([key]) => key === "value")![1];
  assert.equal(shown, want);
  assert.ok(rows.every(([, v]) => (v.match(/,/g) ?? []).length <= 8), JSON.stringify(rows));
});

// Trait validation (core/validate.ts) and the guarded model (core/guard.ts): the clean value or the
// problems with their paths, and a malformed change refused while the last good value stays.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { guardModel } from "../src/core/guard";
import type { Model } from "../src/core/context";
import { describe, EMPTY_GRAPH, MAX_PROBLEMS, problemText, validateTrait, type Problem } from "../src/core/validate";
import type { GraphPayload, Traits } from "../src/payload";

const here = path.dirname(fileURLToPath(import.meta.url));
const fixture = (name: string): unknown => JSON.parse(readFileSync(path.join(here, "..", "..", "tests", "fixtures", name), "utf8"));
const nested = (): Record<string, unknown> & GraphPayload => fixture("nested_modules.json") as Record<string, unknown> & GraphPayload;
const mlp = (): { graph: GraphPayload; recording: Traits["recording"] } => fixture("recording_mlp.json") as { graph: GraphPayload; recording: Traits["recording"] };

function problems<K extends keyof Traits>(name: K, value: unknown): Problem[] {
  const r = validateTrait(name, value);
  assert.equal(r.ok, false, `${name} should be refused: ${describe(value)}`);
  return r.ok ? [] : r.problems;
}

function clean<K extends keyof Traits>(name: K, value: unknown): Traits[K] {
  const r = validateTrait(name, value);
  assert.ok(r.ok, r.ok ? "" : r.problems.map(problemText).join("\n"));
  return r.value;
}

test("the fixtures are valid; optional fields get their defaults, other keys are kept", () => {
  const g = clean("graph_data", nested());
  assert.deepEqual(g.ghosts, []);
  assert.equal(g.nodes[0].value, null);
  assert.equal(g.nodes.length, 14);
  const m = mlp();
  assert.equal(clean("graph_data", m.graph).nodes.length, 11);
  const r = clean("recording", m.recording);
  assert.equal(r.steps?.length, 20);
  // Saved tensors carry extra fields (bytes, storage): kept.
  assert.equal((clean("graph_data", m.graph).nodes[0].saved[0] as unknown as { bytes: number }).bytes, 8);
  for (const f of ["whatif_ghosts.json", "xss_module.json"]) clean("graph_data", fixture(f));
  for (const c of Object.values(fixture("diff_lora.json") as Record<string, { graph: unknown; diff: unknown }>)) {
    clean("graph_data", c.graph);
    clean("diff", c.diff);
  }
});

test("absent traits and the Python defaults are their defaults", () => {
  assert.equal(clean("graph_data", undefined), EMPTY_GRAPH);
  assert.equal(clean("graph_data", {}), EMPTY_GRAPH);
  assert.equal(clean("graph_data", null), EMPTY_GRAPH);
  assert.deepEqual(clean("expanded", undefined), []);
  assert.equal(clean("selected", null), "");
  assert.equal(clean("height", undefined), 600);
  assert.equal(clean("step", undefined), -1);
  assert.deepEqual(clean("toggles", { detach: [], freeze: [] }), { detach: [], freeze: [] });
  assert.deepEqual(clean("toggles", {}), { detach: [], freeze: [] });
  for (const t of ["overlay", "recording", "diff", "verified"] as const) assert.deepEqual(clean(t, {}), {});
  assert.deepEqual(clean("findings", []), []);
});

test("wrong types: the path, what was expected and what was found", () => {
  assert.deepEqual(problems("graph_data", [1, 2]), [
    { path: "graph_data", expected: "a graph payload object (nodes, edges, calls, meta), or {} for none", found: "a list of 2 items" },
  ]);
  const g = nested();
  (g as Record<string, unknown>).nodes = "many";
  assert.deepEqual(problems("graph_data", g).map((p) => [p.path, p.found]), [["graph_data.nodes", 'the string "many"']]);
  const noId = nested();
  delete (noId.nodes[3] as Partial<GraphPayload["nodes"][number]>).id;
  assert.deepEqual(problemText(problems("graph_data", noId)[0]), "graph_data.nodes[3].id: expected a value (the field is required), found nothing (the key is missing)");
  assert.equal(problemText(problems("expanded", "blocks.0")[0]), 'expanded: expected a list of strings, found the string "blocks.0"');
  assert.equal(problems("expanded", ["a", 3])[0].path, "expanded[1]");
  for (const h of [-5, 0, NaN, Infinity, "600", "NaN", true]) assert.equal(problems("height", h)[0].path, "height");
  assert.equal(clean("height", 350.5), 350.5);
  assert.equal(problems("step", 1.5)[0].path, "step");
  assert.equal(problems("step", -2)[0].path, "step");
  assert.equal(problems("selected", 5)[0].found, "the number 5");
  assert.equal(problems("can_verify", "yes")[0].expected, "true or false");
  assert.equal(problems("toggles", { detach: "n1:0" })[0].path, "toggles.detach");
  assert.equal(problems("toggles", { freeze: [null] })[0].path, "toggles.freeze[0]");
});

test("graph references: unknown nodes, unknown or cyclic parents, duplicate ids", () => {
  const g = nested();
  g.edges[1].target = "<img src=x onerror=alert(1)>";
  const [edge] = problems("graph_data", g);
  assert.equal(edge.path, "graph_data.edges[1].target");
  assert.equal(edge.found, 'the string "<img src=x onerror=alert(1)>"');
  const cyc = nested();
  const [a, , c] = cyc.calls;
  a.parent = c.id;
  c.parent = a.id;
  const loop = problems("graph_data", cyc).find((p) => p.found.startsWith("a cycle"));
  assert.ok(loop, "the cycle is reported");
  assert.match(loop.found, /a cycle "embed" → .* → "embed"|a cycle ".*" → ".*" → ".*"/);
  const dup = nested();
  dup.nodes[2].id = dup.nodes[1].id;
  // The second "n2" is refused; edges from the node that lost its id name an unknown node now.
  assert.deepEqual(problems("graph_data", dup).map((p) => p.path).slice(0, 2), ["graph_data.nodes[2].id", "graph_data.edges[4].source"]);
  const parent = nested();
  parent.calls[1].parent = "nowhere";
  assert.deepEqual(problems("graph_data", parent).map((p) => p.path), ["graph_data.calls[1].parent"]);
  const member = nested();
  member.nodes[0].call = "nowhere";
  assert.deepEqual(problems("graph_data", member).map((p) => p.path), ["graph_data.nodes[0].call"]);
  const kind = nested();
  (kind.nodes[0] as { kind: string }).kind = "tensor";
  assert.equal(problems("graph_data", kind)[0].expected, 'one of "op", "leaf", "root"');
});

test("lazy wiring: lengths and indices in range", () => {
  const lazy = {
    version: 1, nodes: [], edges: [], calls: [], ghosts: [], meta: {},
    wiring: { ids: ["a", "b"], kinds: "ol", calls: [-1, -1], ops: ["X"], op: [0, 0], labels: ["a", "b"], names: {}, edges: [0, 1, 0, 0] },
    loaded: [""],
  };
  clean("graph_data", lazy);
  const bad = { ...lazy, wiring: { ...lazy.wiring, edges: [0, 7, 0, 0], kinds: "ox", op: [0, 4] } };
  assert.deepEqual(problems("graph_data", bad).map((p) => p.path).sort(), ["graph_data.wiring.edges[1]", "graph_data.wiring.kinds", "graph_data.wiring.op[1]"]);
});

test("overlay, recording, diff, findings, verified", () => {
  assert.equal(problems("overlay", { values: [1, 2] })[0].path, "overlay.values");
  assert.equal(problems("overlay", { values: { n1: "lots" } })[0].path, 'overlay.values["n1"]');
  assert.equal(problems("overlay", { marks: { n1: "bad" } })[0].expected, 'one of "no-grad", "nan", "flag"');
  assert.deepEqual(clean("overlay", { values: { n1: "NaN", n2: "Infinity", n3: 2 }, scale: "linear" }).values, { n1: "NaN", n2: "Infinity", n3: 2 });
  // revived non-finite numbers are values, not errors: a NaN or Inf gradient is what the stepper is for
  assert.deepEqual(clean("overlay", { values: { n1: NaN, n2: -Infinity }, scale: "linear" }).values, { n1: NaN, n2: -Infinity });
  const rec = mlp().recording;
  (rec.steps?.[0] as { received: unknown }).received = "lots";
  assert.equal(problems("recording", rec)[0].path, "recording.steps[0].received");
  const huge = mlp().recording;
  (huge.steps?.[0] as { pass: number }).pass = 1e12;
  assert.equal(problems("recording", huge)[0].path, "recording.steps[0].pass");
  assert.equal(problems("recording", { passes: 1e9, steps: mlp().recording.steps })[0].path, "recording.passes");
  assert.equal(problems("diff", { status: { n1: "gone" } })[0].path, 'diff.status["n1"]');
  assert.equal(problems("diff", { memory_total: [1] })[0].path, "diff.memory_total");
  assert.equal(problems("findings", { kind: "x" })[0].path, "findings");
  assert.equal(problems("findings", [{ kind: 3 }])[0].path, "findings[0].kind");
  assert.deepEqual(clean("findings", [{ kind: "k", node: "n1" }])[0], { kind: "k", target: "", message: "", evidence: "", fix: "", step: -1, node: "n1", scope: "" });
  assert.equal(problems("verified", { agree: "yes" })[0].path, "verified.agree");
});

test("describe: short, whatever the size or depth", () => {
  let deep: unknown = 1;
  for (let i = 0; i < 100_000; i++) deep = [deep];
  assert.equal(describe(deep), "a list of 1 item");
  assert.equal(describe("x".repeat(10_000)).length < 60, true);
  assert.equal(describe({ a: 1, b: 2, c: 3, d: 4, e: 5 }), "an object with keys a, b, c, d, …");
  assert.equal(describe(undefined), "nothing (the key is missing)");
  assert.equal(problems("expanded", deep)[0].path, "expanded[0]");
  assert.equal(problems("graph_data", { nodes: deep, edges: [] })[0].path, "graph_data.nodes[0]");
});

test("problems are capped, the total still counted; a 50,000-node graph is checked", () => {
  const ids = Array.from({ length: 200 }, (_, i) => i);
  const r = validateTrait("expanded", ids);
  assert.ok(!r.ok);
  if (!r.ok) assert.deepEqual([r.problems.length, r.total], [MAX_PROBLEMS, 200]);
  const n = 50_000;
  const big = {
    version: 1,
    nodes: Array.from({ length: n }, (_, i) => ({ id: `n${i}`, kind: "op", op: "AddBackward0", label: "Add", module: "", call: "", names: [], shape: [8, 64], dtype: "float32", requires_grad: true, saved: [] })),
    edges: Array.from({ length: n - 1 }, (_, i) => ({ source: `n${i + 1}`, target: `n${i}`, output_nr: 0, input_nr: 0, shape: [8, 64] })),
    calls: [],
    meta: {},
  };
  const t = performance.now();
  clean("graph_data", big);
  const ms = performance.now() - t;
  assert.ok(ms < 20_000, `${ms} ms`); // about 0.5 s on an idle machine; a loose bound for busy ones
});

/** A fake anywidget model: get/set/on/off with synchronous change events, as the page kit's. */
function fakeModel(state: Record<string, unknown>): Model & { count(): number } {
  const listeners = new Map<string, ((...a: unknown[]) => void)[]>();
  const model = {
    get: (k: string) => state[k],
    set(k: string, v: unknown) {
      state[k] = v;
      for (const f of listeners.get(`change:${k}`) ?? []) f();
    },
    on(ev: string, f: (...a: unknown[]) => void) {
      listeners.set(ev, [...(listeners.get(ev) ?? []), f]);
    },
    off(ev: string, f: (...a: unknown[]) => void) {
      listeners.set(ev, (listeners.get(ev) ?? []).filter((g) => g !== f));
    },
    save_changes() {},
    send() {},
    widget_manager: {},
    count: () => [...listeners.values()].reduce((s, l) => s + l.length, 0),
  };
  return model as unknown as Model & { count(): number };
}

test("guard: a malformed change is refused and reported, the last good value stays, a good one is accepted", () => {
  const raw = fakeModel({ expanded: ["blocks.0"], height: "tall" });
  const log: string[] = [];
  const guard = guardModel(raw, {
    refused: (t, ps) => log.push(`refused ${t}: ${ps.map((p) => p.path).join(",")}`),
    accepted: (t) => log.push(`accepted ${t}`),
    crashed: (where, err) => log.push(`crashed ${where}: ${String(err)}`),
  });
  guard.checkAll();
  assert.ok(log.includes("refused height: height"));
  assert.equal(guard.model.get("height"), 600); // the default: nothing good yet
  const seen: unknown[] = [];
  const onExpanded = (): void => {
    seen.push(guard.model.get("expanded"));
  };
  guard.model.on("change:expanded", onExpanded);
  raw.set("expanded", "blocks.1" as unknown as string[]);
  assert.deepEqual(seen, []); // refused: the listener never ran
  assert.deepEqual(guard.model.get("expanded"), ["blocks.0"]);
  assert.equal(log.at(-1), "refused expanded: expanded");
  raw.set("expanded", ["blocks.1"]);
  assert.deepEqual(seen, [["blocks.1"]]);
  assert.equal(log.at(-1), "accepted expanded");
  // A listener that throws is reported, and the others still run.
  guard.model.on("change:expanded", () => {
    throw new Error("boom");
  });
  guard.model.on("change:expanded", onExpanded);
  raw.set("expanded", ["blocks.2"]);
  assert.equal(seen.length, 3);
  assert.ok(log.some((l) => l.startsWith("crashed the new expanded: Error: boom")));
  // A rejected promise is reported too.
  guard.run("a click", () => Promise.reject(new Error("late")))();
  return new Promise<void>((resolve) =>
    setTimeout(() => {
      assert.ok(log.some((l) => l === "crashed a click: Error: late"));
      guard.model.off("change:expanded", onExpanded);
      guard.model.off();
      assert.equal(raw.count(), 0);
      resolve();
    }, 0),
  );
});

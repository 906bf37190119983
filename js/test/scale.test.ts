// Unit tests of the issue-7 state code: lazy payloads (inflate / applyChunks / loader), folded stacks
// in the quotient, search ranking and the view cap. Run with `npm test`.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { Chunk, GraphEdge, GraphNode, GraphPayload, PageReply, ModuleCall } from "../src/payload";
import { drawnItems, neighbourhood, refusalText, VIEW_CAP, viewCap } from "../src/state/cap";
import { expand } from "../src/state/expansion";
import { foldedCalls, foldedGroups, foldKey, indexFolds, unfoldForExpanded } from "../src/state/fold";
import { foldedLabel } from "../src/state/labels";
import { applyChunks, inflate, missingCalls } from "../src/state/lazy";
import { ChunkLoader } from "../src/state/loader";
import { callKey, indexCalls, nodeKey, representative, visibleGraph } from "../src/state/quotient";
import { overlayDecorations } from "../src/features/overlay/state";
import { search } from "../src/features/search/state";
import { graphIndex } from "../src/state/graphindex";

/** A model like GPT-2: x -> embed -> blocks.0..blocks.{n-1} (each: ln, fc box with a weight) -> ln_f -> loss. */
function stacked(n: number): GraphPayload {
  const nodes: GraphNode[] = [];
  const edges: GraphEdge[] = [];
  const calls: ModuleCall[] = [];
  const node = (id: string, kind: GraphNode["kind"], op: string, call: string, names: string[] = []): string => {
    nodes.push({ id, kind, op, label: op.replace(/Backward\d$/, ""), module: call.split(" ")[0], call, names, shape: [2, 4], dtype: "float32", requires_grad: true, saved: [], value: null });
    return id;
  };
  const edge = (s: string, t: string, input = 0): void => {
    edges.push({ source: s, target: t, output_nr: 0, input_nr: input, shape: [2, 4] });
  };
  const call = (id: string, type: string, parent = ""): void => {
    calls.push({ id, path: id, type, parent, index: 1, size: 0 });
  };
  call("embed", "Embedding");
  let x = node("x", "leaf", "AccumulateGrad", "", ["x"]);
  const ew = node("embed.w", "leaf", "AccumulateGrad", "embed", ["embed.weight"]);
  const e = node("embed.op", "op", "EmbeddingBackward0", "embed");
  edge(ew, e);
  edge(x, e, 1);
  x = e;
  for (let b = 0; b < n; b++) {
    const blk = `blocks.${b}`;
    call(blk, "Block");
    call(`${blk}.fc`, "Linear", blk);
    const ln = node(`${blk}.ln`, "op", "NativeLayerNormBackward0", blk);
    const w = node(`${blk}.fc.w`, "leaf", "AccumulateGrad", `${blk}.fc`, [`${blk}.fc.weight`]);
    const mm = node(`${blk}.fc.mm`, "op", "MmBackward0", `${blk}.fc`);
    const add = node(`${blk}.add`, "op", "AddBackward0", blk);
    edge(x, ln);
    edge(ln, mm);
    edge(w, mm, 1);
    edge(mm, add);
    edge(x, add, 1);
    x = add;
  }
  call("ln_f", "LayerNorm");
  const lnf = node("ln_f.op", "op", "NativeLayerNormBackward0", "ln_f");
  const lnw = node("ln_f.w", "leaf", "AccumulateGrad", "ln_f", ["ln_f.weight"]);
  edge(x, lnf);
  edge(lnw, lnf, 1);
  const loss = node("loss", "op", "MeanBackward0", "");
  edge(lnf, loss);
  const root = node("root", "root", "", "");
  edge(loss, root);
  const index = indexCalls({ calls, nodes } as GraphPayload);
  for (const c of calls) c.size = index.size.get(c.id) ?? 0;
  const blocks = calls.filter((c) => c.type === "Block").map((c) => c.id);
  return {
    version: 1,
    nodes,
    edges,
    calls,
    ghosts: [],
    meta: { torch_version: "test", captured: true, notes: [], num_nodes: nodes.length, num_edges: edges.length },
    folds: n >= 3 ? [{ id: "fold:blocks.0", calls: blocks, parent: "", type: "Block" }] : [],
  };
}

/** The lazy skeleton Python's LazyGraph.skeleton would send (records of `loaded` calls only). */
function toLazy(eager: GraphPayload, loaded: string[] = [""]): { skeleton: GraphPayload; chunks: Map<string, Chunk> } {
  const pos = new Map(eager.nodes.map((n, i) => [n.id, i]));
  const callPos = new Map(eager.calls.map((c, i) => [c.id, i]));
  const ops: string[] = [];
  const wiring = {
    ids: eager.nodes.map((n) => n.id),
    kinds: eager.nodes.map((n) => n.kind[0]).join(""),
    calls: eager.nodes.map((n) => (n.call ? callPos.get(n.call)! : -1)),
    ops,
    op: eager.nodes.map((n) => (ops.includes(n.op) ? ops.indexOf(n.op) : ops.push(n.op) - 1)),
    labels: eager.nodes.map((n) => n.label),
    names: Object.fromEntries(eager.nodes.flatMap((n, i) => (n.kind === "leaf" ? [[String(i), n.names]] : []))),
    edges: eager.edges.flatMap((e) => [pos.get(e.source)!, pos.get(e.target)!, e.output_nr, e.input_nr]),
  };
  const chunks = new Map<string, Chunk>();
  for (const c of ["", ...eager.calls.map((c) => c.id)]) {
    const members = eager.nodes.filter((n) => n.call === c);
    const ids = new Set(members.map((n) => n.id));
    const edgeShapes: [number, number[] | null][] = [];
    eager.edges.forEach((e, k) => {
      if (ids.has(e.source) || ids.has(e.target)) edgeShapes.push([k, e.shape]);
    });
    chunks.set(c, { call: c, nodes: structuredClone(members), edge_shapes: edgeShapes });
  }
  const skeleton: GraphPayload = {
    ...eager,
    nodes: structuredClone(eager.nodes.filter((n) => loaded.includes(n.call))),
    edges: [],
    loaded,
    wiring,
  };
  return { skeleton, chunks };
}

const keysOf = (g: ReturnType<typeof visibleGraph>) => g.items.map((i) => i.key).join(" ");

test("inflate: full-length nodes and edges, placeholders where nothing is loaded", () => {
  const eager = stacked(4);
  const { skeleton } = toLazy(eager);
  const { payload, lazy } = inflate(skeleton);
  assert.ok(lazy);
  assert.equal(payload.nodes.length, eager.nodes.length);
  assert.equal(payload.edges.length, eager.edges.length);
  assert.deepEqual(payload.nodes.find((n) => n.id === "x"), eager.nodes.find((n) => n.id === "x")); // loaded: as sent
  const mm = payload.nodes.find((n) => n.id === "blocks.2.fc.mm")!;
  assert.deepEqual(
    { kind: mm.kind, op: mm.op, label: mm.label, call: mm.call, module: mm.module, shape: mm.shape, saved: mm.saved },
    { kind: "op", op: "MmBackward0", label: "Mm", call: "blocks.2.fc", module: "blocks.2.fc", shape: null, saved: [] },
  );
  assert.deepEqual(payload.nodes.find((n) => n.id === "blocks.1.fc.w")!.names, ["blocks.1.fc.weight"]);
  assert.deepEqual(payload.edges.map((e) => [e.source, e.target, e.input_nr]), eager.edges.map((e) => [e.source, e.target, e.input_nr]));
  assert.deepEqual(missingCalls(lazy, ["blocks.0", "blocks.0.fc"]), ["blocks.0", "blocks.0.fc"]);
  assert.equal(inflate(eager).lazy, null);
});

test("applyChunks: records and shapes patched in place; the lazy view equals the eager one", () => {
  const eager = stacked(4);
  const { skeleton, chunks } = toLazy(eager);
  const { payload, lazy } = inflate(skeleton);
  const nodesArray = payload.nodes;
  const wi = graphIndex(payload);
  const open = expand(new Set(), "blocks.1.fc", indexCalls(payload));
  applyChunks(payload, lazy!, missingCalls(lazy, open).map((c) => chunks.get(c)!));
  assert.equal(payload.nodes, nodesArray); // same objects: caches keyed on them stay valid
  assert.equal(graphIndex(payload), wi);
  assert.deepEqual(missingCalls(lazy, open), []);
  const lazyView = visibleGraph(payload, open);
  const eagerView = visibleGraph(eager, open);
  assert.equal(keysOf(lazyView), keysOf(eagerView));
  const drawn = (g: typeof lazyView) => g.items.map((i) => (i.type === "node" ? i.node : i.key));
  assert.deepEqual(drawn(lazyView), drawn(eagerView));
  assert.deepEqual(lazyView.edges, eagerView.edges);
  const slot = payload.edges.findIndex((e) => e.target === "blocks.1.fc.mm");
  assert.deepEqual(payload.edges[slot].shape, [2, 4]);
});

test("loader: one request in flight, later asks merged; stale replies applied; timeout names the calls", async () => {
  const sent: string[][] = [];
  const loaded = new Set<string>([""]);
  const timers: (() => void)[] = [];
  const loader = new ChunkLoader({
    send: (calls) => sent.push(calls) - 1, // the request id is its index in `sent`
    apply: (chunks) => chunks.forEach((c) => loaded.add(c.call)),
    isLoaded: (c) => loaded.has(c),
    setTimer: (f) => timers.push(f),
    clearTimer: () => undefined,
  });
  const chunk = (call: string): Chunk => ({ call, nodes: [], edge_shapes: [] });
  const ok = (id: number, chunks: Chunk[]): PageReply => ({ id, kind: "reply", ok: true, body: { chunks } });
  const a = loader.load(["blocks.0", ""]);
  const b = loader.load(["blocks.1"]);
  const c = loader.load(["blocks.2"]);
  assert.deepEqual(sent, [["blocks.0"]]);
  loader.receive(ok(0, [chunk("blocks.0")]));
  await a;
  assert.deepEqual(sent[1], ["blocks.1", "blocks.2"]);
  loader.receive(ok(1, [chunk("blocks.1"), chunk("blocks.2")]));
  await Promise.all([b, c]);
  const d = loader.load(["blocks.3"]);
  timers[timers.length - 1]();
  await assert.rejects(d, /Could not load the contents of blocks\.3: no kernel is answering \(re-run the cell\)/);
  const e = loader.load(["blocks.4"]);
  loader.receive(ok(2, [chunk("blocks.3")])); // late answer to the timed-out request: applied, e still waits
  assert.ok(loaded.has("blocks.3"));
  loader.receive({ id: 3, kind: "reply", ok: false, error: "load: unknown module call ids \"blocks.4\"." });
  await assert.rejects(e, /blocks\.4: load: unknown module call ids/);
  assert.equal(await loader.load(["blocks.0"]), undefined); // already loaded: no request
  assert.equal(sent.length, 4);
});

test("folds: a group is one stacked item; edges go through it; expanding a member unfolds it", () => {
  const p = stacked(4);
  const index = indexCalls(p);
  const folds = indexFolds(p, index);
  const folded = foldedCalls(folds, new Set(), new Set());
  assert.deepEqual(foldedGroups(folded), ["fold:blocks.0"]);
  const g = visibleGraph(p, new Set(), index, folded);
  const stack = g.items.find((i) => i.key === foldKey("fold:blocks.0"))!;
  assert.equal(stack.type, "folded");
  assert.ok(stack.type === "folded" && stack.size === 16 && stack.parent === null);
  assert.ok(!g.items.some((i) => i.key.startsWith("c:blocks")));
  assert.deepEqual(g.counts, { nodes: 3, collapsed: 2, expanded: 0, folded: 1, edges: g.edges.length });
  const pair = (s: string, t: string) => g.edges.find((e) => e.source === s && e.target === t);
  assert.equal(pair(callKey("embed"), foldKey("fold:blocks.0"))?.count, 2); // into blocks.0's ln and add
  assert.equal(pair(foldKey("fold:blocks.0"), callKey("ln_f"))?.count, 1);
  assert.ok(!g.edges.some((e) => e.source === e.target));
  assert.equal(representative(p.nodes.find((n) => n.id === "blocks.3.fc.mm")!, index, new Set(), folded), foldKey("fold:blocks.0"));
  assert.equal(stack.type === "folded" && foldedLabel(stack.calls, stack.size), "▸ 4 × Block\nblocks.0 … blocks.3\n16 nodes");
  // Unfolded by the user: the blocks are boxes again.
  const open = visibleGraph(p, new Set(), index, foldedCalls(folds, new Set(), new Set(["fold:blocks.0"])));
  assert.equal(open.counts.collapsed, 6);
  assert.equal(open.counts.folded, 0);
  // Expanding a call inside a block (from anywhere) unfolds its group.
  const expanded = expand(new Set(), "blocks.2.fc", index);
  assert.deepEqual([...unfoldForExpanded(new Set(), expanded, folds, index)], ["fold:blocks.0"]);
  assert.equal(foldedCalls(folds, expanded, new Set()).size, 0);
});

test("search: case-insensitive over labels, ops, names, call ids; exact, then leaves, boxes, ops", () => {
  const p = stacked(4);
  const keys = (q: string) => search(p, q).hits.map((h) => h.key);
  assert.deepEqual(keys("LN_F"), [callKey("ln_f"), nodeKey("ln_f.w")]); // exact call id first, then the leaf
  const fc = keys("fc");
  assert.deepEqual(fc.slice(0, 4), ["n:blocks.0.fc.w", "n:blocks.1.fc.w", "n:blocks.2.fc.w", "n:blocks.3.fc.w"]);
  assert.deepEqual(fc.slice(4), ["c:blocks.0.fc", "c:blocks.1.fc", "c:blocks.2.fc", "c:blocks.3.fc"]);
  assert.deepEqual(keys("mm").slice(0, 1), [nodeKey("blocks.0.fc.mm")]);
  assert.equal(keys("Mm")[0], "n:blocks.0.fc.mm"); // exact label "Mm"
  const many = search(stacked(40), "block", 50);
  assert.equal(many.hits.length, 50);
  assert.ok(many.total > 50);
  assert.deepEqual(search(p, "   "), { hits: [], total: 0 });
});

test("cap: would-be counts from the quotient, refusal text, neighbourhood of a match", () => {
  const p = stacked(40);
  const index = indexCalls(p);
  const all = visibleGraph(p, new Set(index.order));
  assert.equal(drawnItems(all.counts), p.nodes.length + index.order.length);
  assert.equal(refusalText("Opening blocks.3", 123_412), "Opening blocks.3 would draw 123,412 items (limit 100,000): collapse other boxes or use search.");
  assert.equal(VIEW_CAP, 100_000);
  const g = globalThis as { gradvizViewCap?: number };
  g.gradvizViewCap = 3000; // what page tests of the refusal set
  assert.equal(viewCap(), 3000);
  assert.equal(refusalText("Opening blocks.3", 3412), "Opening blocks.3 would draw 3,412 items (limit 3,000): collapse other boxes or use search.");
  g.gradvizViewCap = -1;
  assert.equal(viewCap(), VIEW_CAP);
  delete g.gradvizViewCap;
  const around = neighbourhood(p, "blocks.5.fc.mm", 2, 500);
  const ids = around.items.map((i) => i.key).sort();
  // 1 hop: ln, w, add; 2 hops: x (the block input: blocks.4.add), blocks.6.ln, blocks.6.add.
  assert.deepEqual(ids, ["blocks.4.add", "blocks.5.add", "blocks.5.fc.mm", "blocks.5.fc.w", "blocks.5.ln", "blocks.6.add", "blocks.6.ln"].map(nodeKey).sort());
  assert.ok(around.edges.every((e) => ids.includes(e.source) && ids.includes(e.target)));
  assert.equal(neighbourhood(p, "blocks.5.fc.mm", 2, 3).items.length, 3);
});

test("50,000 nodes: search and quotient stay fast (times printed, not asserted)", () => {
  const p = stacked(12_500); // 4 nodes per block
  const index = indexCalls(p);
  const folds = indexFolds(p, index);
  let t = performance.now();
  search(p, "fc.w"); // builds the index once
  const build = performance.now() - t;
  t = performance.now();
  const r = search(p, "blocks.123");
  const query = performance.now() - t;
  t = performance.now();
  const g = visibleGraph(p, new Set(), index, foldedCalls(folds, new Set(), new Set()));
  const folded = performance.now() - t;
  t = performance.now();
  const u = visibleGraph(p, new Set(), index, foldedCalls(folds, new Set(), new Set(["fold:blocks.0"])));
  const unfolded = performance.now() - t;
  console.log(
    `${p.nodes.length} nodes: search index ${build.toFixed(0)} ms, query ${query.toFixed(1)} ms (${r.total} hits); ` +
      `quotient folded ${folded.toFixed(0)} ms (${drawnItems(g.counts)} items), unfolded ${unfolded.toFixed(0)} ms (${drawnItems(u.counts)} items)`,
  );
  assert.equal(g.counts.folded, 1);
  assert.ok(drawnItems(u.counts) > 3000);
});

test("overlay and stepper: a folded stack shows the largest value inside it and stands for its nodes", () => {
  const p = stacked(4);
  const index = indexCalls(p);
  const folded = foldedCalls(indexFolds(p, index), new Set(), new Set());
  const g = visibleGraph(p, new Set(), index, folded);
  const overlay = { title: "norm", values: { "blocks.1.fc.mm": 5, "blocks.3.add": 2, x: 1 }, scale: "linear" as const, encoding: "color" as const, marks: { "blocks.2.ln": "nan" as const }, unit: "" };
  const deco = overlayDecorations(p, g, overlay, index);
  const key = foldKey("fold:blocks.0");
  assert.equal(deco.values.get(key), 5);
  assert.equal(deco.marks.get(key), "nan");
  assert.equal(deco.classes.get(key)!.split(" ").filter((c) => c === "ov-nan").length, 1);
});

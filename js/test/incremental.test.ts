// Incremental re-layout geometry: region detection, shifts, ancestor box refits, route shifting.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import ELK from "elkjs/lib/elk.bundled.js";
import type { GraphEdge, GraphNode, GraphPayload, ModuleCall } from "../src/payload";
import { collapse, expand } from "../src/state/expansion";
import { indexCalls, visibleGraph, type VisibleGraph } from "../src/state/quotient";
import { fromElk, toElk, type Layout, type Size } from "../src/view/elkgraph";
import { findRegion, offsetFor, overlappingPairs, placeRegion, rectOf, type Rect, type Snapshot } from "../src/view/incremental";

/** A GPT-like payload: embed, `blocks` blocks (attn + mlp sub-calls, residual adds), head. */
function transformer(blocks: number): GraphPayload {
  const nodes: GraphNode[] = [];
  const edges: GraphEdge[] = [];
  const calls: ModuleCall[] = [];
  const node = (call: string, label: string, kind: GraphNode["kind"] = "op"): string => {
    const id = String(nodes.length);
    nodes.push({ id, kind, op: label, label, module: call, call, names: [], shape: null, dtype: "f32", requires_grad: true, saved: [], value: null });
    return id;
  };
  const edge = (s: string, t: string): void => {
    edges.push({ source: s, target: t, output_nr: 0, input_nr: 0, shape: null });
  };
  const call = (id: string, parent: string, type: string): void => {
    calls.push({ id, path: id, type, parent, index: 1, size: 0 });
  };
  // Autograd direction: from the loss (root) towards the leaves.
  const root = node("", "loss", "root");
  call("head", "", "Linear");
  let x = node("head", "MmBackward");
  edge(root, x);
  edge(x, node("head", "weight", "leaf"));
  for (let b = blocks - 1; b >= 0; b--) {
    const B = `blocks.${b}`;
    call(B, "", "Block");
    call(`${B}.mlp`, B, "MLP");
    call(`${B}.attn`, B, "Attention");
    const add2 = node(B, "AddBackward");
    edge(x, add2);
    const fc2 = node(`${B}.mlp`, "AddmmBackward");
    const gelu = node(`${B}.mlp`, "GeluBackward");
    const fc1 = node(`${B}.mlp`, "AddmmBackward");
    edge(add2, fc2);
    edge(fc2, gelu);
    edge(gelu, fc1);
    edge(fc2, node(`${B}.mlp`, "w2", "leaf"));
    edge(fc1, node(`${B}.mlp`, "w1", "leaf"));
    const add1 = node(B, "AddBackward");
    edge(fc1, add1);
    edge(add2, add1);
    const proj = node(`${B}.attn`, "MmBackward");
    const sm = node(`${B}.attn`, "SoftmaxBackward");
    const q = node(`${B}.attn`, "MmBackward");
    const k = node(`${B}.attn`, "MmBackward");
    edge(add1, proj);
    edge(proj, sm);
    edge(sm, q);
    edge(sm, k);
    const xin = node(B, "ViewBackward");
    edge(q, xin);
    edge(k, xin);
    edge(add1, xin);
    x = xin;
  }
  call("embed", "", "Embedding");
  edge(x, node("embed", "EmbeddingBackward"));
  edge(String(nodes.length - 1), node("embed", "wte", "leaf"));
  // Parents before children, as payloads have them.
  calls.sort((a, b) => a.id.split(".").length - b.id.split(".").length);
  return {
    version: 1,
    nodes,
    edges,
    calls,
    ghosts: [],
    meta: { torch_version: "", captured: true, notes: [], num_nodes: nodes.length, num_edges: edges.length },
  };
}

const sizeFor = (g: VisibleGraph): Map<string, Size> =>
  new Map(g.items.filter((i) => i.type !== "expanded").map((i) => [i.key, { width: 60 + (i.key.length % 5) * 10, height: 30 }]));

const elk = new ELK();
async function layout(g: VisibleGraph, sizes: Map<string, Size>): Promise<Layout> {
  return fromElk(await elk.layout(toElk(g, (k) => sizes.get(k)!)));
}

const payload = transformer(6);
const index = indexCalls(payload);

async function step(prevExpanded: Set<string>, nextExpanded: Set<string>) {
  const g0 = visibleGraph(payload, prevExpanded, index);
  const s0 = sizeFor(g0);
  const prev: Snapshot = { graph: g0, layout: await layout(g0, s0), sizes: s0 };
  const g1 = visibleGraph(payload, nextExpanded, index);
  const s1 = sizeFor(g1);
  const region = findRegion(g0, g1, { prev: s0, next: s1 });
  assert.ok(region, "one region");
  const sub = await layout(region.sub, s1);
  const placed = placeRegion(prev, g1, region, sub, s1);
  assert.ok(placed, "placed without overlaps");
  return { g0, g1, prev, region, sub, placed, s1 };
}

function leafRects(g: VisibleGraph, l: Layout, sizes: Map<string, Size>): Array<[string, Rect]> {
  return g.items.filter((i) => i.type !== "expanded").map((i) => [i.key, rectOf(i.key, l, sizes)!]);
}

function assertConsistent(g: VisibleGraph, l: Layout, sizes: Map<string, Size>): void {
  const leaves = leafRects(g, l, sizes);
  const pairs = overlappingPairs(leaves.map(([, r]) => r));
  assert.deepEqual(pairs.map(([a, b]) => [leaves[a][0], leaves[b][0]]), [], "no two leaves overlap");
  for (const item of g.items) {
    if (!item.parent) continue;
    const inner = rectOf(item.key, l, sizes)!;
    const box = rectOf(item.parent, l, sizes)!;
    assert.ok(inner[0] >= box[0] - 0.5 && inner[1] >= box[1] - 0.5 && inner[2] <= box[2] + 0.5 && inner[3] <= box[3] + 0.5, `${item.key} inside ${item.parent}`);
  }
}

test("offsetFor: above stays, beside moves sideways, below moves down", () => {
  const o: Rect = [0, 100, 100, 200];
  const n: Rect = [-50, 100, 150, 400];
  assert.deepEqual(offsetFor([0, 0, 100, 90], o, n), { x: 0, y: 0 });
  assert.deepEqual(offsetFor([-200, 120, -100, 150], o, n), { x: -50, y: 0 });
  assert.deepEqual(offsetFor([200, 50, 300, 150], o, n), { x: 50, y: 0 });
  assert.deepEqual(offsetFor([20, 210, 80, 240], o, n), { x: 0, y: 200 });
  assert.deepEqual(offsetFor([-300, 210, -200, 240], o, n), { x: -50, y: 200 });
});

test("overlappingPairs finds touching-free overlaps only", () => {
  const pairs = overlappingPairs([
    [0, 0, 10, 10],
    [10, 0, 20, 10],
    [5, 5, 15, 15],
    [1000, 1000, 1010, 1010],
  ]);
  assert.deepEqual(pairs.map((p) => p.join()).sort(), ["0,2", "1,2"]);
});

test("region of an expand: the collapsed box and its new members, under the root", () => {
  const g0 = visibleGraph(payload, new Set(), index);
  const g1 = visibleGraph(payload, new Set(["blocks.2"]), index);
  const region = findRegion(g0, g1, { prev: sizeFor(g0), next: sizeFor(g1) })!;
  assert.equal(region.parent, null);
  assert.deepEqual(region.removedTops, ["c:blocks.2"]);
  assert.deepEqual(region.addedTops, ["c:blocks.2"]);
  assert.ok(region.sub.items.every((i) => i.key === "c:blocks.2" || i.parent === "c:blocks.2"));
  // A nested expand hangs under the open block.
  const g2 = visibleGraph(payload, new Set(["blocks.2", "blocks.2.mlp"]), index);
  assert.equal(findRegion(g1, g2, { prev: sizeFor(g1), next: sizeFor(g2) })!.parent, "c:blocks.2");
  // Two unrelated changes, or everything changed: no region (full layout).
  const g3 = visibleGraph(payload, new Set(["blocks.1", "blocks.4"]), index);
  assert.equal(findRegion(g0, g3, { prev: sizeFor(g0), next: sizeFor(g3) }), null);
  assert.equal(findRegion(g0, g0, { prev: sizeFor(g0), next: sizeFor(g0) }), null);
});

test("expand one block: the rest moves by the pure shift, new items inside the box, no overlaps", async () => {
  const { g0, g1, prev, placed, s1, region } = await step(new Set(), new Set(["blocks.3"]));
  const l = placed.layout;
  assertConsistent(g1, l, s1);
  // Top-centre kept.
  const o = placed.old;
  const n = placed.now;
  assert.ok(Math.abs((o[0] + o[2]) / 2 - (n[0] + n[2]) / 2) < 0.01 && Math.abs(o[1] - n[1]) < 0.01);
  // Every untouched item moved by the rule, and as one with its box.
  const before = new Map(g0.items.map((i) => [i.key, i]));
  let moved = 0;
  for (const item of g1.items) {
    if (region.added.has(item.key)) continue;
    assert.ok(before.has(item.key));
    const r = rectOf(item.key, prev.layout, prev.sizes)!;
    const want = offsetFor(r, o, n);
    const p0 = prev.layout.positions.get(item.key)!;
    const p1 = l.positions.get(item.key)!;
    assert.ok(Math.abs(p1.x - p0.x - want.x) < 0.01 && Math.abs(p1.y - p0.y - want.y) < 0.01, item.key);
    if (want.y > 0) moved++;
  }
  assert.ok(moved > 3, "blocks below moved down");
  // Routes: kept and shifted where both ends moved alike; new region's routes come from its layout.
  for (const e of g1.edges) {
    const r = l.routes.get(e.key);
    if (!r) continue;
    const a = l.positions.get(e.source)!;
    const b = l.positions.get(e.target)!;
    const sa = rectOf(e.source, l, s1)!;
    const sb = rectOf(e.target, l, s1)!;
    // Route ends touch their nodes.
    assert.ok(r[0].x >= sa[0] - 1 && r[0].x <= sa[2] + 1 && Math.abs(r[0].y - a.y) <= (sa[3] - sa[1]) / 2 + 1, e.key);
    const end = r[r.length - 1];
    assert.ok(end.x >= sb[0] - 1 && end.x <= sb[2] + 1 && Math.abs(end.y - b.y) <= (sb[3] - sb[1]) / 2 + 1, e.key);
  }
  const inner = g1.edges.filter((e) => region.added.has(e.source) && region.added.has(e.target) && e.source !== "c:blocks.3");
  assert.ok(inner.length > 3 && inner.every((e) => l.routes.has(e.key)));
});

test("nested expand refits the open ancestor, and its siblings make room", async () => {
  const { g1, placed, s1, prev } = await step(new Set(["blocks.1", "blocks.3"]), new Set(["blocks.1", "blocks.3", "blocks.3.attn"]));
  assertConsistent(g1, placed.layout, s1);
  const box0 = rectOf("c:blocks.3", prev.layout, prev.sizes)!;
  const box1 = rectOf("c:blocks.3", placed.layout, s1)!;
  assert.ok(box1[3] - box1[1] > box0[3] - box0[1], "the open block grew");
  // The other open block (above or below) moved rigidly with its members.
  const a0 = prev.layout.positions.get("c:blocks.1")!;
  const a1 = placed.layout.positions.get("c:blocks.1")!;
  const d = { x: a1.x - a0.x, y: a1.y - a0.y };
  for (const item of g1.items.filter((i) => i.parent === "c:blocks.1")) {
    const p0 = prev.layout.positions.get(item.key)!;
    const p1 = placed.layout.positions.get(item.key)!;
    assert.ok(Math.abs(p1.x - p0.x - d.x) < 0.01 && Math.abs(p1.y - p0.y - d.y) < 0.01);
  }
});

test("collapse after expand: a consistent picture, the box back in the same place", async () => {
  const first = await step(new Set(), new Set(["blocks.3"]));
  const g2 = visibleGraph(payload, collapse(new Set(["blocks.3"]), "blocks.3", index), index);
  const s2 = sizeFor(g2);
  const snap: Snapshot = { graph: first.g1, layout: first.placed.layout, sizes: first.s1 };
  const region = findRegion(first.g1, g2, { prev: first.s1, next: s2 })!;
  assert.ok(region);
  const placed = placeRegion(snap, g2, region, await layout(region.sub, s2), s2)!;
  assert.ok(placed);
  assertConsistent(g2, placed.layout, s2);
  // Expand then collapse restores the original positions of what lies below and beside.
  for (const item of g2.items) {
    const p0 = first.prev.layout.positions.get(item.key)!;
    const p2 = placed.layout.positions.get(item.key)!;
    assert.ok(Math.abs(p0.x - p2.x) < 0.01 && Math.abs(p0.y - p2.y) < 0.01, item.key);
  }
  void expand;
});

test("a shift that would make two siblings overlap gives null (the caller lays out everything)", () => {
  const leaf = (key: string) => ({ key, type: "node" as const, node: {} as never, parent: null });
  const at = (x1: number, y1: number, x2: number, y2: number) => ({
    p: { x: (x1 + x2) / 2, y: (y1 + y2) / 2 },
    s: { width: x2 - x1, height: y2 - y1 },
  });
  // R is replaced by a box 200 wider; T (tall, left of R, reaching above it) moves left by 100 into A,
  // which sits above R and is left alone.
  const geo = { "c:R": at(0, 100, 100, 130), "n:T": at(-100, 50, -50, 300), "n:A": at(-200, 0, -110, 60) };
  const g0 = { items: [leaf("n:T"), leaf("n:A"), { ...leaf("c:R"), type: "collapsed" as const, call: {} as never, size: 3 }], edges: [], counts: {} } as unknown as VisibleGraph;
  const g1 = { items: [leaf("n:T"), leaf("n:A"), leaf("n:X")], edges: [], counts: {} } as unknown as VisibleGraph;
  const sizes0 = new Map(Object.entries(geo).map(([k, v]) => [k, v.s]));
  const prev: Snapshot = { graph: g0, layout: { positions: new Map(Object.entries(geo).map(([k, v]) => [k, v.p])), boxes: new Map(), routes: new Map() }, sizes: sizes0 };
  const sizes1 = new Map([...sizes0, ["n:X", { width: 300, height: 30 }]]);
  const region = findRegion(g0, g1, { prev: sizes0, next: sizes1 }, 1)!;
  assert.deepEqual(region.addedTops, ["n:X"]);
  const sub: Layout = { positions: new Map([["n:X", { x: 150, y: 15 }]]), boxes: new Map(), routes: new Map() };
  assert.equal(placeRegion(prev, g1, region, sub, sizes1), null);
  // Without A in the way the same change places fine: T moved left by half the width change.
  const g0b = { ...g0, items: g0.items.filter((i) => i.key !== "n:A") };
  const g1b = { ...g1, items: g1.items.filter((i) => i.key !== "n:A") };
  const placed = placeRegion({ ...prev, graph: g0b }, g1b, findRegion(g0b, g1b, { prev: sizes0, next: sizes1 }, 1)!, sub, sizes1)!;
  assert.ok(placed);
  assert.equal(placed.layout.positions.get("n:T")!.x, -75 - 100);
  assert.deepEqual(placed.layout.positions.get("n:X"), { x: 50, y: 115 });
});

test("random expand / collapse walks: every incremental picture is consistent", async () => {
  let seed = 7;
  const rand = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  const ids = index.order;
  let expanded = new Set<string>();
  let g = visibleGraph(payload, expanded, index);
  let sizes = sizeFor(g);
  let snap: Snapshot = { graph: g, layout: await layout(g, sizes), sizes };
  let incremental = 0;
  for (let i = 0; i < 40; i++) {
    const shown = ids.filter((id) => g.items.some((it) => it.key === "c:" + id));
    const id = shown[rand(shown.length)];
    expanded = expanded.has(id) ? collapse(expanded, id, index) : expand(expanded, id, index);
    const next = visibleGraph(payload, expanded, index);
    const nextSizes = sizeFor(next);
    const region = findRegion(snap.graph, next, { prev: snap.sizes, next: nextSizes });
    const placed = region ? placeRegion(snap, next, region, await layout(region.sub, nextSizes), nextSizes) : null;
    const l = placed ? placed.layout : await layout(next, nextSizes);
    if (placed) incremental++;
    assertConsistent(next, l, nextSizes);
    g = next;
    snap = { graph: next, layout: l, sizes: nextSizes };
  }
  assert.ok(incremental > 30, `incremental ${incremental} of 40`);
});

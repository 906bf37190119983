// Our layered layout (src/view/layered/) against the checks the screenshot suite makes of a drawn graph
// (no edge through a box it does not connect, boxes as wide as their header, members inside their box,
// no overlaps), on the fixtures and on random nested graphs, plus its parts.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import type { GraphPayload } from "../src/payload";
import { expandAll } from "../src/state/expansion";
import { indexCalls, nodeKey, visibleGraph, type VisibleGraph } from "../src/state/quotient";
import type { Layout, Point, Size } from "../src/view/elkgraph";
import { layeredLayout } from "../src/view/layered/compound";
import { placeRow } from "../src/view/layered/level";
import { assignTracks, crossingsAbove } from "../src/view/layered/tracks";
import { quality } from "./layoutquality";

const nested: GraphPayload = JSON.parse(readFileSync(new URL("../../tests/fixtures/nested_modules.json", import.meta.url), "utf8"));
const size = (): Size => ({ width: 80, height: 30 });

/** Every check of layoutquality.ts passes, and every route is orthogonal, leaves its source's bottom
 *  and enters its target's top. */
function assertDrawable(graph: VisibleGraph, layout: Layout, sizeOf: (k: string) => Size, header: (k: string) => number = () => 0): void {
  const q = quality(graph, layout, sizeOf, header);
  assert.deepEqual(q.through, [], "edges through boxes");
  assert.deepEqual(q.narrow, [], "boxes narrower than their header");
  assert.deepEqual(q.headers, [], "edges through header text");
  assert.deepEqual(q.outside, [], "members outside their box");
  assert.equal(q.overlaps, 0, "overlapping siblings");
  const edge = (p: Point, key: string, side: "top" | "bottom"): boolean => {
    const c = layout.positions.get(key)!;
    const s = sizeOf(key);
    const y = side === "top" ? c.y - s.height / 2 : c.y + s.height / 2;
    return Math.abs(p.y - y) < 0.5 && Math.abs(p.x - c.x) <= s.width / 2 + 0.5;
  };
  for (const e of graph.edges) {
    if (e.source === e.target) continue;
    const r = layout.routes.get(e.key);
    assert.ok(r && r.length >= 2, `${e.key} has a route`);
    assert.ok(edge(r[0], e.source, "bottom"), `${e.key} leaves ${e.source} at its bottom: ${JSON.stringify(r[0])}`);
    assert.ok(edge(r[r.length - 1], e.target, "top"), `${e.key} enters ${e.target} at its top`);
    for (let i = 1; i < r.length; i++) {
      assert.ok(Math.abs(r[i].x - r[i - 1].x) < 1e-6 || Math.abs(r[i].y - r[i - 1].y) < 1e-6, `${e.key} segment ${i} is orthogonal`);
    }
  }
}

test("the nested fixture, all open: drawable, inputs above, the loss at the bottom", () => {
  const g = visibleGraph(nested, expandAll(indexCalls(nested)), indexCalls(nested));
  const layout = layeredLayout(g, size);
  for (const item of g.items) assert.ok(layout.positions.has(item.key), item.key);
  for (const item of g.items) if (item.type === "expanded") assert.ok(layout.boxes.has(item.key), item.key);
  assertDrawable(g, layout, (k) => layout.boxes.get(k) ?? size());
  const y = (id: string): number => layout.positions.get(nodeKey(id))!.y;
  assert.ok(y("1") < y("4") && y("4") < y("6") && y("6") < y("13") && y("13") < y("14"));
});

/** A seeded random graph: `n` nodes in random nested boxes, forward edges plus a few back edges. */
function randomGraph(seed: number, n: number): VisibleGraph {
  let s = seed * 2654435761 + 1;
  const rnd = (): number => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648);
  const items: VisibleGraph["items"] = [];
  const boxes: string[] = [];
  for (let i = 0; i < n; i++) {
    const parent = boxes.length && rnd() < 0.7 ? boxes[Math.floor(rnd() * boxes.length)] : null;
    if (rnd() < 0.2) {
      const key = `c:b${i}`;
      items.push({ key, type: "expanded", parent } as unknown as VisibleGraph["items"][number]);
      boxes.push(key);
    } else items.push({ key: `n:${i}`, type: "node", parent } as unknown as VisibleGraph["items"][number]);
  }
  const leaves = items.filter((i) => i.type === "node").map((i) => i.key);
  const edges: VisibleGraph["edges"] = [];
  for (let k = 0; k < leaves.length * 1.4; k++) {
    const a = Math.floor(rnd() * leaves.length);
    const b = Math.floor(rnd() * leaves.length);
    if (a === b) continue;
    // Mostly forward in model order; the rest close cycles at some level.
    const [src, dst] = rnd() < 0.9 ? [Math.min(a, b), Math.max(a, b)] : [Math.max(a, b), Math.min(a, b)];
    edges.push({ key: `e${k}`, source: leaves[src], target: leaves[dst], count: 1, edges: [] });
  }
  return { items, edges, counts: { nodes: leaves.length, collapsed: 0, expanded: boxes.length, folded: 0, edges: edges.length } };
}

test("random nested graphs with cycles: no edge through a box, nothing overlaps, headers fit", () => {
  for (let seed = 1; seed <= 40; seed++) {
    const g = randomGraph(seed, 12 + (seed % 5) * 10);
    const sizes = new Map(g.items.map((i, k) => [i.key, { width: 40 + ((k * 37) % 90), height: 24 + ((k * 13) % 30) }]));
    const layout = layeredLayout(g, (k) => sizes.get(k));
    const sizeOf = (k: string): Size => layout.boxes.get(k) ?? sizes.get(k)!;
    try {
      assertDrawable(g, layout, sizeOf, (k) => (layout.boxes.has(k) ? sizes.get(k)!.width : 0));
    } catch (err) {
      throw new Error(`seed ${seed}: ${(err as Error).message}`);
    }
  }
});

test("an open box is laid out at least as wide as its header, its content centred", () => {
  const g = {
    items: [
      { type: "expanded", key: "c:box", parent: null },
      { type: "node", key: "n:a", parent: "c:box" },
      { type: "node", key: "n:b", parent: null },
    ],
    edges: [{ key: "a>b", source: "n:a", target: "n:b", count: 1, edges: [] }],
    counts: { nodes: 2, collapsed: 0, expanded: 1, folded: 0, edges: 1 },
  } as unknown as VisibleGraph;
  const sizes = new Map([["c:box", { width: 300, height: 0 }], ["n:a", { width: 50, height: 20 }], ["n:b", { width: 50, height: 20 }]]);
  const layout = layeredLayout(g, (k) => sizes.get(k));
  const box = layout.boxes.get("c:box")!;
  assert.ok(box.width >= 300 && box.height < 200, `box ${box.width} x ${box.height}`);
  assert.ok(Math.abs(layout.positions.get("n:a")!.x - layout.positions.get("c:box")!.x) < 1, "content centred under the header");
});

test("a long chain wrapped to an aspect comes out in columns, still drawable", () => {
  const n = 60;
  const g = {
    items: Array.from({ length: n }, (_, i) => ({ type: "node", key: `n:${i}`, parent: null })),
    edges: Array.from({ length: n - 1 }, (_, i) => ({ key: `e${i}`, source: `n:${i}`, target: `n:${i + 1}`, count: 1, edges: [] })),
    counts: { nodes: n, collapsed: 0, expanded: 0, folded: 0, edges: n - 1 },
  } as unknown as VisibleGraph;
  const tall = quality(g, layeredLayout(g, size), size, () => 0);
  assert.ok(tall.height > 8 * tall.width, `${tall.width} x ${tall.height}`);
  const layout = layeredLayout(g, size, 16 / 9);
  const q = quality(g, layout, size, () => 0);
  assert.ok(q.width / q.height > 0.8 && q.width / q.height < 3.5, `${q.width} x ${q.height}`);
  assert.deepEqual(q.through, []);
  assert.equal(q.overlaps, 0);
});

test("placeRow: the closest positions that keep order and gaps", () => {
  const out = placeRow(Float64Array.from([10, 0, 50]), Float64Array.from([1, 1, 1]), Float64Array.from([20, 20]));
  // 10 and 0 pull together under the gap: their mean (5) less / plus half the gap; 50 stays.
  assert.deepEqual(Array.from(out), [-5, 15, 50]);
  const free = placeRow(Float64Array.from([0, 100]), Float64Array.from([1, 1]), Float64Array.from([20]));
  assert.deepEqual(Array.from(free), [0, 100]);
});

test("assignTracks: overlapping pieces get different tracks, disjoint ones share, stacked to cross least", () => {
  const down = (a: number, b: number) => ({ a, aUp: true, b, bUp: false });
  assert.equal(assignTracks([down(0, 30), down(40, 80)]).count, 1);
  const { track } = assignTracks([down(0, 30), down(5, 60), down(40, 80)]);
  assert.notEqual(track[0], track[1]);
  assert.notEqual(track[1], track[2]);
  // Two pieces both turning right: the one whose drop is further right runs on top, so neither
  // vertical cuts the other's piece (the other order crosses twice).
  const p = down(0, 50);
  const q = down(20, 80);
  assert.equal(crossingsAbove(q, p), 0);
  assert.equal(crossingsAbove(p, q), 2);
  const t = assignTracks([p, q]).track;
  assert.ok(t[1] < t[0], `tracks ${Array.from(t)}`);
});

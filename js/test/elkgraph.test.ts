// The ELK graph we build and what we read back, run through elkjs's bundled (in-process) build: ELK is
// no longer shipped, it is the reference the layered layout (src/view/layered/) is measured against, so
// the layout properties below are checked on both engines.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import ELK from "elkjs/lib/elk.bundled.js";
import type { GraphPayload } from "../src/payload";
import { expandAll } from "../src/state/expansion";
import { callKey, indexCalls, nodeKey, visibleGraph, type VisibleGraph } from "../src/state/quotient";
import { fromElk, toElk, type Layout } from "../src/view/elkgraph";
import { layeredLayout } from "../src/view/layered/compound";
import { toSegments } from "../src/view/segments";

const nested: GraphPayload = JSON.parse(
  readFileSync(new URL("../../tests/fixtures/nested_modules.json", import.meta.url), "utf8"),
);
const index = indexCalls(nested);
const size = () => ({ width: 80, height: 30 });

test("edges live in the innermost box holding both ends", () => {
  const g = visibleGraph(nested, expandAll(index), index);
  const root = toElk(g, size);
  const find = (id: string, node = root): typeof root | undefined =>
    node.id === id ? node : (node.children ?? []).map((c) => find(id, c)).find(Boolean);
  const fc = find(callKey("blocks.0.fc"))!;
  const inFc = (fc.edges ?? []).map((e) => [e.sources[0], e.targets[0]]);
  assert.deepEqual(inFc.sort(), [[nodeKey("3"), nodeKey("6")], [nodeKey("5"), nodeKey("6")]]);
  // 2 -> 5 crosses into blocks.0.fc from the top level: declared at the root.
  assert.ok((root.edges ?? []).some((e) => e.sources[0] === nodeKey("2") && e.targets[0] === nodeKey("5")));
});

const engines: [string, (g: VisibleGraph) => Promise<Layout>][] = [
  ["ELK", async (g) => fromElk(await new ELK().layout(toElk(g, size)))],
  ["the layered layout", async (g) => layeredLayout(g, size)],
];

for (const [engine, layout] of engines)
test(`${engine} lays out top to bottom; members sit inside their boxes`, async () => {
  const g = visibleGraph(nested, expandAll(index), index);
  const { positions, boxes, routes } = await layout(g);
  for (const item of g.items) assert.ok(positions.has(item.key), item.key);
  // Open boxes come with their size, and hold their members (the view draws them as plain nodes).
  for (const item of g.items) {
    if (item.type === "expanded") assert.ok(boxes.has(item.key), item.key);
    if (!item.parent) continue;
    const c = positions.get(item.parent)!;
    const b = boxes.get(item.parent)!;
    const p = positions.get(item.key)!;
    assert.ok(Math.abs(p.x - c.x) < b.width / 2 && Math.abs(p.y - c.y) < b.height / 2, `${item.key} in ${item.parent}`);
  }
  // Inputs above, the loss at the bottom.
  const y = (id: string) => positions.get(nodeKey(id))!.y;
  assert.ok(y("1") < y("4") && y("4") < y("6") && y("6") < y("13") && y("13") < y("14"));
  assert.equal(routes.size, g.edges.length);
  // Every route starts at its source's border and ends at its target's border (absolute coordinates).
  for (const e of g.edges) {
    const r = routes.get(e.key)!;
    const s = positions.get(e.source)!;
    const t = positions.get(e.target)!;
    assert.ok(Math.abs(r[0].x - s.x) <= 40.5 && Math.abs(r[0].y - s.y) <= 15.5, `${e.key} start`);
    const end = r[r.length - 1];
    assert.ok(Math.abs(end.x - t.x) <= 40.5 && Math.abs(end.y - t.y) <= 15.5, `${e.key} end`);
  }
});

test("segment weights and distances rebuild the bend points", () => {
  const route = [{ x: 10, y: 20 }, { x: 10, y: 50 }, { x: 90, y: 50 }, { x: 90, y: 120 }];
  const seg = toSegments(route, { x: 12, y: 5 }, { x: 85, y: 135 }) as { ws: number[]; ds: number[]; sep: string; tep: string };
  const [s, e] = [route[0], route[3]];
  const len = Math.hypot(e.x - s.x, e.y - s.y);
  const u = { x: (e.x - s.x) / len, y: (e.y - s.y) / len };
  const n = { x: -u.y, y: u.x }; // Cytoscape's perpendicular
  seg.ws.forEach((w, i) => {
    const p = { x: s.x + (e.x - s.x) * w + n.x * seg.ds[i], y: s.y + (e.y - s.y) * w + n.y * seg.ds[i] };
    assert.ok(Math.abs(p.x - route[i + 1].x) < 1e-9 && Math.abs(p.y - route[i + 1].y) < 1e-9);
  });
  assert.equal(seg.sep, "-2.0px 15.0px");
  assert.equal(seg.tep, "5.0px -15.0px");
  assert.equal(toSegments([s], s, e), null);
});

test("an open box is laid out at least as wide as its header (the minimum survives ELK's turn to DOWN)", async () => {
  const graph = {
    items: [
      { type: "expanded", key: "c:box", parent: null },
      { type: "node", key: "n:a", parent: "c:box" },
      { type: "node", key: "n:b", parent: null },
    ],
    edges: [{ key: "a>b", source: "n:a", target: "n:b", count: 1, edges: [], ghost: false }],
    counts: { nodes: 2, collapsed: 0, expanded: 1, folded: 0, edges: 1 },
  } as unknown as Parameters<typeof toElk>[0];
  const sizes = new Map([["c:box", { width: 300, height: 0 }], ["n:a", { width: 50, height: 20 }], ["n:b", { width: 50, height: 20 }]]);
  const out = await new ELK().layout(toElk(graph, (k) => sizes.get(k)));
  const box = out.children!.find((c) => c.id === "c:box")!;
  assert.ok(box.width! >= 300, `box ${box.width} x ${box.height}`);
  assert.ok(box.height! < 200, `the minimum went to the height: ${box.height}`);
});

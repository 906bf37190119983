// Edges through boxes after an incremental placement: the geometry the view uses to decide a full layout.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { Layout } from "../src/view/elkgraph";
import { detourEdges, edgesThroughItems, segmentCrosses, type Rect } from "../src/view/incremental";
import type { VisibleGraph } from "../src/state/quotient";

test("segmentCrosses: through, beside, touching and from inside", () => {
  const r: Rect = [0, 0, 10, 10];
  assert.ok(segmentCrosses({ x: -5, y: 5 }, { x: 15, y: 5 }, r));
  assert.ok(!segmentCrosses({ x: -5, y: 20 }, { x: 15, y: 20 }, r));
  assert.ok(!segmentCrosses({ x: 10, y: -5 }, { x: 10, y: 15 }, r)); // along the border: touching is fine
  assert.ok(segmentCrosses({ x: 5, y: 5 }, { x: 5, y: 30 }, r));
  assert.ok(segmentCrosses({ x: -5, y: -5 }, { x: 15, y: 15 }, r)); // diagonal
});

test("edgesThroughItems: a straight edge over a box is reported; a route around it, or into an open box holding an end, is not", () => {
  const node = (key: string, parent: string | null = null) => ({ type: "node", key, parent, node: {} }) as unknown as VisibleGraph["items"][number];
  const graph = {
    items: [node("a"), node("mid"), node("b"), { type: "expanded", key: "c:box", parent: null } as unknown as VisibleGraph["items"][number], node("in", "c:box")],
    edges: [
      { key: "a>b", source: "a", target: "b", count: 1, edges: [], ghost: false },
      { key: "a>in", source: "a", target: "in", count: 1, edges: [], ghost: false },
    ],
    counts: { nodes: 4, collapsed: 0, expanded: 1, folded: 0, edges: 2 },
  } as unknown as VisibleGraph;
  const sizes = new Map(["a", "mid", "b", "in"].map((k) => [k, { width: 20, height: 10 }]));
  const layout: Layout = {
    positions: new Map([["a", { x: 0, y: 0 }], ["mid", { x: 0, y: 50 }], ["b", { x: 0, y: 100 }], ["c:box", { x: 100, y: 50 }], ["in", { x: 100, y: 50 }]]),
    boxes: new Map([["c:box", { width: 60, height: 60 }]]),
    routes: new Map(),
  };
  assert.deepEqual(edgesThroughItems(graph, layout, sizes), ["a>b"]);
  // A detour round the drawing clears it.
  const copy: Layout = { ...layout, routes: new Map(layout.routes) };
  assert.deepEqual(detourEdges(graph, copy, sizes, ["a>b"]), ["a>b"]);
  assert.deepEqual(edgesThroughItems(graph, copy, sizes), []);
  layout.routes.set("a>b", [{ x: 0, y: 0 }, { x: 40, y: 0 }, { x: 40, y: 100 }, { x: 0, y: 100 }]);
  assert.deepEqual(edgesThroughItems(graph, layout, sizes), []);
});

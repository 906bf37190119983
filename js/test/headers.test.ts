// Edges round open boxes' header text (view/reroute.ts): orthogonal routes for edges a placement left
// straight, and the jog beside a header an edge enters through.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { VisibleGraph } from "../src/state/quotient";
import { BOX_PADDING, type Layout, type Point } from "../src/view/elkgraph";
import { segmentCrosses } from "../src/view/incremental";
import { avoidHeaders, headerRect, orthogonalRoutes, simplify } from "../src/view/reroute";

type Item = VisibleGraph["items"][number];
const node = (key: string, parent: string | null = null): Item => ({ type: "node", key, parent, node: {} }) as unknown as Item;
const box = (key: string, parent: string | null = null): Item => ({ type: "expanded", key, parent }) as unknown as Item;

/** `a` above an open box `c:B` (header 100 wide, measured) holding `in`, which holds nothing else. */
function scene(inX: number): { graph: VisibleGraph; layout: Layout; sizes: Map<string, { width: number; height: number }> } {
  const graph = {
    items: [node("a"), box("c:B"), node("in", "c:B")],
    edges: [{ key: "a>in", source: "a", target: "in", count: 1, edges: [], ghost: false }],
    counts: { nodes: 2, collapsed: 0, expanded: 1, folded: 0, edges: 1 },
  } as unknown as VisibleGraph;
  const sizes = new Map([
    ["a", { width: 40, height: 20 }],
    ["in", { width: 40, height: 20 }],
    ["c:B", { width: 100 + 2 * BOX_PADDING.side, height: 0 }],
  ]);
  // The box: x 0..200, y 100..200 (its header strip 100..122); `in` at the box's top row.
  const layout: Layout = {
    positions: new Map([["a", { x: 60, y: 20 }], ["c:B", { x: 100, y: 150 }], ["in", { x: inX, y: 150 }]]),
    boxes: new Map([["c:B", { width: 200, height: 100 }]]),
    routes: new Map(),
  };
  return { graph, layout, sizes };
}

const crossesAny = (route: Point[], r: [number, number, number, number]): boolean =>
  route.some((p, i) => i > 0 && segmentCrosses(route[i - 1], p, r));

test("headerRect: the measured label's width, centred, from the top of the room to the drawn border", () => {
  const { layout, sizes } = scene(100);
  assert.deepEqual(headerRect("c:B", layout, sizes), [50, 100, 150, 100 + BOX_PADDING.top - BOX_PADDING.side]);
  assert.equal(headerRect("a", layout, sizes), null);
});

test("orthogonalRoutes: a straight edge gets a route out of the source's bottom into the target's top, crossing above the box it enters", () => {
  const { graph, layout, sizes } = scene(120);
  assert.deepEqual(orthogonalRoutes(graph, layout, sizes), ["a>in"]);
  const route = layout.routes.get("a>in")!;
  assert.deepEqual(route[0], { x: 60, y: 30 });
  assert.deepEqual(route[route.length - 1], { x: 120, y: 140 });
  for (let i = 1; i < route.length; i++) assert.ok(route[i].x === route[i - 1].x || route[i].y === route[i - 1].y, "orthogonal");
  assert.ok(route[1].y < 100, "the horizontal run is above the box");
  // An edge that already has a route keeps it.
  assert.deepEqual(orthogonalRoutes(graph, layout, sizes), []);
});

test("avoidHeaders: an edge entering through the header text steps beside it; one beside it is left alone", () => {
  for (const inX of [80, 120]) {
    const { graph, layout, sizes } = scene(inX);
    orthogonalRoutes(graph, layout, sizes);
    const head = headerRect("c:B", layout, sizes)!;
    assert.ok(crossesAny(layout.routes.get("a>in")!, head), "through the header before");
    assert.equal(avoidHeaders(graph, layout, sizes), 1);
    const route = layout.routes.get("a>in")!;
    assert.ok(!crossesAny(route, head), JSON.stringify(route));
    assert.deepEqual(route[route.length - 1], { x: inX, y: 140 }, "still ends on the target's top");
    for (let i = 1; i < route.length; i++) assert.ok(route[i].x === route[i - 1].x || route[i].y === route[i - 1].y, "orthogonal");
    // The side nearer the entry point: left of the centre goes left.
    assert.ok(route.some((p) => (inX < 100 ? p.x < head[0] + 3 : p.x > head[2] - 3)));
    assert.equal(avoidHeaders(graph, layout, sizes), 0, "idempotent");
  }
  const { graph, layout, sizes } = scene(180); // enters beside the label: nothing to do
  layout.routes.set("a>in", [{ x: 180, y: 30 }, { x: 180, y: 140 }]);
  assert.equal(avoidHeaders(graph, layout, sizes), 0);
});

test("simplify: drops repeated points and the middle of straight runs", () => {
  const p = (x: number, y: number): Point => ({ x, y });
  assert.deepEqual(simplify([p(0, 0), p(0, 0), p(0, 5), p(0, 10), p(5, 10), p(9, 10)]), [p(0, 0), p(0, 10), p(9, 10)]);
});

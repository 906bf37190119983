// The plain layered fallback for graphs too big for ELK.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import type { GraphPayload } from "../src/payload";
import { expandAll } from "../src/state/expansion";
import { callKey, indexCalls, visibleGraph, type VisibleGraph } from "../src/state/quotient";
import { decodePlain, encodePlain, plainCoreSource, plainLayoutCore, simpleLayout } from "../src/view/simplelayout";

const size = () => ({ width: 80, height: 30 });

function chain(n: number): VisibleGraph {
  const items = Array.from({ length: n }, (_, i) => ({ key: `n:${i}`, type: "node" as const, node: {} as never, parent: null }));
  const edges = Array.from({ length: n - 1 }, (_, i) => ({ key: `e${i}`, source: `n:${i}`, target: `n:${i + 1}`, count: 1 }));
  return { items, edges, counts: { nodes: n, collapsed: 0, expanded: 0, edges: n - 1 } } as unknown as VisibleGraph;
}

test("a 20,000-node chain: no recursion, producers above consumers", () => {
  const t = Date.now();
  const { positions } = simpleLayout(chain(20000), size);
  assert.ok(Date.now() - t < 5000);
  for (let i = 1; i < 20000; i++) assert.ok(positions.get(`n:${i - 1}`)!.y < positions.get(`n:${i}`)!.y);
});

test("open boxes enclose their members", () => {
  const nested: GraphPayload = JSON.parse(
    readFileSync(new URL("../../tests/fixtures/nested_modules.json", import.meta.url), "utf8"),
  );
  const index = indexCalls(nested);
  const g = visibleGraph(nested, expandAll(index), index);
  const { positions, boxes } = simpleLayout(g, size);
  for (const item of g.items) {
    if (!item.parent || item.type === "expanded") continue;
    const box = boxes.get(item.parent)!;
    const c = positions.get(item.parent)!;
    const p = positions.get(item.key)!;
    assert.ok(Math.abs(p.x - c.x) <= box.width / 2 && Math.abs(p.y - c.y) <= box.height / 2, item.key);
  }
  assert.ok(boxes.has(callKey("blocks.0")));
});

test("the core is self-contained (it runs in a worker from its source text) and gives the same layout", () => {
  const core = new Function(`"use strict"; return ${plainCoreSource()};`)() as typeof plainLayoutCore;
  const nested: GraphPayload = JSON.parse(
    readFileSync(new URL("../../tests/fixtures/nested_modules.json", import.meta.url), "utf8"),
  );
  const index = indexCalls(nested);
  const g = visibleGraph(nested, expandAll(index), index);
  const here = simpleLayout(g, size);
  const there = decodePlain(g, core(encodePlain(g, size)));
  assert.deepEqual([...there.positions], [...here.positions]);
  assert.deepEqual([...there.boxes], [...here.boxes]);
});

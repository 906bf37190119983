// Unit tests of the pure state code (no DOM). Run with `npm test`.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import type { GraphPayload } from "../src/payload";
import { canonical, collapse, expand, expandAll, sameSet } from "../src/state/expansion";
import { collapsedLabel, nodeDetails, nodeLabel } from "../src/state/labels";
import { callKey, indexCalls, nodeKey, representative, visibleGraph } from "../src/state/quotient";

// The same hand-made fixture the browser test uses: embed -> blocks.0 (fc inside) -> blocks.0 again
// (second call) -> head, with embed.weight tied to head.weight.
const nested: GraphPayload = JSON.parse(
  readFileSync(new URL("../../tests/fixtures/nested_modules.json", import.meta.url), "utf8"),
);
const index = indexCalls(nested);
const byId = (id: string) => nested.nodes.find((n) => n.id === id)!;
const keys = (g: ReturnType<typeof visibleGraph>) => g.items.map((i) => i.key).sort();

test("call chains run from the outermost call inwards", () => {
  assert.deepEqual(index.chain.get("blocks.0.fc"), ["blocks.0", "blocks.0.fc"]);
  assert.deepEqual(index.chain.get("blocks.0.fc (call 2)"), ["blocks.0 (call 2)", "blocks.0.fc (call 2)"]);
  assert.equal(index.size.get("blocks.0"), 4);
  assert.equal(index.size.get("blocks.0 (call 2)"), 3);
});

test("all collapsed: nodes inside calls are represented by their outermost call", () => {
  const g = visibleGraph(nested, new Set());
  assert.equal(representative(byId("6"), index, new Set()), callKey("blocks.0"));
  assert.equal(representative(byId("9"), index, new Set()), callKey("blocks.0 (call 2)"));
  // Top-level nodes (leaves 1, 2, op 13, root 14) + 4 top-level boxes; inner calls are hidden.
  assert.deepEqual(keys(g), [
    callKey("blocks.0"), callKey("blocks.0 (call 2)"), callKey("embed"), callKey("head"),
    nodeKey("1"), nodeKey("13"), nodeKey("14"), nodeKey("2"),
  ].sort());
  assert.deepEqual(g.counts, { nodes: 4, collapsed: 4, expanded: 0, folded: 0, edges: g.edges.length });
  assert.ok(g.items.every((i) => i.parent === null));
});

test("two calls of the same module are two boxes", () => {
  const g = visibleGraph(nested, new Set());
  const boxes = g.items.filter((i) => i.type === "collapsed").map((i) => (i.type === "collapsed" ? i.call.path : ""));
  assert.equal(boxes.filter((p) => p === "blocks.0").length, 2);
  const second = g.items.find((i) => i.key === callKey("blocks.0 (call 2)"))!;
  assert.equal(second.type === "collapsed" && collapsedLabel(second.call, second.size), "▸ blocks.0 (call 2)\nBlock · 3 nodes");
});

test("edges are aggregated between representatives with multiplicities, no self loops", () => {
  const g = visibleGraph(nested, new Set());
  const pair = (s: string, t: string) => g.edges.find((e) => e.source === s && e.target === t);
  // blocks.0.fc.weight (2) feeds T inside each call: one edge into each box.
  assert.equal(pair(nodeKey("2"), callKey("blocks.0"))?.count, 1);
  assert.equal(pair(nodeKey("2"), callKey("blocks.0 (call 2)"))?.count, 1);
  // bias (3) lives inside blocks.0.fc and feeds call 2: 3->9 becomes blocks.0 -> call 2, with 7->9.
  const between = pair(callKey("blocks.0"), callKey("blocks.0 (call 2)"))!;
  assert.equal(between.count, 2);
  assert.deepEqual(between.edges.map((i) => [nested.edges[i].source, nested.edges[i].target]).sort(), [["3", "9"], ["7", "9"]]);
  assert.ok(g.edges.every((e) => e.source !== e.target));
  // Every payload edge is accounted for exactly once, or was inside one box.
  const covered = g.edges.reduce((s, e) => s + e.count, 0);
  assert.equal(covered, 16 - 6); // 6 edges run inside a single collapsed box
});

test("expanded calls become compound parents; members point at the nearest expanded box", () => {
  const open = expand(new Set(), "blocks.0.fc", index);
  assert.deepEqual([...open].sort(), ["blocks.0", "blocks.0.fc"]);
  const g = visibleGraph(nested, open);
  const item = (k: string) => g.items.find((i) => i.key === k)!;
  assert.equal(item(callKey("blocks.0")).type, "expanded");
  assert.equal(item(callKey("blocks.0")).parent, null);
  assert.equal(item(callKey("blocks.0.fc")).parent, callKey("blocks.0"));
  assert.equal(item(nodeKey("6")).parent, callKey("blocks.0.fc"));
  assert.equal(item(nodeKey("7")).parent, callKey("blocks.0"));
  assert.equal(item(nodeKey("3")).parent, callKey("blocks.0.fc")); // a leaf inside a call
  // Parents are listed before their children.
  const pos = new Map(g.items.map((it, i) => [it.key, i]));
  for (const it of g.items) if (it.parent) assert.ok(pos.get(it.parent)! < pos.get(it.key)!);
  assert.equal(g.counts.expanded, 2);
});

test("an expanded call inside a collapsed one stays hidden", () => {
  const g = visibleGraph(nested, new Set(["blocks.0.fc"]));
  assert.ok(!g.items.some((i) => i.key === callKey("blocks.0.fc")));
  assert.equal(representative(byId("6"), index, new Set(["blocks.0.fc"])), callKey("blocks.0"));
});

test("expand / collapse round trip returns to the same view", () => {
  const start = new Set<string>();
  const before = visibleGraph(nested, start);
  const open = expand(expand(start, "blocks.0", index), "blocks.0.fc", index);
  assert.ok(visibleGraph(nested, open).counts.nodes > before.counts.nodes);
  const closed = collapse(open, "blocks.0", index); // also closes blocks.0.fc inside it
  assert.ok(sameSet(closed, start));
  const after = visibleGraph(nested, closed);
  assert.deepEqual(keys(after), keys(before));
  assert.deepEqual(after.edges, before.edges);
});

test("expand all shows every node as itself; canonical order follows the payload", () => {
  const all = expandAll(index);
  const g = visibleGraph(nested, all);
  assert.equal(g.counts.nodes, nested.nodes.length);
  assert.equal(g.counts.collapsed, 0);
  assert.equal(g.edges.length, nested.edges.length);
  assert.deepEqual(canonical(["head", "nope", "embed"], index), ["embed", "head"]);
});

test("a payload without calls draws every node at top level", () => {
  const flat: GraphPayload = { ...nested, calls: [], nodes: nested.nodes.map((n) => ({ ...n, call: "" })) };
  const g = visibleGraph(flat, new Set(["blocks.0"]));
  assert.equal(g.counts.nodes, flat.nodes.length);
  assert.equal(g.counts.collapsed + g.counts.expanded, 0);
});

test("labels: title and shape on two lines; tied leaves say so; details list saved tensors", () => {
  assert.equal(nodeLabel(byId("6")), "Addmm\n[3, 4]");
  assert.equal(nodeLabel(byId("1")), "embed.weight (+1 tied)\n[10, 4]");
  const rows = new Map(nodeDetails(byId("6")));
  assert.equal(rows.get("saved tensors"), "2");
  assert.equal(rows.get("  mat2"), "[4, 4] float32");
  assert.equal(rows.get("call"), "blocks.0.fc");
});

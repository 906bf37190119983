// How names and ghosts are framed on the canvas: labels without the module prefix every name shares
// (GraphMeta.prefix, computed once in Python), full names kept for the details panel and tooltips; ghosts as
// short stubs beside what they feed, labelled "from …", with no edge back across the boxes to their source.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import type { GraphPayload } from "../src/payload";
import { callDetails, fullNameText, ghostText, shortName } from "../src/state/labels";
import { indexCalls, visibleGraph, type VisibleGraph, type VisibleItem } from "../src/state/quotient";
import type { Layout } from "../src/view/elkgraph";
import { labelOf } from "../src/view/elements";
import { pullStubs, STUB_GAP, STUB_REACH } from "../src/view/stubs";

const fixture = (name: string): GraphPayload =>
  JSON.parse(readFileSync(new URL(`../../tests/fixtures/${name}`, import.meta.url), "utf8")) as GraphPayload;

/** The what-if fixture under a two-part wrapper, as peft names a model: every call, leaf and ghost name
 *  gets `base.model.` in front, and the payload says so in meta.prefix. */
function wrapped(): GraphPayload {
  const p = fixture("whatif_ghosts.json");
  const w = (s: string): string => (s ? "base.model." + s : s);
  return {
    ...p,
    nodes: p.nodes.map((n) => ({ ...n, call: w(n.call), module: w(n.module), names: n.names.map(w) })),
    calls: p.calls.map((c) => ({ ...c, id: w(c.id), path: w(c.path), parent: w(c.parent) })),
    ghosts: p.ghosts.map((g) => ({ ...g, names: g.names.map(w), label: g.kind === "frozen" ? w(g.label) : g.label, call: w(g.call), where: "base.model.enc" })),
    meta: { ...p.meta, prefix: "base.model." },
  };
}

const labels = (g: VisibleGraph): Map<string, string> => new Map(g.items.map((i) => [i.key, labelOf(i)]));

test("labels leave the shared module prefix out; details and tooltips keep full names", () => {
  const p = wrapped();
  const all = new Set(p.calls.map((c) => c.id));
  const g = visibleGraph(p, all, indexCalls(p));
  const shown = labels(g);
  assert.equal(shown.get("c:base.model.enc"), "▾ enc · Enc");
  assert.equal(shown.get("c:base.model.enc.fc1"), "▾ enc.fc1 · Linear");
  const leaf = p.nodes.find((n) => n.kind === "leaf" && n.names[0] === "base.model.enc.fc1.weight")!;
  assert.equal(shown.get("n:" + leaf.id)?.split("\n")[0], "enc.fc1.weight");
  for (const label of shown.values()) assert.ok(!label.includes("base.model."), label);
  const closed = visibleGraph(p, new Set(), indexCalls(p));
  assert.equal(labels(closed).get("c:base.model.enc")?.split("\n")[0], "▸ enc");
  // the details panel and the tooltip say the whole name
  const enc = p.calls.find((c) => c.id === "base.model.enc")!;
  assert.deepEqual(callDetails(enc, 1)[0], ["module", "base.model.enc"]);
  assert.equal(fullNameText(enc.id, "base.model."), "base.model.enc");
  // a name that is the prefix itself, or outside it, stays whole; no prefix: nothing changes
  assert.equal(shortName("base.model", "base.model."), "base.model");
  assert.equal(shortName("other.x", "base.model."), "other.x");
  assert.equal(fullNameText("other.x", "base.model."), "");
  const plain = fixture("whatif_ghosts.json");
  assert.equal(labels(visibleGraph(plain, new Set(["enc"]), indexCalls(plain))).get("c:enc"), "▾ enc · Enc");
});

test("a ghost is a stub beside each item it feeds, labelled with its source, no edge back to the source", () => {
  const p = wrapped();
  const all = new Set(p.calls.map((c) => c.id));
  const g = visibleGraph(p, all, indexCalls(p));
  const stubs = g.items.filter((i) => i.type === "ghost");
  assert.deepEqual(stubs.map((s) => s.key).sort(), ["g:g0", "g:g1", "g:g2"]);
  const keys = new Set(g.items.map((i) => i.key));
  const add = p.ghosts[0].targets[0];
  for (const s of stubs) {
    assert.equal(s.type === "ghost" && s.target, "n:" + add);
    const target = g.items.find((i) => i.key === "n:" + add)!;
    assert.equal(s.parent, target.parent, "the stub sits in its target's box");
  }
  const ghostEdges = g.edges.filter((e) => e.ghost);
  assert.equal(ghostEdges.length, 3);
  for (const e of ghostEdges) {
    assert.ok(e.source.startsWith("g:") && e.target === "n:" + add, `${e.source} -> ${e.target}`);
    assert.ok(keys.has(e.source) && keys.has(e.target));
  }
  const shown = labels(g);
  assert.equal(shown.get("g:g0"), "from detach() in enc");
  assert.equal(shown.get("g:g1"), "from ❄ frozen.weight");
  const frozen = stubs.find((s) => s.key === "g:g1")!;
  assert.ok(frozen.type === "ghost" && ghostText(frozen.ghost).startsWith("frozen parameter base.model.frozen.weight [8, 8]"));
  // collapsing the detach's own box leaves the stub beside the add: its source is a word, not an edge
  const closed = visibleGraph(p, new Set(), indexCalls(p));
  assert.ok(closed.items.some((i) => i.key === "g:g0"));
  assert.ok(!closed.edges.some((e) => e.ghost && e.target.startsWith("g:")));
});

test("a ghost feeding several items gets one stub each; one hidden with its consumer in a closed box is not drawn", () => {
  const p = wrapped();
  const fc1 = p.nodes.find((n) => n.call === "base.model.enc.fc1" && n.kind === "op")!;
  const head = p.nodes.find((n) => n.call === "base.model.head" && n.kind === "op")!;
  const ghost = { ...p.ghosts[1], names: ["base.model.head.scale"], call: "base.model.head", targets: [fc1.id, head.id] };
  const many: GraphPayload = { ...p, ghosts: [ghost] };
  const all = new Set(p.calls.map((c) => c.id));
  const open = visibleGraph(many, all, indexCalls(many));
  const stubs = open.items.filter((i) => i.type === "ghost");
  assert.deepEqual(stubs.map((s) => [s.key, s.type === "ghost" ? s.target : ""]), [
    ["g:g1", "n:" + fc1.id],
    ["g:g1~1", "n:" + head.id],
  ]);
  assert.deepEqual(stubs.map((s) => s.parent), ["c:base.model.enc.fc1", "c:base.model.head"]);
  // each named from the box it sits in, so a stub stays narrow (and close to its target)
  assert.deepEqual(stubs.map((s) => labelOf(s)), ["from ❄ head.scale", "from ❄ scale"]);
  // head closed: its own stub hides inside it with its consumer; the one feeding fc1 stays
  const headClosed = visibleGraph(many, new Set([...all].filter((c) => c !== "base.model.head")), indexCalls(many));
  assert.deepEqual(headClosed.items.filter((i) => i.type === "ghost").map((s) => s.key), ["g:g1"]);
});

test("a stub the layout lifted far from its target moves just above it, else beside it, where the spot is free", () => {
  const ghost = fixture("whatif_ghosts.json").ghosts[1];
  const item = (key: string): VisibleItem => ({ key, type: "node", node: fixture("whatif_ghosts.json").nodes[0], parent: null });
  const graph = (extra: VisibleItem[]): VisibleGraph => ({
    items: [item("n:t"), ...extra, { key: "g:s", type: "ghost", ghost, parent: null, target: "n:t" }],
    edges: [{ key: "ge:0", source: "g:s", target: "n:t", count: 1, edges: [], ghost: true }],
    counts: { nodes: 1, collapsed: 0, expanded: 0, folded: 0, edges: 0 },
  });
  const sizes = new Map([["n:t", { width: 60, height: 30 }], ["n:o", { width: 60, height: 30 }], ["g:s", { width: 100, height: 20 }]]);
  const layoutWith = (obstacle: boolean): Layout => ({
    positions: new Map([["n:t", { x: 0, y: 0 }], ["g:s", { x: 0, y: -500 }], ...(obstacle ? [["n:o", { x: 0, y: -45 }] as const] : [])]),
    boxes: new Map(),
    routes: new Map([["ge:0", [{ x: 0, y: -490 }, { x: 0, y: -15 }]]]),
  });
  const free = layoutWith(false);
  assert.deepEqual(pullStubs(graph([]), free, sizes), ["g:s"]);
  assert.deepEqual(free.positions.get("g:s"), { x: 0, y: -15 - STUB_GAP - 10 });
  assert.deepEqual(free.routes.get("ge:0"), [{ x: 0, y: -15 - STUB_GAP }, { x: 0, y: -15 }]);
  // something sits above the target: the stub goes to its left, its edge into the target's side
  const blocked = layoutWith(true);
  pullStubs(graph([item("n:o")]), blocked, sizes);
  assert.deepEqual(blocked.positions.get("g:s"), { x: -30 - STUB_GAP - 50, y: 0 });
  // a stub already near its target stays where the layout put it
  const near = layoutWith(false);
  near.positions.set("g:s", { x: 0, y: -60 });
  near.routes.set("ge:0", [{ x: 0, y: -50 }, { x: 0, y: -15 }]);
  assert.deepEqual(pullStubs(graph([]), near, sizes), []);
  assert.ok(STUB_REACH >= 36);
});

// Unit tests of the diff view's pure decorations, on the real GPT-2 before/after LoRA payloads.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import type { GraphDiff, GraphPayload } from "../../payload";
import { badgeText, diffDecorations, diffText, normalizeDiff } from "./state";
import { expandAll } from "../../state/expansion";
import { indexCalls, visibleGraph } from "../../state/quotient";

const fixture: Record<string, { graph: GraphPayload; diff: GraphDiff }> = JSON.parse(
  readFileSync(new URL("../../tests/fixtures/diff_lora.json", import.meta.url), "utf8"),
);

test("{} and missing status are no diff", () => {
  assert.equal(normalizeDiff({}), null);
  assert.equal(normalizeDiff(null), null);
  assert.ok(normalizeDiff(fixture.added.diff));
});

test("closed boxes count the changes inside; nodes get df- classes and marks when drawn", () => {
  const { graph, diff } = fixture.added;
  const index = indexCalls(graph);
  const closed = diffDecorations(graph, visibleGraph(graph, new Set(), index), diff, index);
  assert.deepEqual(closed.boxes.get("c:blocks.0"), { added: 36, removed: 0, changed: 3 });
  assert.equal(closed.classes.get("c:blocks.0"), "df-box");
  assert.equal(closed.labels.get("c:blocks.0"), "{base}\nΔ 36 added · 3 changed");
  assert.equal(closed.boxes.get("c:wte"), undefined);
  const all = expandAll(index);
  const open = diffDecorations(graph, visibleGraph(graph, all, index), diff, index);
  const lora = graph.nodes.find((n) => n.names.includes("blocks.0.attn.c_attn.lora_A"))!;
  assert.equal(open.classes.get("n:" + lora.id), "df-added df-gained");
  assert.equal(open.labels.get("n:" + lora.id), "+ {base}\n▲ gains a gradient path");
  assert.equal(open.labels.get("c:blocks.0"), "{base} · Δ 36 added · 3 changed");
  const changed = Object.keys(diff.status).find((k) => diff.status[k] === "changed")!;
  assert.ok(diffText(diff, open, "n:" + changed).startsWith("changed: "));
});

test("a box only 'before' had is removed as a whole; lost leaves are marked", () => {
  // Reentrant checkpointing hides blocks.0's inside: its attention box held only removed nodes.
  const ckpt = fixture.checkpointed;
  const ckptIndex = indexCalls(ckpt.graph);
  const hidden = diffDecorations(ckpt.graph, visibleGraph(ckpt.graph, expandAll(ckptIndex), ckptIndex), ckpt.diff, ckptIndex);
  assert.equal(hidden.classes.get("c:blocks.0.attn"), "df-removed");
  // Removing the adapters: their leaves are removed and lost; the unwrapped base Linear is matched.
  const { graph, diff } = fixture.removed;
  const index = indexCalls(graph);
  const deco = diffDecorations(graph, visibleGraph(graph, expandAll(index), index), diff, index);
  assert.equal(deco.classes.get("c:blocks.0.attn.c_attn.base"), undefined);
  const b = graph.nodes.find((n) => n.names.includes("blocks.0.attn.c_attn.lora_B"))!;
  assert.equal(deco.classes.get("n:" + b.id), "df-removed df-lost");
  assert.equal(badgeText({ added: 0, removed: 2, changed: 0 }), "Δ 2 removed");
});

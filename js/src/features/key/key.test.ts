// The key's entries (entries.ts): every kind the canvas draws is explained, in the theme's colours.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { Theme } from "../../view/theme";
import { keyEntries } from "./entries";

const theme = (dark: boolean): Theme => ({
  background: dark ? "#111111" : "#ffffff", panel: dark ? "#1e1e1e" : "#ffffff", panelAlt: dark ? "#2d2d2d" : "#eeeeee",
  text: dark ? "#ffffff" : "#000000", textMuted: "#888888", brand: dark ? "#4a9de6" : "#1976d2", border: "#bdbdbd",
  leafFill: dark ? "#1c3346" : "#dde9f6", boxFill: "#e8eef6", expandedFill: "#fafafa", edge: "#9e9e9e",
  danger: "#d32f2f", dangerFill: "#f6d5d5", frozen: "#546e7a", frozenFill: "#d4dbde", ghost: "#a0a0a0",
  fontFamily: "sans-serif", dark,
});

test("one entry per kind drawn, each with text", () => {
  const kinds = keyEntries(theme(false)).map((e) => e.kind);
  assert.deepEqual(kinds, ["leaf", "op", "root", "collapsed", "expanded", "folded", "ghost", "edge", "edge-many"]);
  for (const e of keyEntries(theme(false))) assert.ok(e.text.length > 10, e.kind);
});

test("swatches follow the theme: leaves blue, closed boxes dashed, folded double, ghosts dashed grey", () => {
  for (const dark of [false, true]) {
    const t = theme(dark);
    const by = Object.fromEntries(keyEntries(t).map((e) => [e.kind, e.swatch]));
    assert.equal(by.leaf.fill, t.leafFill);
    assert.equal(by.leaf.stroke, t.brand);
    assert.equal(by.op.fill, t.panelAlt);
    assert.equal(by.root.stroke, t.text);
    assert.ok(by.root.strokeWidth > by.op.strokeWidth);
    assert.ok(by.collapsed.dashed && !by.folded.dashed && by.folded.double);
    assert.ok(by.ghost.dashed && by.ghost.stroke === t.ghost);
    assert.equal(by["edge-many"].label, "×2");
    assert.equal(by.edge.stroke, t.edge);
  }
});

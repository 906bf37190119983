// Pure parts of the panels: where names may break (dom.ts), which notes get a line (toolbar.ts) and the
// zoom chip's words.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { breakParts } from "../src/panels/dom";
import { notesToShow, zoomChipText } from "../src/panels/toolbar";

test("names break after '.' and '_' only, never at a decimal point", () => {
  assert.deepEqual(breakParts("blocks.0.mlp.c_fc.weight"), ["blocks.", "0.", "mlp.", "c_", "fc.", "weight"]);
  assert.deepEqual(breakParts("0.8551 max"), ["0.8551 max"]);
  assert.deepEqual(breakParts("h.1.attn"), ["h.", "1.", "attn"]);
  assert.deepEqual(breakParts("weight"), ["weight"]);
  assert.deepEqual(breakParts("a_"), ["a_"]);
  assert.equal(breakParts("transformer.h.11.mlp.c_proj.bias").join(""), "transformer.h.11.mlp.c_proj.bias");
});

test("the no-capture note shows only above 25 nodes; other notes always", () => {
  const notes = ["No module boxes: this graph was traced without module capture.", "Compiled region: one node."];
  assert.deepEqual(notesToShow(notes, 8), ["Compiled region: one node."]);
  assert.deepEqual(notesToShow(notes, 25), ["Compiled region: one node."]);
  assert.deepEqual(notesToShow(notes, 26), notes);
});

test("the zoom chip: the fit zoom when the view shows a part, the zoom when it shows the whole", () => {
  assert.equal(zoomChipText({ percent: 76.4, fits: false, outside: "" }), "76% fits ⤢");
  assert.equal(zoomChipText({ percent: 100, fits: true, outside: "" }), "100% · whole graph");
});

// Where a finding goes (state.ts): its node or box id for reveal, or the words for where it applies.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { appliesText, findingTarget } from "./state";

test("a box is written call:<id> by Python and revealed by its call id; a node id passes through", () => {
  assert.equal(findingTarget("call:blocks.1.mlp"), "blocks.1.mlp");
  assert.equal(findingTarget("call:head (call 2)"), "head (call 2)");
  assert.equal(findingTarget("n12"), "n12");
  assert.equal(findingTarget(""), "");
});

test("a finding with no node says where it applies; one with a node says nothing", () => {
  assert.equal(appliesText({ kind: "zero-grad-before-step", target: "SGD", node: "" }), "not on the graph: applies to the optimizer step");
  assert.equal(appliesText({ kind: "double-backward", target: "loss", node: "" }), "not on the graph: applies to the step's backward calls");
  assert.equal(appliesText({ kind: "mode", target: "model", node: "" }), "not on the graph: applies to the model's train/eval mode");
  // A kind with no scope of its own: its target.
  assert.equal(appliesText({ kind: "no-grad", target: "fc.weight", node: "" }), "not on the graph: applies to fc.weight");
  assert.equal(appliesText({ kind: "zero-grad-before-step", target: "SGD", node: "n3" }), "");
});

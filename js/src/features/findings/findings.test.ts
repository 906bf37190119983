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

test("a finding with no node says where it applies, from the scope its record carries", () => {
  assert.equal(appliesText({ scope: "the optimizer step", target: "SGD", node: "" }), "not on the graph: applies to the optimizer step");
  // A kind the page has never heard of: the record's scope is all it needs.
  assert.equal(appliesText({ scope: "the learning-rate schedule", target: "StepLR", node: "" }), "not on the graph: applies to the learning-rate schedule");
  // A kind about a tensor (no scope): its target.
  assert.equal(appliesText({ scope: "", target: "fc.weight", node: "" }), "not on the graph: applies to fc.weight");
  // On the graph: nothing to say.
  assert.equal(appliesText({ scope: "the optimizer step", target: "SGD", node: "n3" }), "");
});

// The verification banner's level and text (panel.ts): green only when everything predicted was
// checked; amber when what was checked agrees but something could not be; red on disagreement.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { verificationLevel, verificationLines } from "./panel";

const toggles = { detach: ["n3:0", "n7:0"], freeze: [] };
const why = "the detach of the TBackward0 output in 2 (Linear) was not replayed: it is made inside a fused op";

test("complete and agreeing: green, naming the leaves", () => {
  const v = { toggles, predicted_lost: ["a", "b"], checked_lost: ["a", "b"], actual_lost: ["a", "b"], agree: true, complete: true, unverifiable: [], error: "" };
  assert.equal(verificationLevel(v), "ok");
  const text = verificationLines(v).map(([, l]) => l);
  assert.equal(text[0], "Verified by re-running PyTorch: 2 leaves lose gradient, as predicted (a, b).");
  assert.match(text.at(-1) ?? "", /which leaves get a gradient, not the gradients' values/);
});

test("a toggle not replayed: amber, with what was and was not checked", () => {
  const v = { toggles, predicted_lost: ["a", "b"], checked_lost: ["a"], actual_lost: ["a"], agree: true, complete: false, unverifiable: [why], error: "" };
  assert.equal(verificationLevel(v), "partial");
  const text = verificationLines(v).map(([, l]) => l);
  assert.equal(text[0], "Partly verified by re-running PyTorch: a loses gradient, as predicted (1 of 2 predicted leaves checked).");
  assert.ok(text.includes("Not checked: b (predicted to lose gradient), because:"));
  assert.ok(text.includes(`• ${why}.`));
  // Even when the checked prediction covers every predicted leaf, an unapplied toggle is not "verified".
  assert.equal(verificationLevel({ ...v, predicted_lost: ["a"] }), "partial");
  // Older results (no checked_lost / complete) fall back to the unverifiable list.
  assert.equal(verificationLevel({ toggles, predicted_lost: ["a"], actual_lost: ["a"], agree: true, unverifiable: [why], error: "" }), "partial");
  assert.equal(verificationLevel({ toggles, predicted_lost: ["a"], actual_lost: ["a"], agree: true, unverifiable: [], error: "" }), "ok");
});

test("disagreement or failure: red", () => {
  const v = { toggles, predicted_lost: ["a", "b"], checked_lost: ["a"], actual_lost: [], agree: false, complete: false, unverifiable: [why], error: "" };
  assert.equal(verificationLevel(v), "bad");
  assert.match(verificationLines(v)[0]?.[1] ?? "", /disagree: predicted to lose gradient but got one: a\./);
  assert.equal(verificationLevel({ ...v, agree: true, error: "RuntimeError: boom" }), "bad");
  assert.deepEqual(verificationLines({ ...v, error: "RuntimeError: boom" }), [["", "Verification failed: RuntimeError: boom"]]);
});

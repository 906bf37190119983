// The shared predict-and-verify mode (core/mode.ts, panels/mode.ts): both questions, what-if and
// checkpointing, get the same button, bar, banner and clear, and one verify request naming the question.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { Core } from "../src/core/context";
import { Messenger } from "../src/core/messages";
import { createMode } from "../src/core/mode";
import { CHECKPOINT_MODE, checkpointBanner } from "../src/features/checkpoint/panel";
import { WHATIF_MODE, whatIfBanner } from "../src/features/whatif/panel";
import type { ModeSpec } from "../src/panels/mode";
import type { PageRequest } from "../src/payload";
import { FakeElement, withFakeDom } from "./fakedom";

function mount(spec: ModeSpec) {
  const sent: PageRequest[] = [];
  const status = withFakeDom(() => new FakeElement("DIV"));
  const tools = withFakeDom(() => new FakeElement("DIV"));
  const dataset: Record<string, string> = {};
  const core = {
    root: { dataset },
    toolbar: { status: { add: (el: FakeElement) => status.append(el) } },
    messenger: new Messenger((m) => sent.push(m)),
  } as unknown as Core;
  const calls: string[] = [];
  const mode = withFakeDom(() =>
    createMode(core, { tools } as never, spec, { clear: () => calls.push("clear"), switched: (on) => calls.push(`switched ${on}`) }),
  );
  return { mode, sent, status, tools, dataset, calls };
}

for (const spec of [WHATIF_MODE, CHECKPOINT_MODE]) {
  test(`${spec.question}: the shared mode's button, bar, clear and verify request`, () => {
    const { mode, sent, status, tools, dataset, calls } = mount(spec);
    const button = tools.byTestId(spec.button.testid)!;
    assert.equal(button.getAttribute("aria-pressed"), "false");
    withFakeDom(() => button.dispatch("click"));
    assert.equal(mode.on, true);
    assert.equal(button.getAttribute("aria-pressed"), "true");
    assert.equal(dataset[`${spec.question}Mode`], "true");
    assert.deepEqual(calls, ["switched true"]);

    const panel = status.byTestId(spec.panel.testid)!;
    assert.equal(panel.hidden, true, "nothing shown before the first update");
    withFakeDom(() => mode.show({ visible: true, summary: "2 of 5 lose gradient", bad: true, marked: true, canVerify: true }, null));
    assert.equal(panel.hidden, false);
    assert.equal(status.byTestId(spec.summary.testid)!.textContent, "2 of 5 lose gradient");
    // The verdict leads the summary in its own (bad) element; the costs follow it.
    withFakeDom(() => mode.show({ visible: true, verdict: "12 leaves lose gradient", summary: "578.6 KiB → 0 B", bad: true, marked: true, canVerify: true }, null));
    const verdict = status.byTestId(`${spec.summary.testid}-verdict`)!;
    assert.equal(verdict.hidden, false);
    assert.ok(verdict.classList.contains("gradviz-wi-bad"));
    assert.equal(status.byTestId(spec.summary.testid)!.textContent, "12 leaves lose gradient · 578.6 KiB → 0 B");
    withFakeDom(() => mode.show({ visible: true, summary: "2 of 5 lose gradient", bad: true, marked: true, canVerify: true }, null));
    assert.equal(verdict.hidden, true);
    assert.equal(status.byTestId(spec.hint.testid)!.hidden, true, "the hint goes once something is marked");

    withFakeDom(() => status.byTestId(spec.verify.testid)!.dispatch("click"));
    assert.deepEqual(sent.map((m) => [m.kind, m.body]), [["verify", { question: spec.question }]], "one verify request, by question");
    withFakeDom(() => status.byTestId(spec.clear.testid)!.dispatch("click"));
    assert.equal(calls.at(-1), "clear");
    assert.match(dataset[`${spec.question}Ms`] ?? "", /^\d+\.\d$/, "a clear is a timed edit");

    withFakeDom(() => mode.show({ visible: false, summary: "", bad: false, marked: false, canVerify: false }, null));
    assert.equal(panel.hidden, true);
    withFakeDom(() => mode.show({ visible: false, summary: "", bad: false, marked: false, canVerify: false }, { lines: [["", "Verified."]], level: "ok", stale: true }));
    const banner = status.byTestId(spec.banner.testid)!;
    assert.equal(panel.hidden, false, "a banner shows on its own");
    // A re-run of earlier marks: labelled first, grey, never in its verdict's colour.
    assert.ok(banner.classList.contains("gradviz-verified-stale") && !banner.classList.contains("gradviz-verified-ok"));
    assert.equal(banner.textContent, `${spec.banner.stale}Verified.`);
    withFakeDom(() => mode.show({ visible: true, summary: "", bad: false, marked: true, canVerify: false }, { lines: [["", "Prediction and PyTorch disagree"]], level: "bad", stale: true }));
    assert.ok(!banner.classList.contains("gradviz-verified-bad"), "a stale disagreement is not red");
    withFakeDom(() => mode.show({ visible: true, summary: "", bad: false, marked: true, canVerify: false }, { lines: [["", "Prediction and PyTorch disagree"]], level: "bad", stale: false }));
    assert.ok(banner.classList.contains("gradviz-verified-bad"), "a current one is");
  });
}

test("each question's banner: its own lines and level, stale when the marks changed", () => {
  const toggles = { detach: ["n4:0"], freeze: [] };
  const wi = whatIfBanner({ toggles, predicted_lost: ["w"], actual_lost: ["w"], agree: true, unverifiable: [], error: "" }, toggles);
  assert.equal(wi?.level, "ok");
  assert.equal(wi?.stale, false);
  assert.equal(whatIfBanner({ toggles, predicted_lost: [], actual_lost: [], agree: true, unverifiable: [], error: "" }, { detach: [], freeze: [] })?.stale, true);
  assert.equal(whatIfBanner({}, toggles), null);
  const ck = checkpointBanner({ marks: { "blocks.0": "reentrant" }, agree: false, error: "RuntimeError: x" }, { "blocks.0": "reentrant" });
  assert.equal(ck?.level, "bad");
  assert.equal(ck?.stale, false);
  assert.equal(checkpointBanner(null, {}), null);
});

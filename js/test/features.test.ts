// The overlay, search, findings, folding and why features as the core drives them (a stub core: the
// model, the payload and its indexes, a messenger that records requests; panels on a fake DOM), and
// the stepper's and what-if's pure controls the features are now thin over.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import type { Core } from "../src/core/context";
import { Messenger } from "../src/core/messages";
import { findings } from "../src/features/findings/feature";
import { folding } from "../src/features/folding/feature";
import { overlay } from "../src/features/overlay/feature";
import { detailRows, overlayTooltip, TOOLTIP_ROWS } from "../src/features/overlay/state";
import { search } from "../src/features/search/feature";
import { SEARCH_DEBOUNCE_MS } from "../src/features/search/panel";
import { atEnd, clickTarget, initialStepper, keyAction, type KeyPress } from "../src/features/stepper/control";
import { indexRecording } from "../src/features/stepper/state";
import { answerCopy, clickToggles, evaluate } from "../src/features/whatif/state";
import { why } from "../src/features/why/feature";
import { ASKING, whyRows } from "../src/features/why/state";
import type { RowAction } from "../src/panels/details";
import type { DoctorFinding, GraphPayload, Overlay, PageRequest, Recording, Traits } from "../src/payload";
import { expandAll } from "../src/state/expansion";
import { foldedCalls, indexFolds } from "../src/state/fold";
import { callKey, indexCalls, nodeKey, visibleGraph } from "../src/state/quotient";
import { layoutBounds, toElements } from "../src/view/elements";
import { FakeElement, installFakeDom, withFakeDom } from "./fakedom";

const fixture = <T>(name: string): T => JSON.parse(readFileSync(new URL(`../../tests/fixtures/${name}`, import.meta.url), "utf8"));
const nested = (): GraphPayload => fixture<GraphPayload>("nested_modules.json");

interface Stub {
  core: Core;
  sent: PageRequest[];
  traits: Partial<Traits>;
  slots: { top: FakeElement; side: FakeElement; body: FakeElement; tools: FakeElement };
}

function stubCore(payload: GraphPayload, traits: Partial<Traits> = {}): Stub {
  const index = indexCalls(payload);
  const folds = indexFolds(payload, index);
  const sent: PageRequest[] = [];
  const core = {
    model: { get: (k: keyof Traits) => traits[k], set: (k: keyof Traits, v: never) => void (traits[k] = v), save_changes() {}, on() {}, off() {}, send() {} },
    payload,
    index,
    expanded: new Set<string>(),
    folds,
    unfolded: new Set<string>(),
    folded: foldedCalls(folds, new Set(), new Set()),
    messenger: new Messenger((m) => sent.push(m)),
    features: [],
    focus: null,
  } as unknown as Core;
  const slots = withFakeDom(() => ({ top: new FakeElement("DIV"), side: new FakeElement("DIV"), body: new FakeElement("DIV"), tools: new FakeElement("DIV") }));
  return { core, sent, traits, slots };
}

const flowLike = (): Overlay => ({
  title: "gradient L2 norm",
  values: { "2": 0.5, "3": 0.25, "call:blocks.0.fc": 0.56 },
  scale: "log",
  encoding: "color",
  marks: { "1": "no-grad" },
  unit: "",
  detail: { "call:blocks.0.fc": Array.from({ length: 8 }, (_, i) => [`p${i}`, String(8 - i)] as [string, string]) },
});

test("overlay: values, marks and detail rows reach decorations, tooltips, details and the hook", () => {
  const { core, slots } = stubCore(nested(), { overlay: flowLike() });
  const f = overlay(core, slots as never);
  f.loaded?.();
  const shown = visibleGraph(core.payload, new Set(["blocks.0"]), core.index);
  const deco = f.decorate?.(shown);
  assert.ok(deco?.fill?.get(callKey("blocks.0.fc"))?.startsWith("heat-"), "the closed box is coloured by its own value");
  assert.equal(deco?.suffixes?.get(nodeKey("1")), " ⊘");
  const tip = f.tooltip?.(callKey("blocks.0.fc")) ?? "";
  assert.deepEqual(tip.split("\n"), ["gradient L2 norm: 0.56", "p0: 8", "p1: 7", "p2: 6", "p3: 5", "p4: 4", "p5: 3", "… and 2 more (details panel)"]);
  const call = core.index.calls.get("blocks.0.fc")!;
  assert.equal(f.callDetails?.(call).length, 8, "the details panel lists every row");
  assert.deepEqual(f.details?.(core.payload.nodes[1]), [], "a node without detail gets no rows");
  assert.equal(f.hooks?.overlayOf(nodeKey("1")).mark, "no-grad");
  assert.equal(f.legend?.()?.spec.title, "gradient L2 norm");
});

test("overlay detail: element keys map to detail keys; no detail, no rows; few rows, no 'more' line", () => {
  const ov = flowLike();
  assert.equal(detailRows(ov, callKey("blocks.0.fc")).length, 8);
  assert.deepEqual(detailRows(ov, "f:fold:blocks.0"), []);
  assert.deepEqual(detailRows({ ...ov, detail: { "3": [["bias", "0.25"]] } }, nodeKey("3")), [["bias", "0.25"]]);
  assert.equal(overlayTooltip({ ...ov, detail: { "3": [["bias", "0.25"]] } }, nodeKey("3"), 0.25, undefined), "gradient L2 norm: 0.25\nbias: 0.25");
  assert.equal(overlayTooltip(ov, callKey("blocks.0.fc"), 1, undefined).split("\n").length, TOOLTIP_ROWS + 2);
});

test("search: the hook ranks exact matches first; typing shows matching hits or 'no match', Escape clears", async () => {
  const { core, slots } = stubCore(nested());
  const restore = installFakeDom();
  const f = search(core, slots as never);
  assert.deepEqual(f.hooks?.search("head").map((h) => h.key).slice(0, 1), [callKey("head")]);
  const input = slots.tools.byTestId("gradviz-search")!;
  const results = slots.body.byTestId("gradviz-search-results")!;
  const type = async (q: string): Promise<void> => {
    input.value = q;
    input.dispatch("input");
    await new Promise((r) => setTimeout(r, SEARCH_DEBOUNCE_MS + 30));
  };
  try {
    await type("fc");
    assert.equal(results.hidden, false);
    const hits = results.querySelectorAll(".gradviz-search-hit").map((b) => b.textContent);
    assert.ok(hits.length >= 2 && hits.every((t) => t.toLowerCase().includes("fc")), hits.join(" | "));
    await type("zzz-nothing");
    assert.equal(results.textContent, "no match");
    input.dispatch("keydown", { key: "Escape" }); // clears: focus was null, so nothing is redrawn
    assert.equal(results.hidden, true);
    assert.equal(input.value, "");
  } finally {
    f.dispose?.();
    restore();
  }
});

test("findings: one row per finding, the head counts them, the first view focuses the first on the graph", () => {
  const list: DoctorFinding[] = [
    { kind: "no-grad", target: "embed.weight", message: "no gradient", evidence: "cut", fix: "x", step: 0, node: "", scope: "" },
    { kind: "detached", target: "blocks.0", message: "detached", evidence: "detach()", fix: "y", step: 0, node: "blocks.0.fc", scope: "" },
    { kind: "nan", target: "head", message: "NaN", evidence: "log(0)", fix: "z", step: 0, node: "12", scope: "" },
  ];
  const { core, slots, traits } = stubCore(nested(), { findings: list });
  const f = withFakeDom(() => findings(core, slots as never));
  withFakeDom(() => f.loaded?.());
  const panel = slots.side.byTestId("gradviz-findings")!;
  assert.equal(panel.hidden, false);
  assert.equal(slots.side.byTestId("gradviz-findings-head")!.textContent, "Doctor: 3 findings (click one to see it)");
  assert.equal(panel.querySelectorAll(".gradviz-finding").length, 3);
  assert.deepEqual(f.subject?.()?.keys, [callKey("blocks.0.fc")], "a call id is a box; the first finding has no node");
  traits.findings = [list[2]];
  assert.deepEqual(f.subject?.()?.keys, [nodeKey("12")]);
  traits.findings = [];
  withFakeDom(() => f.traits?.findings());
  assert.equal(panel.hidden, true);
  assert.equal(f.subject?.() ?? null, null);
});

test("folding: only a click on a stack is the feature's; the hook lists the stacks drawn folded", () => {
  const { core, slots } = stubCore(nested());
  const f = folding(core, slots as never);
  assert.equal(f.click?.(nodeKey("5"), "op", false), false);
  assert.equal(f.click?.(callKey("head"), "collapsed", false), false);
  assert.deepEqual(f.hooks?.folded(), []);
  core.folded = new Map([["blocks.0", { id: "fold:blocks.0", calls: ["blocks.0", "blocks.0 (call 2)"], parent: "", type: "Block" }]]);
  assert.deepEqual(f.hooks?.folded(), ["fold:blocks.0"]);
});

test("why: a button until asked, one request per leaf, then the answer's rows; errors and missing said", () => {
  const { core, slots, sent } = stubCore(nested(), { selected: "" });
  const f = why(core, slots as never);
  f.loaded?.();
  const leaf = core.payload.nodes.find((n) => n.kind === "leaf")!;
  const op = core.payload.nodes.find((n) => n.kind === "op")!;
  const lead = (n: typeof leaf) => f.leadDetails?.(n)?.rows ?? [];
  assert.equal(f.leadDetails?.(op), null);
  assert.equal(f.leadDetails?.(leaf)?.collapse, false, "the facts stay open until an answer leads");
  const first = lead(leaf);
  assert.equal(first.length, 1);
  const button = first[0][2] as RowAction;
  assert.equal(button.testid, "gradviz-why");
  button.run();
  button.run(); // asked once
  assert.deepEqual(sent.map((m) => [m.kind, m.body]), [["why", { node: leaf.id }]]);
  assert.deepEqual(lead(leaf), [["why", ASKING]]);
  assert.equal(f.hooks?.whyOf(leaf.id), "waiting");
  core.messenger.receive({ id: sent[0].id, kind: "reply", ok: true, body: { node: leaf.id, missing: "", answer: { name: "embed.weight", status: "none", kind: "detached", cause: "x.detach() in embed", evidence: "line 12", fix: "drop the detach", node: "4" } } });
  const rows = lead(leaf);
  // cause and fix first (a narrow panel shows them), then the evidence; the leaf's facts fold away under them
  assert.deepEqual(rows.slice(0, 4), [["why", "no gradient (.grad is None) · detached"], ["  cause", "x.detach() in embed"], ["  fix", "drop the detach"], ["  evidence", "line 12"]]);
  assert.equal(f.leadDetails?.(leaf)?.collapse, true);
  assert.equal((rows[4][2] as RowAction).testid, "gradviz-why-show");
  // the node the cause is at is named by its op and module, never by its id
  const at = core.payload.nodes.find((n) => n.id === "4")!;
  assert.equal(rows[4][1], at.module ? `${at.op || at.label} in ${at.module}` : at.op || at.label);
  assert.doesNotMatch(rows[4][1], /^\d+$|^n\d+$/);
  const other = core.payload.nodes.filter((n) => n.kind === "leaf")[1];
  f.hooks?.askWhy(other.id);
  core.messenger.receive({ id: sent[1].id, kind: "reply", ok: false, error: "why: boom" });
  assert.deepEqual(lead(other), [["why", "not answered: why: boom"]]);
  assert.deepEqual(whyRows(true, { node: "n", answer: null, missing: "not saved in this export" }, () => {}), [["why", "not saved in this export"]]);
  assert.deepEqual(whyRows(true, { node: "n", answer: { name: "w", status: "ok", kind: "", cause: "", evidence: "", fix: "", node: "" }, missing: "" }, () => {}), [["why", "its gradient is fine"]]);
  f.loaded?.(); // a new payload forgets the answers
  assert.equal(f.hooks?.whyOf(leaf.id), null);
});

test("stepper controls: keys, clicks and the end of playing, without a page", () => {
  const { graph, recording } = fixture<{ graph: GraphPayload; recording: Recording }>("recording_scalar.json");
  const m = initialStepper();
  const press = (key: string, more: Partial<KeyPress> = {}): KeyPress => ({ key, altKey: false, ctrlKey: false, metaKey: false, tag: "", ...more });
  assert.equal(keyAction(m, press("ArrowRight")), null, "no recording: keys are not the stepper's");
  m.rix = indexRecording(recording, graph);
  assert.equal(keyAction(m, press("ArrowRight")), "forward");
  assert.equal(keyAction(m, press("ArrowLeft")), "back");
  assert.equal(keyAction(m, press(" ")), "play");
  assert.equal(keyAction(m, press(" ", { tag: "BUTTON" })), null);
  assert.equal(keyAction(m, press("ArrowRight", { tag: "INPUT", inputType: "range" })), null);
  assert.equal(keyAction(m, press("ArrowRight", { ctrlKey: true })), null);
  assert.equal(clickTarget(m, nodeKey("n2"), "leaf"), recording.steps.findIndex((s) => s.node === "n2"));
  assert.equal(clickTarget(m, nodeKey("n2"), "collapsed"), null);
  assert.equal(atEnd(m), false);
  m.cursor = recording.steps.length - 1;
  assert.equal(atEnd(m), true);
});

test("what-if clicks: leaf freezes, op and box detach, shift on a box freezes, stacks and roots do nothing", () => {
  const t = { detach: [], freeze: [] };
  assert.deepEqual(clickToggles(t, nodeKey("2"), "leaf", false), { detach: [], freeze: ["2"] });
  assert.deepEqual(clickToggles(t, nodeKey("5"), "op", true), { detach: ["5"], freeze: [] });
  assert.deepEqual(clickToggles(t, callKey("head"), "collapsed", false), { detach: ["call:head"], freeze: [] });
  assert.deepEqual(clickToggles(t, callKey("head"), "expanded", true), { detach: [], freeze: ["call:head"] });
  for (const kind of ["root", "ghost", "folded"]) assert.equal(clickToggles(t, "x:1", kind, false), null);
  assert.deepEqual(clickToggles({ detach: ["5"], freeze: [] }, nodeKey("5"), "op", false), { detach: [], freeze: [] });
  assert.deepEqual(answerCopy(evaluate(nested(), { detach: [], freeze: ["2"] })).lost_ids, ["2"]);
  assert.deepEqual(answerCopy(evaluate(nested(), { detach: ["call:head"], freeze: [] })).lost_ids, ["1", "2", "3"]);
});

test("toElements: one element per item and edge, open boxes trimmed to their header, z by depth", () => {
  const p = nested();
  const index = indexCalls(p);
  const g = visibleGraph(p, expandAll(index), index);
  const positions = new Map(g.items.map((it, i) => [it.key, { x: i * 10, y: i * 20 }]));
  const boxes = new Map(g.items.filter((it) => it.type === "expanded").map((it) => [it.key, { width: 200, height: 120 }]));
  const sizes = new Map(g.items.map((it) => [it.key, { width: 60, height: 24 }]));
  const els = toElements(g, { positions, boxes, routes: new Map() }, sizes);
  assert.equal(els.length, g.items.length + g.edges.length);
  const inner = els.find((e) => e.data.id === callKey("blocks.0.fc"))!;
  assert.equal(inner.data.kind, "expanded");
  assert.equal(inner.data.z, 1);
  assert.equal(inner.data.box, callKey("blocks.0"));
  assert.ok((inner.data.h as number) < 120 && inner.position!.y > positions.get(callKey("blocks.0.fc"))!.y);
  const leaf = els.find((e) => e.data.id === nodeKey("3"))!;
  assert.deepEqual([leaf.data.w, leaf.data.h, leaf.data.base], [60, 24, leaf.data.label]);
  const edge = els.find((e) => e.group === "edges")!;
  assert.equal(edge.classes, "", "no route: neither routed nor pinned");
  const b = layoutBounds({ positions, boxes, routes: new Map() }, sizes, (_k, open) => !open)!;
  assert.equal(b.x1, Math.min(...g.items.filter((it) => it.type !== "expanded").map((it) => positions.get(it.key)!.x)) - 30);
});

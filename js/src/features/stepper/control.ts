// The stepper's controls as pure functions over its state (node tests reach them; feature.ts only
// wires them to the model, the panel and the timer): what a key does, what a click moves to, when
// playing stops, the panel's facts, the legend, the hover text and the decoration handed to the paint.
import type { Decoration, LegendSpec } from "../../core/feature";
import type { GraphNode, ModuleCall } from "../../payload";
import { nodeTitle } from "../../state/labels";
import { splitFill } from "../../state/classes";
import { fmt } from "../../state/numbers";
import type { VisibleGraph } from "../../state/quotient";
import { HEAT_ZERO, MARK } from "../../view/style";
import type { StepperState } from "./panel";
import { runTo, type RunRule, type RunStop } from "./breakpoints";
import {
  clampCursor,
  firstNonfinite,
  nextCursor,
  pendingLeaves,
  positionText,
  stepDecorations,
  stepForNode,
  type RecordingIndex,
  type StepView,
} from "./state";

/** What the stepper knows between two moves. */
export interface StepperModel {
  rix: RecordingIndex | null;
  cursor: number;
  sv: StepView | null;
  playing: boolean;
  speed: number;
  byModule: boolean;
  lastMs: number;
  flowEdges: string[];
  /** The last "Run to" stop (null before any; cleared with a new recording). */
  runStop: RunStop | null;
  /** What that stop ran to, in words ("the first NaN/Inf", "the first step in fc2"). */
  runWords: string;
  /** What the user chose last (a click on a node or box, a search pick, `selected` from Python): the
   *  element the box and leaf rules of "Run to" read. */
  pick: Pick | null;
}

/** An element the user chose: a module box (call id) or a node (leaf or not), and how text names it. */
export interface Pick {
  kind: "box" | "leaf" | "node";
  id: string;
  name: string;
}

export function initialStepper(): StepperModel {
  return { rix: null, cursor: -1, sv: null, playing: false, speed: 2, byModule: false, lastMs: 0, flowEdges: [], runStop: null, runWords: "", pick: null };
}

/** The pick a chosen id makes: a call id is a box, a node id a leaf or a node; null for an id the graph
 *  does not hold (or ""). `callIds` holds the graph's module calls. */
export function pickOf(id: string, nodes: ReadonlyMap<string, GraphNode>, callIds: ReadonlySet<string>): Pick | null {
  const bare = id.startsWith("call:") ? id.slice(5) : id;
  const n = nodes.get(bare);
  if (n) return { kind: n.kind === "leaf" ? "leaf" : "node", id: bare, name: n.names?.[0] || nodeTitle(n) };
  return callIds.has(bare) ? { kind: "box", id: bare, name: bare } : null;
}

/** The pick a canvas click makes: a box (open or closed), or a drawn node; null for anything else. */
export function clickPick(key: string, kind: string, nodes: ReadonlyMap<string, GraphNode>, callIds: ReadonlySet<string>): Pick | null {
  if (kind === "collapsed" || kind === "expanded") return pickOf("call:" + key.slice(2), nodes, callIds);
  if (kind === "op" || kind === "leaf" || kind === "root") return pickOf(key.slice(2), nodes, callIds);
  return null;
}

/** The element each rule needing one would run to, by name ("" when the pick does not apply). */
export function runTargets(m: StepperModel): { box: string; leaf: string } {
  const p = m.pick;
  return { box: p?.kind === "box" ? p.name : "", leaf: p?.kind === "leaf" ? p.name : "" };
}

/** A rule in the user's words (never its internal name). */
export function runWords(rule: RunRule, target: string, threshold: number): string {
  switch (rule) {
    case "nonfinite":
      return "the first NaN/Inf";
    case "zero":
      return "the first exact zero";
    case "above":
      return `the first norm above ${Number.isFinite(threshold) ? fmt(threshold) : "?"}`;
    case "jump":
      return "the largest jump in norm";
    case "module":
      return `the first step in ${target ? `box ${target}` : "a box"}`;
    case "leaf":
      return `the first delivery into ${target || "a leaf"}`;
  }
}

/** The parts of a key press a key binding looks at (a KeyboardEvent has them). */
export interface KeyPress {
  key: string;
  altKey: boolean;
  ctrlKey: boolean;
  metaKey: boolean;
  /** The focused element's tag ("" for none) and, for an input, its type. */
  tag: string;
  inputType?: string;
}

/** → / ← step, Space plays or pauses; keys meant for a focused control (a slider, a select, a button)
 *  are left alone, as are modified keys and every key without a recording. */
export function keyAction(m: StepperModel, k: KeyPress): "forward" | "back" | "play" | null {
  if (!m.rix || k.altKey || k.ctrlKey || k.metaKey) return null;
  const isRange = k.tag === "INPUT" && k.inputType === "range";
  if ((k.key === "ArrowRight" || k.key === "ArrowLeft") && !isRange && k.tag !== "SELECT") return k.key === "ArrowRight" ? "forward" : "back";
  if ((k.key === " " || k.key === "Spacebar") && !["BUTTON", "INPUT", "SELECT", "TEXTAREA"].includes(k.tag)) return "play";
  return null;
}

/** The cursor a user step moves to (by module box when `byModule`: `rep` gives the element drawn). */
export function stepTarget(m: StepperModel, dir: 1 | -1, rep: (nodeId: string) => string): number | null {
  return m.rix ? nextCursor(m.rix, m.cursor, dir, m.byModule ? rep : undefined) : null;
}

/** The step a click on an op or leaf jumps to (null: not the stepper's click). */
export function clickTarget(m: StepperModel, key: string, kind: string): number | null {
  if (!m.rix || (kind !== "op" && kind !== "leaf")) return null;
  return stepForNode(m.rix, m.cursor, key.slice(2));
}

/** Playing stops at the last step. */
export function atEnd(m: StepperModel): boolean {
  return !m.rix || m.cursor >= m.rix.steps.length - 1;
}

/** Clamp a cursor the model sent (`step` trait) to the recording. */
export function cursorFrom(m: StepperModel, step: unknown): number {
  return m.rix ? clampCursor(m.rix, Number(step ?? -1)) : -1;
}

/** What the panel shows for the current cursor (null: no recording). */
export function panelFacts(m: StepperModel, hasBoxes: boolean): StepperState | null {
  const { rix, sv } = m;
  if (!rix || !sv) return null;
  return {
    cursor: m.cursor,
    total: rix.steps.length,
    passes: rix.passes,
    pass: sv.pass,
    playing: m.playing,
    position: positionText(rix, sv),
    pending: pendingLeaves(rix, sv),
    boxes: hasBoxes,
    firstNonfinite: firstNonfinite(rix.steps),
    runText: m.runStop ? `Run to ${m.runWords}: ${m.runStop.text}` : "",
    targets: runTargets(m),
  };
}

/** Where "Run to" `rule` stops (kept in `m.runStop`, its words in `m.runWords`); the box and leaf rules
 *  run to the user's last pick (`m.pick`) when it is a box or a leaf, and say how to choose one when not. */
export function runToStop(m: StepperModel, rule: RunRule, calls: ModuleCall[], threshold: number): RunStop | null {
  if (!m.rix) return null;
  const src = { steps: m.rix.steps, nodes: m.rix.nodes, calls, passes: m.rix.passes, forward: m.rix.rec.forward };
  const targets = runTargets(m);
  const target = rule === "module" ? targets.box : rule === "leaf" ? targets.leaf : "";
  const sel = target && m.pick ? m.pick.id : "";
  m.runWords = runWords(rule, target, threshold);
  if ((rule === "module" || rule === "leaf") && !sel) {
    m.runStop = { rule, index: -1, node: "", text: `never hit: ${rule === "module" ? "click a module box" : "click a leaf (a parameter or input)"} first`, last: -1, healed: [], each: [] };
  } else if (rule === "above" && !(Number.isFinite(threshold) && threshold >= 0)) {
    m.runStop = { rule, index: -1, node: "", text: "never hit: give a finite threshold >= 0", last: -1, healed: [], each: [] };
  } else m.runStop = runTo(src, rule, sel, threshold);
  return m.runStop;
}

/** The received-gradient legend: the recording's norm range and the marks the stepper draws. */
export function stepperLegend(rix: RecordingIndex | null): LegendSpec {
  const sc = rix?.scale;
  return {
    title: "gradient each node received (‖·‖, log scale)",
    scaleText: "",
    min: sc ? fmt(sc.min) : "—",
    max: sc ? fmt(sc.max) : "—",
    ramp: true,
    items: [
      { kind: "run", text: "running now", border: MARK.run },
      { kind: "flow", text: "gradient sent now", fill: MARK.flow },
      { kind: "neutral", text: "not run yet" },
      { kind: "zero", text: "zero", fill: HEAT_ZERO },
    ],
  };
}

/** Hover text of a node that ran: the norm of the gradient it received. */
export function stepTooltip(m: StepperModel, key: string): string {
  if (!m.rix || !m.sv || !key.startsWith("n:")) return "";
  const r = m.sv.ran.get(key.slice(2));
  return r ? `gradient received: ‖·‖ ${r.nonfinite ? "NaN/Inf" : fmt(r.norm)}` : "";
}

/** The decoration for what is drawn now (updates `m.flowEdges`); while the cursor is on a step the
 *  stepper owns the fill and the sizes (an overlay's wait). */
export function stepperDecoration(m: StepperModel, sv: StepView | null, shown: VisibleGraph, rep: (nodeId: string) => string): Decoration | null {
  if (!m.rix || !sv) {
    m.flowEdges = [];
    return null;
  }
  const d = stepDecorations(m.rix, sv, shown, rep);
  m.flowEdges = [...d.edgeLabels.keys()];
  const { fill, rest } = splitFill(d.classes);
  const colouring = m.cursor >= 0;
  return colouring ? { classes: rest, fill, sizes: new Map(), lines: d.lines, edgeLabels: d.edgeLabels } : { classes: rest, lines: d.lines, edgeLabels: d.edgeLabels };
}

/** The facts `stepInfo()` gives tests and image export. */
export function stepInfo(m: StepperModel): { cursor: number; pass: number; node: string | null; flowEdges: string[]; playing: boolean; byModule: boolean } {
  return {
    cursor: m.cursor,
    pass: m.rix ? (m.sv?.pass ?? 0) : 0,
    node: m.sv?.step ? m.sv.step.node : null,
    flowEdges: [...m.flowEdges],
    playing: m.playing,
    byModule: m.byModule,
  };
}

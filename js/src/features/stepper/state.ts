// The backward stepper's pure state: where the cursor is in a Recording, what has run, which edges
// carry gradient now, how many contributions each leaf has received, and what the canvas and the
// details panel show for it. No DOM: unit-tested in node (js/test/stepper.test.ts).
//
// Cursor: -1 before the first step, else an index into `recording.steps` (the synced trait `step`).
// The "current pass" is the cursor's step's pass (pass 0 before the start). Being at the last step
// of pass p is also the state just before pass p+1 begins.
import type { GraphNode, GraphPayload, RecordedGrad, RecordedStep, Recording } from "../../payload";
import { nodeTitle } from "../../state/labels";
import { BINS, binOf, fmt, fmtVec, scaleOf, type Scale } from "../../state/numbers";
import type { VisibleGraph } from "../../state/quotient";
import { addClass } from "../../state/classes";
import { reviveRecording } from "../../state/finite";

/** Tensors with at most this many elements show "data | grad" on their node. */
export const SMALL_LABEL = 4;

export interface RecordingIndex {
  rec: Recording;
  steps: RecordedStep[];
  passes: number;
  /** Per pass: first global step index, and one past the last. */
  passStart: number[];
  passEnd: number[];
  /** Per pass: node id -> global step index (each node runs at most once per pass). */
  stepOf: Map<string, number>[];
  /** Per pass: node id -> deliveries into it, in order: [global step index, delivery index]. */
  incoming: Map<string, [number, number][]>[];
  /** Log scale over every received-gradient norm of the recording (stable while stepping). */
  scale: Scale | null;
  nodes: Map<string, GraphNode>;
  /** Roots: gradient seeded into them = what their producer received at that output. */
  rootSource: Map<string, { node: string; output: number }>;
}

/** Global index of the first step that SENT a NaN/Inf gradient while receiving only finite ones (where
 *  it was born in backward); else of the first step touching any; -1 when every gradient is finite.
 *  Mirrors Python's BackwardRecording.first_nonfinite. */
export function firstNonfinite(steps: RecordedStep[]): number {
  const bad = (gs: (RecordedGrad | null)[]): boolean => gs.some((g) => !!g && g.nonfinite);
  const born = steps.findIndex((s) => bad(s.sent) && !bad(s.received));
  return born >= 0 ? born : steps.findIndex((s) => bad(s.sent) || bad(s.received));
}

/** `{}` (or anything without steps) is no recording. */
export function normalizeRecording(r: Partial<Recording> | null | undefined): Recording | null {
  if (!r || !Array.isArray(r.steps) || r.steps.length === 0) return null;
  const forward = typeof r.forward === "string" && r.forward ? { forward: r.forward } : {};
  return reviveRecording({ passes: Number(r.passes) || 1, steps: r.steps, values: r.values && typeof r.values === "object" ? r.values : {}, ...forward });
}

/** Combined norm of a node's received gradients (all outputs); nonfinite if any is. */
export function receivedNorm(step: RecordedStep): { norm: number; nonfinite: boolean } {
  let sq = 0;
  let nonfinite = false;
  for (const g of step.received ?? []) {
    if (!g) continue;
    sq += g.norm * g.norm;
    nonfinite = nonfinite || g.nonfinite || !Number.isFinite(g.norm);
  }
  return { norm: Math.sqrt(sq), nonfinite };
}

export function indexRecording(rec: Recording, payload: GraphPayload): RecordingIndex {
  const steps = rec.steps;
  let passes = Math.max(1, rec.passes || 1);
  for (const s of steps) passes = Math.max(passes, (s.pass ?? 0) + 1);
  const passStart = new Array<number>(passes).fill(-1);
  const passEnd = new Array<number>(passes).fill(-1);
  const stepOf = Array.from({ length: passes }, () => new Map<string, number>());
  const incoming = Array.from({ length: passes }, () => new Map<string, [number, number][]>());
  steps.forEach((s, i) => {
    const p = s.pass ?? 0;
    if (passStart[p] < 0) passStart[p] = i;
    passEnd[p] = i + 1;
    if (!stepOf[p].has(s.node)) stepOf[p].set(s.node, i);
    (s.deliveries ?? []).forEach(([target], d) => {
      let list = incoming[p].get(target);
      if (!list) incoming[p].set(target, (list = []));
      list.push([i, d]);
    });
  });
  // A pass with no steps (should not happen) sits where the previous one ended.
  for (let p = 0; p < passes; p++) {
    if (passStart[p] < 0) {
      passStart[p] = p > 0 ? passEnd[p - 1] : 0;
      passEnd[p] = passStart[p];
    }
  }
  const nodes = new Map(payload.nodes.map((n) => [n.id, n] as const));
  const rootSource = new Map<string, { node: string; output: number }>();
  for (const e of payload.edges) {
    if (nodes.get(e.target)?.kind === "root") rootSource.set(e.target, { node: e.source, output: e.output_nr });
  }
  const scale = scaleOf(steps.map((s) => receivedNorm(s).norm), "log");
  return { rec, steps, passes, passStart, passEnd, stepOf, incoming, scale, nodes, rootSource };
}

export function clampCursor(ix: RecordingIndex, c: number): number {
  if (!Number.isFinite(c)) return -1;
  return Math.max(-1, Math.min(ix.steps.length - 1, Math.trunc(c)));
}

export function passOf(ix: RecordingIndex, cursor: number): number {
  return cursor >= 0 && cursor < ix.steps.length ? ix.steps[cursor].pass ?? 0 : 0;
}

export interface Contribution {
  /** Deliveries into the node so far in the current pass, and in the whole pass. */
  got: number;
  total: number;
  /** Sum of the delivered gradients' values so far, when every one of them has values. */
  partial: number[] | null;
  /** The node itself has run (its buffer was consumed). */
  ran: boolean;
}

export interface Flow {
  /** The node that receives the gradient (forward: the producer, the edge's source). */
  to: string;
  /** The node that sends it (forward: the consumer, the edge's target): the running node. */
  from: string;
  output: number;
  input: number;
  grad: RecordedGrad | null;
}

export interface StepView {
  cursor: number;
  pass: number;
  /** 1-based position of the cursor in its pass (0: before the pass's first step). */
  pos: number;
  passLen: number;
  step: RecordedStep | null;
  /** Nodes that ran in this pass up to the cursor -> combined received norm. */
  ran: Map<string, { norm: number; nonfinite: boolean }>;
  /** The gradients the running node sends, one per delivery. */
  flows: Flow[];
  /** Per node receiving deliveries in this pass (leaves and ops). */
  contributions: Map<string, Contribution>;
  /** Gradient value to print on small nodes that have it by now (ops: received; leaves: .grad). */
  grads: Map<string, number[]>;
}

export function stepView(ix: RecordingIndex, cursorIn: number): StepView {
  const cursor = clampCursor(ix, cursorIn);
  const pass = passOf(ix, cursor);
  const start = ix.passStart[pass];
  const end = ix.passEnd[pass];
  const step = cursor >= 0 ? ix.steps[cursor] : null;
  const ran = new Map<string, { norm: number; nonfinite: boolean }>();
  const grads = new Map<string, number[]>();
  for (let i = start; i <= cursor && i < end; i++) {
    const s = ix.steps[i];
    ran.set(s.node, receivedNorm(s));
    const node = ix.nodes.get(s.node);
    const g = node?.kind === "leaf" ? s.leaf_after ?? s.received?.[0] : s.received?.[0];
    if (g?.value) grads.set(s.node, g.value);
  }
  // A leaf that has not run yet in this pass still holds what earlier passes left in .grad.
  for (let i = Math.max(start, cursor + 1); i < end; i++) {
    const s = ix.steps[i];
    if (s.leaf_before?.value && !grads.has(s.node)) grads.set(s.node, s.leaf_before.value);
  }
  if (cursor >= start && cursor >= 0) {
    for (const [root, src] of ix.rootSource) {
      const i = ix.stepOf[pass].get(src.node);
      const g = i !== undefined ? ix.steps[i].received?.[src.output] : null;
      if (g?.value) grads.set(root, g.value);
    }
  }
  const contributions = new Map<string, Contribution>();
  for (const [target, list] of ix.incoming[pass]) {
    let got = 0;
    let partial: number[] | null = [];
    for (const [i, d] of list) {
      if (i > cursor) break;
      got++;
      const s = ix.steps[i];
      const g = s.sent?.[s.deliveries[d][2]];
      if (partial && g?.value && (partial.length === 0 || partial.length === g.value.length)) {
        partial = partial.length === 0 ? [...g.value] : partial.map((x, k) => x + g.value![k]);
      } else partial = null;
    }
    contributions.set(target, { got, total: list.length, partial: got > 0 ? partial : null, ran: ran.has(target) });
  }
  const flows: Flow[] = step
    ? (step.deliveries ?? []).map(([to, output, input]) => ({ to, from: step.node, output, input, grad: step.sent?.[input] ?? null }))
    : [];
  return {
    cursor,
    pass,
    pos: cursor >= start ? cursor - start + 1 : 0,
    passLen: end - start,
    step,
    ran,
    flows,
    contributions,
    grads,
  };
}

/** Next / previous cursor. With `rep` (node id -> what stands for it on screen), steps by visible
 *  element: forward to the first step whose representative (or pass) differs from the current one;
 *  back to the start of the current run of same-representative steps, or of the previous run. */
export function nextCursor(ix: RecordingIndex, cursor: number, dir: 1 | -1, rep?: (nodeId: string) => string): number {
  const c = clampCursor(ix, cursor);
  if (!rep) return clampCursor(ix, c + dir);
  const key = (i: number): string => `${ix.steps[i].pass ?? 0}\u0000${rep(ix.steps[i].node)}`;
  if (dir > 0) {
    if (c < 0) return ix.steps.length ? 0 : -1;
    const k = key(c);
    for (let i = c + 1; i < ix.steps.length; i++) if (key(i) !== k) return i;
    return c;
  }
  if (c <= 0) return -1;
  const runStart = (i: number): number => {
    const k = key(i);
    while (i > 0 && key(i - 1) === k) i--;
    return i;
  };
  const s = runStart(c);
  return s < c ? s : runStart(c - 1);
}

/** The step of `nodeId` in the cursor's pass (null when it did not run in that pass). */
export function stepForNode(ix: RecordingIndex, cursor: number, nodeId: string): number | null {
  return ix.stepOf[passOf(ix, cursor)].get(nodeId) ?? null;
}

/** The first step of pass `p`. */
export function passCursor(ix: RecordingIndex, p: number): number {
  const q = Math.max(0, Math.min(ix.passes - 1, p));
  return ix.passStart[q] < ix.passEnd[q] ? ix.passStart[q] : clampCursor(ix, ix.passStart[q] - 1);
}

// --- On the canvas ------------------------------------------------------------------------------

/** Forward value of a node, when known (recording's values first, then the trace's). */
export function forwardValue(ix: RecordingIndex, id: string): number[] | null {
  return ix.rec.values?.[id] ?? ix.nodes.get(id)?.value ?? null;
}

/** Label lines a node gets in this view (appended under its base label); [] for none. */
export function nodeLines(ix: RecordingIndex, v: StepView, id: string): string[] {
  const lines: string[] = [];
  const node = ix.nodes.get(id);
  if (!node) return lines;
  const value = forwardValue(ix, id);
  if (value && value.length > 0 && value.length <= SMALL_LABEL) {
    const grad = v.grads.get(id);
    const partial = v.contributions.get(id);
    const arrived = partial && !partial.ran && partial.got > 0 && partial.partial ? partial : null;
    const g = grad
      ? fmtVec(grad)
      : arrived
        ? arrived.total > 1
          ? `Σ ${fmtVec(arrived.partial!)}${arrived.got < arrived.total ? " …" : ""}`
          : fmtVec(arrived.partial!)
        : "?";
    if (value.length === 1) lines.push(`data ${fmtVec(value)} | grad ${g}`);
    else lines.push(`data ${fmtVec(value)}`, `grad ${g}`);
  }
  const c = v.contributions.get(id);
  if (node.kind === "leaf" && c && c.total > 1) lines.push(`${c.got} of ${c.total} contributions${c.got === c.total ? " ✓" : ""}`);
  return lines;
}

/** The widest label lines a node can get over the whole recording (to size it once, at layout). */
export function reserveLines(ix: RecordingIndex, id: string): string[][] {
  const out: string[][] = [];
  const node = ix.nodes.get(id);
  if (!node) return out;
  const value = forwardValue(ix, id);
  const small = !!value && value.length > 0 && value.length <= SMALL_LABEL;
  const many = node.kind === "leaf" && ix.incoming.some((m) => (m.get(id)?.length ?? 0) > 1);
  if (!small && !many) return out;
  for (let p = 0; p < ix.passes; p++) {
    const i = ix.stepOf[p].get(id);
    const src = ix.rootSource.get(id);
    const at = i ?? (src ? ix.stepOf[p].get(src.node) : undefined);
    if (at !== undefined) out.push(nodeLines(ix, stepView(ix, at), id));
    const incoming = ix.incoming[p].get(id);
    if (incoming && incoming.length) out.push(nodeLines(ix, stepView(ix, incoming[incoming.length - 1][0]), id));
  }
  out.push(nodeLines(ix, stepView(ix, -1), id));
  return out;
}

export interface StepDecorations {
  /** Element key -> space separated "st-"/"heat-" classes. */
  classes: Map<string, string>;
  /** Element key -> extra label lines. */
  lines: Map<string, string[]>;
  /** Edge key -> label of the gradient it carries now. */
  edgeLabels: Map<string, string>;
}

export function gradBrief(g: RecordedGrad | null | undefined): string {
  if (!g) return "∇ none";
  if (g.nonfinite) return "∇ NaN/Inf!";
  if (g.value && g.value.length === 1) return "∇ " + fmt(g.value[0]);
  return "‖∇‖ " + fmt(g.norm);
}

/** Classes and labels for what is drawn: running node / box, colour by received norm (log bins),
 *  edges carrying gradient now, partial sums on leaves, "data | grad" on small nodes. */
export function stepDecorations(
  ix: RecordingIndex,
  v: StepView,
  graph: VisibleGraph,
  rep: (nodeId: string) => string,
): StepDecorations {
  const classes = new Map<string, string>();
  const lines = new Map<string, string[]>();
  const edgeLabels = new Map<string, string>();
  const add = (key: string, cls: string): void => addClass(classes, key, cls);
  // Boxes take the largest norm of their members that ran; nonfinite wins.
  const best = new Map<string, { norm: number; nonfinite: boolean }>();
  for (const [id, r] of v.ran) {
    const key = rep(id);
    const b = best.get(key);
    if (!b || r.nonfinite || (!b.nonfinite && r.norm > b.norm)) best.set(key, r);
  }
  const drawn = new Set<string>();
  for (const item of graph.items) drawn.add(item.key);
  for (const [key, r] of best) {
    if (!drawn.has(key)) continue;
    if (r.nonfinite) add(key, "st-bad");
    else {
      const b = ix.scale ? binOf(r.norm, ix.scale) : -1;
      add(key, b < 0 ? "heat-zero" : `heat-${Math.min(b, BINS - 1)}`);
    }
  }
  if (v.step) {
    const key = rep(v.step.node);
    add(key, "st-run");
    // Expanded boxes around the running node light up too.
    for (const item of graph.items) {
      if (item.type === "expanded" && item.key !== key && containsRunning(item.key, key, graph)) add(item.key, "st-runbox");
    }
  }
  // Edges carrying gradient now: forward edge (receiver -> running node) between representatives.
  if (v.flows.length) {
    const byPair = new Map<string, string>();
    for (const e of graph.edges) if (!e.ghost) byPair.set(e.source + "\u0000" + e.target, e.key);
    const labels = new Map<string, string[]>();
    for (const f of v.flows) {
      const key = byPair.get(rep(f.to) + "\u0000" + rep(f.from));
      if (!key) continue;
      let l = labels.get(key);
      if (!l) labels.set(key, (l = []));
      l.push(gradBrief(f.grad));
    }
    for (const [key, l] of labels) {
      add(key, "st-flow");
      edgeLabels.set(key, l.length === 1 ? l[0] : `${l[0]} (+${l.length - 1})`);
    }
  }
  for (const item of graph.items) {
    if (item.type !== "node") continue;
    const l = nodeLines(ix, v, item.node.id);
    if (l.length) lines.set(item.key, l);
  }
  return { classes, lines, edgeLabels };
}

function containsRunning(boxKey: string, runKey: string, graph: VisibleGraph): boolean {
  const parent = new Map<string, string | null>();
  for (const item of graph.items) parent.set(item.key, item.parent);
  for (let k: string | null | undefined = parent.get(runKey); k; k = parent.get(k)) if (k === boxKey) return true;
  return false;
}

// --- The details panel --------------------------------------------------------------------------

export interface DetailSection {
  heading: string;
  rows: [string, string][];
  warn?: boolean;
}

export interface StepDetails {
  title: string;
  subtitle: string;
  /** The op's local derivative rule with PyTorch's numbers (monospace, prominent). */
  explain: string[];
  sections: DetailSection[];
}

function gradRows(g: RecordedGrad): [string, string][] {
  const rows: [string, string][] = [];
  if (g.nonfinite) rows.push(["⚠", "contains NaN or Inf"]);
  if (g.value) rows.push(["value", fmtVec(g.value)]);
  rows.push(
    ["shape", g.shape.length ? "[" + g.shape.join(", ") + "]" : "scalar"],
    ["norm", fmt(g.norm)],
    ["mean", fmt(g.mean)],
    ["max |·|", fmt(g.max_abs)],
  );
  return rows;
}

export function titleOf(ix: RecordingIndex, id: string): string {
  const n = ix.nodes.get(id);
  return n ? nodeTitle(n) : id;
}

/** What the details panel says before the first step. */
export const INTRO: StepDetails = {
  title: "Backward pass, step by step",
  subtitle: "press Step ▶ (or →) to run the first node",
  explain: [],
  sections: [
    {
      heading: "how to read it",
      rows: [
        ["1", "The engine starts at the output with gradient 1 and runs one node at a time, in PyTorch's real order."],
        ["2", "Each node receives dLoss/d(its output), multiplies by its local derivative, and sends one gradient to each input (blue arrows)."],
        ["3", "A tensor used twice receives two contributions; they are summed before its node runs. A leaf adds them into .grad."],
        ["4", "Colour: how large the gradient a node received was (log scale); nodes not run yet stay grey."],
      ],
    },
  ],
};

export function stepDetails(ix: RecordingIndex, v: StepView): StepDetails | null {
  const s = v.step;
  if (!s) return null;
  const node = ix.nodes.get(s.node);
  const isLeaf = node?.kind === "leaf";
  const sections: DetailSection[] = [];
  const passText = ix.passes > 1 ? `pass ${v.pass + 1} of ${ix.passes} · ` : "";
  const c = v.contributions.get(s.node);
  (s.received ?? []).forEach((g, k) => {
    const many = (s.received ?? []).length > 1;
    const heading = (isLeaf ? "received this pass" : "received gradient") + (many ? ` (output ${k})` : "") +
      (c && c.total > 1 && k === 0 ? ` = sum of ${c.total} contributions` : "");
    sections.push(g ? { heading, rows: gradRows(g), warn: g.nonfinite } : { heading, rows: [["", "none"]] });
  });
  if (c && c.total > 1) {
    const rows: [string, string][] = (ix.incoming[v.pass].get(s.node) ?? []).map(([i, d]) => {
      const from = ix.steps[i];
      return [`from ${titleOf(ix, from.node)}`, gradBrief(from.sent?.[from.deliveries[d][2]])];
    });
    sections.push({ heading: "contributions", rows });
  }
  if (isLeaf) {
    const rows: [string, string][] = [];
    const show = (g: RecordedGrad | null): string => (g ? (g.value ? fmtVec(g.value) : `‖·‖ ${fmt(g.norm)}`) : "None");
    rows.push([".grad before", show(s.leaf_before)], [".grad after", show(s.leaf_after)]);
    if (s.leaf_before && s.leaf_after) rows.push(["", "after = before + received (accumulated, not replaced)"]);
    sections.push({ heading: "leaf .grad", rows, warn: !!s.leaf_after?.nonfinite });
  } else {
    const targets = new Map<number, string>();
    for (const [t, , inp] of s.deliveries ?? []) targets.set(inp, t);
    const rows: [string, string][] = (s.sent ?? []).map((g, k) => {
      const t = targets.get(k);
      const to = t !== undefined ? ` → ${titleOf(ix, t)}` : "";
      return [`input ${k}${to}`, g ? (g.value && g.value.length <= 8 ? fmtVec(g.value) : gradBrief(g)) + (g.nonfinite ? " ⚠ NaN/Inf" : "") : "no gradient (needs none)"];
    });
    if (rows.length) sections.push({ heading: "sent gradients", rows, warn: (s.sent ?? []).some((g) => g?.nonfinite) });
  }
  return {
    title: `${node ? nodeTitle(node) : s.node} · ${s.op}`,
    subtitle: `${passText}step ${v.pos} of ${v.passLen}`,
    explain: s.explain ?? [],
    sections,
  };
}

/** The stepper bar's position text. */
export function positionText(ix: RecordingIndex, v: StepView): string {
  const pass = ix.passes > 1 ? `pass ${v.pass + 1} of ${ix.passes} · ` : "";
  if (v.cursor < 0) return `${pass}before the backward pass (${v.passLen} steps)`;
  return `${pass}step ${v.pos} of ${v.passLen}: ${titleOf(ix, v.step!.node)}`;
}

/** Leaves still waiting for contributions (some arrived, not all, or not yet run), for the bar. */
export function pendingLeaves(ix: RecordingIndex, v: StepView): string[] {
  const out: string[] = [];
  for (const [id, c] of v.contributions) {
    if (ix.nodes.get(id)?.kind !== "leaf" || c.ran || c.got === 0) continue;
    out.push(`${titleOf(ix, id)}: ${c.got} of ${c.total} contribution${c.total === 1 ? "" : "s"} received`);
  }
  return out;
}

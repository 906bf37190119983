// What the what-if answer looks like on screen: classes (and a few label changes) per visible
// element. Pure (no DOM), so toggling restyles without any re-layout and is unit-tested in node.
import type { GraphPayload, Toggles } from "../../payload";
import type { VisibleGraph } from "../../state/quotient";
import { graphIndex } from "../../state/graphindex";
import { CALL_PREFIX, type WhatIfState } from "./state";
import { addClass } from "../../state/classes";

/** Classes the view knows (style.ts): every one starts with "wi-". */
export const WI = {
  /** Edge whose every tensor is detached (red, dashed, ✂). */
  cut: "wi-cut",
  /** Aggregated edge with some of its tensors detached. */
  partCut: "wi-partcut",
  /** Node backward no longer runs; edge that carries no gradient any more. */
  pruned: "wi-pruned",
  /** Leaf that loses its gradient. */
  lost: "wi-lost",
  /** Frozen leaf, or a box whose parameters were frozen as a whole. */
  frozen: "wi-frozen",
  /** Op whose outputs were detached as a whole, or a box whose outputs were. */
  detached: "wi-detached",
  /** Box with lost leaves inside. */
  hasLost: "wi-haslost",
} as const;

export interface Decorations {
  /** Element key -> space separated "wi-" classes (absent: none). */
  classes: Map<string, string>;
  /** Element key -> label to show instead of the base one, "{base}" standing for it (absent: base). */
  labels: Map<string, string>;
  /** Box key -> lost leaves inside it. */
  lostInside: Map<string, number>;
}

export function decorate(payload: GraphPayload, graph: VisibleGraph, state: WhatIfState, toggles: Toggles): Decorations {
  const classes = new Map<string, string>();
  const labels = new Map<string, string>();
  const lostInside = new Map<string, number>();
  const ix = graphIndex(payload);
  const add = (key: string, cls: string): void => addClass(classes, key, cls);
  const detachedWhole = new Set(toggles.detach);
  const frozenCalls = new Set(toggles.freeze.filter((f) => f.startsWith(CALL_PREFIX)).map((f) => f.slice(CALL_PREFIX.length)));
  const detachedCalls = new Set(toggles.detach.filter((f) => f.startsWith(CALL_PREFIX)).map((f) => f.slice(CALL_PREFIX.length)));
  // Box keys -> [members running, members]; expanded boxes count their lost leaves too.
  const boxOf = new Map<string, string[]>(); // call id -> box keys on screen holding it
  const boxRun = new Map<string, [number, number]>();
  // A folded stack counts for each of its calls.
  const foldOf = new Map<string, string>();
  for (const item of graph.items) {
    if (item.type === "collapsed" || item.type === "expanded" || item.type === "folded") boxRun.set(item.key, [0, 0]);
    if (item.type === "folded") for (const c of item.calls) foldOf.set(c.id, item.key);
  }
  const boxesFor = (call: string): string[] => {
    let known = boxOf.get(call);
    if (known) return known;
    known = [];
    // Walk up the call tree collecting every box on screen (collapsed or expanded) around the node.
    const seen = new Set<string>();
    for (let c = call; c && !seen.has(c); c = ix.callParent.get(c) ?? "") {
      seen.add(c);
      if (boxRun.has("c:" + c)) known.push("c:" + c);
      const fold = foldOf.get(c);
      if (fold) known.push(fold);
    }
    boxOf.set(call, known);
    return known;
  };
  const drawn = new Set<string>();
  for (const item of graph.items) if (item.type === "node") drawn.add(item.key);
  payload.nodes.forEach((node, i) => {
    if (node.kind === "root") return;
    const key = "n:" + node.id;
    const runs = state.runs[i] === 1;
    if (drawn.has(key)) {
      if (node.kind === "leaf") {
        if (state.frozen[i]) add(key, WI.frozen);
        if (state.lost[i]) add(key, WI.lost);
        if (state.frozen[i]) labels.set(key, "❄ {base}");
      } else {
        if (!runs) add(key, WI.pruned);
        if (detachedWhole.has(node.id)) add(key, WI.detached);
      }
    }
    if (!node.call) return;
    for (const box of boxesFor(node.call)) {
      const r = boxRun.get(box)!;
      r[1]++;
      if (runs) r[0]++;
      if (state.lost[i]) lostInside.set(box, (lostInside.get(box) ?? 0) + 1);
    }
  });
  for (const item of graph.items) {
    if (item.type === "folded") {
      const [running, members] = boxRun.get(item.key)!;
      const lost = lostInside.get(item.key) ?? 0;
      if (lost > 0) add(item.key, WI.hasLost);
      else if (members > 0 && running === 0) add(item.key, WI.pruned);
      if (lost > 0) labels.set(item.key, boxLabel("", `✖ ${lost} ${lost === 1 ? "loses" : "lose"} gradient`));
      continue;
    }
    if (item.type !== "collapsed" && item.type !== "expanded") continue;
    const [running, members] = boxRun.get(item.key)!;
    const lost = lostInside.get(item.key) ?? 0;
    if (lost > 0) add(item.key, WI.hasLost);
    if (item.type === "collapsed" && members > 0 && running === 0 && lost === 0) add(item.key, WI.pruned);
    if (frozenCalls.has(item.call.id)) add(item.key, WI.frozen);
    if (detachedCalls.has(item.call.id)) add(item.key, WI.detached);
    const marks = (frozenCalls.has(item.call.id) ? "❄ " : "") + (detachedCalls.has(item.call.id) ? "✂ " : "");
    const badge = lost > 0 ? `✖ ${lost} ${lost === 1 ? "loses" : "lose"} gradient` : "";
    if (marks || badge) labels.set(item.key, boxLabel(marks, badge));
  }
  for (const e of graph.edges) {
    if (e.ghost || e.edges.length === 0) continue;
    let cut = 0;
    let carrying = 0;
    for (const i of e.edges) {
      if (state.cutSlot[i]) cut++;
      else if (ix.src[i] >= 0 && state.runs[ix.src[i]] && state.runs[ix.tgt[i]]) carrying++;
    }
    if (cut === e.edges.length) add(e.key, WI.cut);
    else if (cut > 0) add(e.key, WI.partCut);
    if (carrying === 0 && cut < e.edges.length) add(e.key, WI.pruned);
  }
  return { classes, labels, lostInside };
}

/** Marks go in front of the box's first line; the lost badge is a line of its own (on an open box too:
 *  appended to the header it made it wider than the box). `{base}` is replaced by the view. */
function boxLabel(marks: string, badge: string): string {
  return marks + "{base}" + (badge ? "\n" + badge : "");
}

// `root.__gradviz`: what tests (and the JupyterLab end-to-end test) reach into. Documented in
// js/README.md ("Hooks for tests"); the actions here behave as the user's (a click, a key).
import type { WhatIfAnswer } from "../payload";
import { badgeText, diffText } from "../state/diff";
import { foldedGroups } from "../state/fold";
import { overlayText } from "../state/overlay";
import { callKey, nodeKey, type VisibleCounts } from "../state/quotient";
import { search } from "../state/search";
import { evaluate } from "../state/whatif";
import type { GraphView } from "../view/graphview";
import type { WidgetContext } from "./context";
import { closeCall, openCall, unfoldGroup } from "./disclosure";
import { reveal } from "./reveal";
import { setByModule, userSeek } from "./stepper";
import { setWhatIfMode } from "./whatif";

export interface DebugHook {
  cy: GraphView["cy"];
  visibleCounts(): VisibleCounts;
  expand(callId: string): Promise<void>;
  collapse(callId: string): Promise<void>;
  /** Resolves once the current layout (if any) has been drawn. */
  idle(): Promise<void>;
  /** Client coordinates to click: a collapsed box's centre, an expanded box's top edge. */
  boxPoint(callId: string): { x: number; y: number } | null;
  nodePoint(nodeId: string): { x: number; y: number } | null;
  lastLayoutMs(): number;
  /** The current what-if answer (for the current `toggles`). */
  whatIf(): WhatIfAnswer;
  whatIfMode(): boolean;
  setWhatIfMode(on: boolean): void;
  /** Client coordinates of an edge's midpoint; `edgeBetween` finds a drawn edge by its end keys. */
  edgePoint(edgeKey: string): { x: number; y: number } | null;
  edgeBetween(sourceKey: string, targetKey: string): string | null;
  /** Milliseconds from the last user toggle to its styles applied (what-if recomputed + restyled). */
  lastWhatIfMs(): number;
  /** Stepper: move the cursor (-1 = before the start; clamped), as a user would (sets `step`). */
  stepTo(cursor: number): void;
  /** Stepper cursor (-1 when before the start or no recording). */
  currentStep(): number;
  /** Stepper facts: cursor, pass, running node id, element keys of edges carrying gradient now,
   *  playing, by-module stepping. */
  stepInfo(): { cursor: number; pass: number; node: string | null; flowEdges: string[]; playing: boolean; byModule: boolean };
  /** Stepper: step by module box (what is on screen) instead of node by node. */
  setByModule(on: boolean): void;
  /** Milliseconds from the last stepper move to its styles applied. */
  lastStepMs(): number;
  /** Overlay value and mark shown for an element key ("n:<id>", "c:<call id>"). */
  overlayOf(key: string): { value: number | null; mark: string | null; text: string };
  /** Diff view: an element's status ("n:<id>") or its box badge ("c:<call id>"), and tooltip text. */
  diffOf(key: string): { status: string | null; badge: string; text: string };
  /** The whole graph as an SVG document (the toolbar's SVG button saves the same). */
  toSVG(): string;
  /** The whole graph as a PNG data URL at `scale` (default 2). */
  toPNG(scale?: number): string;
  /** Lazy mode: call ids whose node records are loaded ("" = top level); [] when eager. */
  loaded(): string[];
  /** The search box's ranked hits for `q` (at most 50). */
  search(q: string): { key: string; label: string }[];
  /** Open, load and unfold what hides a node or call id, select it and centre on it. */
  reveal(id: string): Promise<void>;
  /** Unfold a fold group (as a click on its stacked box), resolves after the layout. */
  unfold(groupId: string): Promise<void>;
  /** Fold group ids currently drawn folded. */
  folded(): string[];
}

export function createDebugHook(ctx: WidgetContext): DebugHook {
  const { view, step, wi } = ctx;
  /** Run a user action, then wait for every layout and load it started. */
  const settled =
    <A extends unknown[]>(f: (...args: A) => Promise<unknown>) =>
    async (...args: A): Promise<void> => {
      await f(...args);
      await ctx.pending;
    };
  return {
    cy: view.cy,
    visibleCounts: () => ({ ...ctx.counts }),
    expand: settled((callId: string) => openCall(ctx, callId)),
    collapse: settled((callId: string) => closeCall(ctx, callId)),
    idle: () => ctx.pending.then(() => undefined),
    boxPoint: (callId) => view.clientPoint(callKey(callId)),
    nodePoint: (nodeId) => view.clientPoint(nodeKey(nodeId)),
    lastLayoutMs: () => view.lastLayoutMs,
    whatIf: () => {
      const a = (wi.state ?? evaluate(ctx.payload, wi.toggles)).answer;
      return { lost: [...a.lost], pruned: [...a.pruned], runs: a.runs, total: a.total };
    },
    whatIfMode: () => wi.mode,
    setWhatIfMode: (on) => setWhatIfMode(ctx, on),
    edgePoint: (key) => view.edgePoint(key),
    edgeBetween(s, t) {
      const e = view.shown?.edges.find((x) => x.source === s && x.target === t && !x.ghost);
      return e ? e.key : null;
    },
    lastWhatIfMs: () => wi.lastMs,
    stepTo: (c) => userSeek(ctx, c),
    currentStep: () => step.cursor,
    stepInfo: () => ({
      cursor: step.cursor,
      pass: step.rix ? (step.sv?.pass ?? 0) : 0,
      node: step.sv?.step ? step.sv.step.node : null,
      flowEdges: [...step.flowEdges],
      playing: step.playing,
      byModule: step.byModule,
    }),
    setByModule: (on) => setByModule(ctx, on),
    lastStepMs: () => step.lastMs,
    overlayOf(key) {
      const value = ctx.ovDeco?.values.get(key);
      const mark = ctx.ovDeco?.marks.get(key);
      return { value: value ?? null, mark: mark ?? null, text: ctx.overlay ? overlayText(ctx.overlay, value, mark) : "" };
    },
    diffOf(key) {
      const { diff, dfDeco } = ctx;
      const status = key.startsWith("n:") ? (dfDeco?.status.get(key) ?? null) : null;
      const box = dfDeco?.boxes.get(key);
      return { status, badge: box ? badgeText(box) : "", text: diff && dfDeco ? diffText(diff, dfDeco, key) : "" };
    },
    toSVG: () => view.toSVG(),
    toPNG: (scale) => view.toPNG(scale ?? 2),
    loaded: () => (ctx.lazy ? [...ctx.lazy.loaded].sort() : []),
    search: (q) => search(ctx.payload, q).hits.map((h) => ({ key: h.key, label: h.label })),
    reveal: settled((id: string) => reveal(ctx, id)),
    unfold: settled((groupId: string) => unfoldGroup(ctx, groupId)),
    folded: () => foldedGroups(ctx.folded),
  };
}

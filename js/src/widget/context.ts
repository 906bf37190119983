// The state one rendered widget shares between its controllers (disclosure, drawing, selection,
// paint, what-if, stepper): plain fields, read and written by plain functions that take the context.
import type { RenderProps } from "@anywidget/types";
import type { DoctorFinding, GraphDiff, GraphPayload, Overlay, Recording, Toggles, Verification } from "../payload";
import type { DiffDecorations } from "../state/diff";
import { indexFolds, NO_FOLDS, type FoldedCalls, type FoldIndex } from "../state/fold";
import { applyChunks, type LazyState } from "../state/lazy";
import { ChunkLoader, type LoaderOptions } from "../state/loader";
import type { OverlayDecorations } from "../state/overlay";
import { indexCalls, type CallIndex, type VisibleCounts, type VisibleGraph } from "../state/quotient";
import type { RecordingIndex, StepView } from "../state/stepper";
import { EMPTY_TOGGLES, type WhatIfState } from "../state/whatif";
import type { Decorations } from "../state/whatifview";
import type { DetailsPanel } from "../panels/details";
import type { DiffPanel } from "../panels/diff";
import type { FindingsPanel } from "../panels/findings";
import type { Legend, Tooltip } from "../panels/legend";
import type { SearchBox } from "../panels/search";
import type { StepperPanel } from "../panels/stepper";
import type { Toolbar } from "../panels/toolbar";
import type { WhatIfPanel } from "../panels/whatif";
import type { GraphView } from "../view/graphview";

export interface Traits {
  graph_data: GraphPayload;
  expanded: string[];
  /** Fold group ids the user unfolded (repeated-block stacks drawn as their single calls). */
  unfolded: string[];
  selected: string;
  height: number;
  /** What-if toggles (Python can read and set them). */
  toggles: Toggles;
  /** Last verified re-run ({} when none). */
  verified: Partial<Verification>;
  /** True when the widget can re-run the model (GraphWidget.from_fn). */
  can_verify: boolean;
  /** Per-node values and marks drawn over the graph ({} when none). */
  overlay: Partial<Overlay>;
  /** A recorded backward pass for the stepper ({} when none). */
  recording: Partial<Recording>;
  /** Stepper cursor: -1 before the first step, else an index into recording.steps. */
  step: number;
  /** Diff view: status per node of the merged before/after graph ({} when none). */
  diff: Partial<GraphDiff>;
  /** gv.doctor's findings listed beside the graph ([] when none). */
  findings: DoctorFinding[];
}

export type Model = RenderProps<Traits>["model"];

export const EMPTY: GraphPayload = {
  version: 1,
  nodes: [],
  edges: [],
  calls: [],
  ghosts: [],
  meta: { torch_version: "", captured: false, notes: [], num_nodes: 0, num_edges: 0 },
};
export const NOTHING: VisibleGraph = { items: [], edges: [], counts: { nodes: 0, collapsed: 0, expanded: 0, folded: 0, edges: 0 } };

/** What is open: expanded calls and unfolded fold groups. */
export interface Disclosure {
  expanded: Set<string>;
  unfolded: Set<string>;
}

/** The DOM and panels the controllers draw into. */
export interface Parts {
  root: HTMLElement;
  body: HTMLElement;
  spinner: HTMLElement;
  view: GraphView;
  toolbar: Toolbar;
  searchBox: SearchBox;
  diffPanel: DiffPanel;
  findingsPanel: FindingsPanel;
  whatIfPanel: WhatIfPanel;
  details: DetailsPanel;
  stepper: StepperPanel;
  legend: Legend;
  tooltip: Tooltip;
}

export interface WhatIfSlice {
  toggles: Toggles;
  /** The answer for `toggles` (null: recompute before use). */
  state: WhatIfState | null;
  mode: boolean;
  lastMs: number;
  /** Classes and labels for what is drawn (null: recompute at the next repaint). */
  deco: Decorations | null;
}

export interface StepSlice {
  rix: RecordingIndex | null;
  cursor: number;
  sv: StepView | null;
  playing: boolean;
  timer: ReturnType<typeof setInterval> | null;
  speed: number;
  byModule: boolean;
  lastMs: number;
  flowEdges: string[];
}

export interface WidgetContext extends Parts {
  model: Model;
  payload: GraphPayload;
  index: CallIndex;
  expanded: Set<string>;
  counts: VisibleCounts;
  // Folding: groups from the payload, the ones the user opened, and who is drawn folded now.
  folds: FoldIndex;
  unfolded: Set<string>;
  folded: FoldedCalls;
  // Lazy mode (null when the payload is eager) and the requests for call contents.
  lazy: LazyState | null;
  loader: ChunkLoader;
  payloadGen: number;
  // A first view too big to draw: nothing is drawn but the neighbourhood of a search pick (`focus`).
  tooBig: boolean;
  focus: string | null;
  // Disclosure changes run one after another (each may wait for a load).
  changes: Promise<unknown>;
  pending: Promise<unknown>;
  /** Layouts in flight. */
  running: number;
  wi: WhatIfSlice;
  step: StepSlice;
  overlay: Overlay | null;
  ovDeco: OverlayDecorations | null;
  diff: GraphDiff | null;
  dfDeco: DiffDecorations | null;
}

export function createContext(model: Model, parts: Parts): WidgetContext {
  const index = indexCalls(EMPTY);
  const ctx: WidgetContext = {
    ...parts,
    model,
    payload: EMPTY,
    index,
    expanded: new Set(),
    counts: { ...NOTHING.counts },
    folds: indexFolds(EMPTY, index),
    unfolded: new Set(),
    folded: NO_FOLDS,
    lazy: null,
    loader: new ChunkLoader(loaderActions(() => ctx)),
    payloadGen: 0,
    tooBig: false,
    focus: null,
    changes: Promise.resolve(),
    pending: Promise.resolve(),
    running: 0,
    wi: { toggles: EMPTY_TOGGLES, state: null, mode: false, lastMs: 0, deco: null },
    step: { rix: null, cursor: -1, sv: null, playing: false, timer: null, speed: 2, byModule: false, lastMs: 0, flowEdges: [] },
    overlay: null,
    ovDeco: null,
    diff: null,
    dfDeco: null,
  };
  return ctx;
}

/** A loader for the current payload's call contents (chunks patch its records in place). */
export function newLoader(ctx: WidgetContext): ChunkLoader {
  return new ChunkLoader(loaderActions(() => ctx));
}

function loaderActions(get: () => WidgetContext): LoaderOptions {
  return {
    send: (msg) => get().model.send(msg),
    apply(chunks) {
      const ctx = get();
      if (ctx.lazy) applyChunks(ctx.payload, ctx.lazy, chunks);
    },
    isLoaded: (call) => {
      const lazy = get().lazy;
      return !lazy || lazy.loaded.has(call);
    },
  };
}

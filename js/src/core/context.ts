// The state one rendered widget's core shares between its controllers (disclosure, drawing,
// selection, paint): plain fields, read and written by plain functions that take the core. Features
// keep their own state in their own closures and see the core through this interface only.
import type { RenderProps } from "@anywidget/types";
import type { GraphPayload, PageReply, Traits } from "../payload";
import { indexFolds, NO_FOLDS, type FoldedCalls, type FoldIndex } from "../state/fold";
import { applyChunks, type LazyState } from "../state/lazy";
import { ChunkLoader } from "../state/loader";
import { indexCalls, type CallIndex, type VisibleCounts, type VisibleGraph } from "../state/quotient";
import type { DetailsPanel } from "../panels/details";
import type { Legend, Tooltip } from "../panels/legend";
import type { Toolbar } from "../panels/toolbar";
import type { GraphView } from "../view/graphview";
import type { Feature, Slots } from "./feature";
import { Messenger } from "./messages";
import { EMPTY_GRAPH } from "./validate";

export type Model = RenderProps<Traits>["model"];

/** No graph yet: the one empty payload, defined beside the trait validation that also returns it. */
export const EMPTY: GraphPayload = EMPTY_GRAPH;
export const NOTHING: VisibleGraph = { items: [], edges: [], counts: { nodes: 0, collapsed: 0, expanded: 0, folded: 0, edges: 0 } };

/** What is open: expanded calls and unfolded fold groups. */
export interface Disclosure {
  expanded: Set<string>;
  unfolded: Set<string>;
}

/** The DOM and panels the core draws into. */
export interface Parts {
  root: HTMLElement;
  body: HTMLElement;
  spinner: HTMLElement;
  view: GraphView;
  toolbar: Toolbar;
  details: DetailsPanel;
  legend: Legend;
  tooltip: Tooltip;
}

export interface Core extends Parts {
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
  /** Requests to Python, in the `PageRequest` envelope. */
  messenger: Messenger;
  /** The features, in the order of `features/index.ts` (set once, right after the core is made). */
  features: Feature[];
}

export function createCore(model: Model, parts: Parts): Core {
  const index = indexCalls(EMPTY);
  const messenger = new Messenger((msg) => model.send(msg));
  const core: Core = {
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
    loader: newLoaderFor(() => core, messenger),
    payloadGen: 0,
    tooBig: false,
    focus: null,
    changes: Promise.resolve(),
    pending: Promise.resolve(),
    running: 0,
    messenger,
    features: [],
  };
  return core;
}

/** A loader for the current payload's call contents (chunks patch its records in place). */
export function newLoader(core: Core): ChunkLoader {
  return newLoaderFor(() => core, core.messenger);
}

function newLoaderFor(get: () => Core, messenger: Messenger): ChunkLoader {
  const loader: ChunkLoader = new ChunkLoader({
    send: (calls) => messenger.request("load", { calls }, (reply: PageReply) => loader.receive(reply)),
    apply(chunks) {
      const core = get();
      if (core.lazy) applyChunks(core.payload, core.lazy, chunks);
    },
    isLoaded: (call) => {
      const lazy = get().lazy;
      return !lazy || lazy.loaded.has(call);
    },
  });
  return loader;
}

/** How the list builds a feature: from the core, with its slots for DOM. */
export type FeatureFactory<Hooks extends object = object> = (core: Core, slots: Slots) => Feature<Hooks>;

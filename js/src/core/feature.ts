// The one interface every canvas feature (what-if, stepper, overlay, diff, findings, search, folding)
// implements. The core (disclosure, layout, selection, paint) knows features only through it and
// through the ordered list in `features/index.ts`, which says once which feature wins where two
// overlap. A new view is one folder under `features/` plus one entry in that list.
import type { StylesheetJson } from "cytoscape";
import type { GraphNode, ModuleCall } from "../payload";
import type { DetailRow, LeadRows } from "../panels/details";
import type { VisibleGraph } from "../state/quotient";
import type { Theme } from "../view/theme";
import type { LegendSpec } from "../panels/legend";
import type { Subject } from "../view/camera";

/** What a feature draws over the laid-out graph now (styles only, never a re-layout). Maps are keyed
 *  by element key ("n:<id>", "c:<call id>", "f:<group id>", edge keys). */
export type { LegendItem, LegendSpec } from "../panels/legend";
export type { DetailRow, RowAction } from "../panels/details";
export type { Subject } from "../view/camera";

export interface Decoration {
  /** Extra classes; every feature's are kept. */
  classes?: Map<string, string>;
  /** Fill classes ("heat-<bin>"): one feature colours the nodes, the first in the list that returns
   *  a map (even an empty one: it claims the colours). */
  fill?: Map<string, string>;
  /** Node size factors: the first feature in the list that returns a map (even an empty one) decides. */
  sizes?: Map<string, number>;
  /** Label templates, "{base}" standing for what the features before this one made of the label. */
  labels?: Map<string, string>;
  /** Extra label lines below the label. */
  lines?: Map<string, string[]>;
  edgeLabels?: Map<string, string>;
  /** Text appended to the base label (before templates apply). */
  suffixes?: Map<string, string>;
}

/** Where a feature puts its DOM: `top` (a row under the toolbar), `side` (beside the graph, above it
 *  when narrow), `body` (floating over the canvas), `tools` (inline in the toolbar). */
export interface Slots {
  top: HTMLElement;
  side: HTMLElement;
  body: HTMLElement;
  tools: HTMLElement;
}

/** A toolbar toggle a feature owns (e.g. what-if mode). */
export interface ToolButton {
  label: string;
  title: string;
  testid: string;
  onClick(): void;
}

export interface Feature<Hooks extends object = object> {
  readonly name: string;
  /** CSS for the feature's panels (appended to the widget's style element). */
  readonly css?: string;
  /** Cytoscape rules for the classes the feature paints; where two features style one element the
   *  one earlier in the list wins (its rules are placed later in the stylesheet). */
  styles?(t: Theme): StylesheetJson;
  /** Synced traits the feature owns: trait name -> what to do when Python (or a saved state) changes it. */
  readonly traits?: Record<string, () => void>;
  /** A new graph payload arrived: re-read the feature's traits against it. */
  loaded?(): void;
  /** Decorations for the graph drawn now (null: nothing). */
  decorate?(shown: VisibleGraph): Decoration | null;
  /** After every paint (panels that follow the decorations). */
  painted?(): void;
  /** A new layout was drawn (decorations cached per layout are stale). */
  laidOut?(): void;
  /** Legend for what the feature draws now; a `fallback` legend shows only when no other feature has one. */
  legend?(): { spec: LegendSpec; fallback?: boolean } | null;
  /** Hover text for an element (empty: nothing to add). */
  tooltip?(key: string): string;
  /** Extra rows of the details panel for a selected node (a row may carry a button, see `DetailRow`). */
  details?(node: GraphNode): DetailRow[];
  /** Rows that lead the details panel of a selected node, above its facts (an answer the user asked for);
   *  `collapse` closes the facts under a disclosure after them. Null: none. */
  leadDetails?(node: GraphNode): LeadRows | null;
  /** Extra rows of the details panel for a selected module box. */
  callDetails?(call: ModuleCall): DetailRow[];
  /** A click on a node or box; true when the feature handled it (later features and the core then don't). */
  click?(key: string, kind: string, shift: boolean): boolean;
  /** A click on an edge (edges take clicks only while a feature asks for them, see `Core.setTapEdges`). */
  tapEdge?(key: string): boolean;
  /** A key press while the widget has focus; true when handled. */
  key?(e: KeyboardEvent): boolean;
  /** What the view is about (view/camera.ts), framed by the first view and every fit: node or call keys
   *  ("n:<id>", "c:<call id>"), drawn or hidden in a closed box (the box is framed then), most important
   *  first; e.g. the lost leaves, the first finding. Null: nothing to ask. */
  subject?(): Subject | null;
  /** Extra text lines a node needs room for (sizes feed the layout); null: none. */
  reserve?(): ((key: string) => string[][] | null) | null;
  /** Size factors the feature will draw nodes at (so the layout leaves room); null: none. */
  layoutScale?(): ((graph: VisibleGraph) => ReadonlyMap<string, number>) | null;
  /** Methods added to `root.__gradviz` for tests and image export. */
  readonly hooks?: Hooks;
  dispose?(): void;
}

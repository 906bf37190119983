// `root.__gradviz`: the page's programmatic API. Image export (gradviz_nb/export/image.py) and the page and
// lab tests use it; documented in js/README.md ("Page hooks"). The actions behave as the user's (a click,
// a key). The core's hooks are below; each feature adds its own (`Feature.hooks`).
import { callKey, nodeKey, type VisibleCounts } from "../state/quotient";
import type { GraphView } from "../view/graphview";
import type { Core } from "./context";
import { closeCall, openCall } from "./disclosure";
import { relayout } from "./drawing";
import { reveal } from "./reveal";

export interface CoreHooks {
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
  /** Client coordinates of an edge's midpoint; `edgeBetween` finds a drawn edge by its end keys. */
  edgePoint(edgeKey: string): { x: number; y: number } | null;
  edgeBetween(sourceKey: string, targetKey: string): string | null;
  /** The whole graph as an SVG document (the toolbar's SVG button saves the same). */
  toSVG(): string;
  /** The whole graph as a PNG data URL at `scale` (default 2). */
  toPNG(scale?: number): string;
  /** Lazy mode: call ids whose node records are loaded ("" = top level); [] when eager. */
  loaded(): string[];
  /** Open, load and unfold what hides a node or call id, select it and centre on it. */
  reveal(id: string): Promise<void>;
  /** Lay the view out again in columns aiming at width / height `aspect` (null: one column, as
   *  usual); resolves when drawn. Image export uses it for pictures that fit a slide. */
  wrap(aspect: number | null): Promise<void>;
}

export function coreHooks(ctx: Core): CoreHooks {
  const { view } = ctx;
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
    edgePoint: (key) => view.edgePoint(key),
    edgeBetween(s, t) {
      const e = view.shown?.edges.find((x) => x.source === s && x.target === t && !x.ghost);
      return e ? e.key : null;
    },
    toSVG: () => view.toSVG(),
    toPNG: (scale) => view.toPNG(scale ?? 2),
    loaded: () => (ctx.lazy ? [...ctx.lazy.loaded].sort() : []),
    reveal: settled((id: string) => reveal(ctx, id)),
    wrap: settled((aspect: number | null) => {
      view.setAspect(aspect);
      return relayout(ctx, { fit: true });
    }),
  };
}

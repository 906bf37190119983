// The view cap: a change that would draw more is refused with a message that says what it would draw
// and what to do instead; a graph too big even to start with is not drawn at all: search shows the
// neighbourhood of a match instead. The big view (view/bigview/) draws any size at a frame cost that
// follows the screen (Expand all of 31,202 nodes and 1,200 boxes: 2.5 s, then 33 ms pan frames), so
// the cap is only where the tested sizes end.
import type { GraphPayload } from "../payload";
import { thousands } from "./labels";
import { aggregateEdges, nodeKey, type VisibleCounts, type VisibleGraph, type VisibleItem } from "./quotient";
import { graphIndex } from "./graphindex";

/** Most items (nodes and boxes) a view may draw, first or after an expand: the 100,000-node chain. */
export const VIEW_CAP = 100_000;

/** The cap in force: `globalThis.gradvizViewCap` lowers it (page tests of the refusal, which would
 *  otherwise need a 100,000-item graph). */
export function viewCap(): number {
  const set = (globalThis as { gradvizViewCap?: number }).gradvizViewCap;
  return typeof set === "number" && set > 0 ? set : VIEW_CAP;
}
/** A search pick in an undrawable graph shows this many hops up and down around the match... */
export const NEIGHBOURHOOD_HOPS = 2;
/** ...and at most this many nodes. */
export const NEIGHBOURHOOD_MAX = 500;

/** Items a view draws: nodes and boxes of every sort (ghosts and edges not counted). */
export function drawnItems(c: VisibleCounts): number {
  return c.nodes + c.collapsed + c.expanded + c.folded;
}

/** "Opening blocks.3 would draw 3,412 items (limit 3,000): collapse other boxes or use search." */
export function refusalText(action: string, items: number): string {
  return `${action} would draw ${thousands(items)} items (limit ${thousands(viewCap())}): collapse other boxes or use search.`;
}

/** Said instead of drawing a graph too big to draw at all. */
export function tooBigText(items: number, boxes: boolean): string {
  return (
    `This graph has ${thousands(items)} items to draw at once (limit ${thousands(viewCap())}), so it is not drawn. ` +
    (boxes ? "" : "Trace with module capture (gv.capture / gv.watch) to get collapsible module boxes. ") +
    "Search by name or op: picking a match shows its neighbourhood."
  );
}

/** The match plus nodes within `hops` edges upstream and downstream (breadth first, nearest first,
 *  at most `max` nodes), drawn flat. Edge indices stay payload edge indices (what-if works on it). */
export function neighbourhood(payload: GraphPayload, nodeId: string, hops = NEIGHBOURHOOD_HOPS, max = NEIGHBOURHOOD_MAX): VisibleGraph {
  const ix = graphIndex(payload);
  const start = ix.pos.get(nodeId);
  const keep = new Set<number>();
  if (start !== undefined) {
    keep.add(start);
    let frontier = [start];
    for (let h = 0; h < hops && frontier.length && keep.size < max; h++) {
      const next: number[] = [];
      for (const v of frontier) {
        const around = [
          ...Array.from(ix.inSlots.subarray(ix.inStart[v], ix.inStart[v + 1]), (s) => ix.src[s]),
          ...Array.from(ix.outSlots.subarray(ix.outStart[v], ix.outStart[v + 1]), (s) => ix.tgt[s]),
        ];
        for (const u of around) {
          if (keep.size >= max) break;
          if (u >= 0 && !keep.has(u)) {
            keep.add(u);
            next.push(u);
          }
        }
      }
      frontier = next;
    }
  }
  const items: VisibleItem[] = [];
  const repOf = new Map<string, string>();
  payload.nodes.forEach((n, i) => {
    if (!keep.has(i)) return;
    items.push({ key: nodeKey(n.id), type: "node", node: n, parent: null });
    repOf.set(n.id, nodeKey(n.id));
  });
  const edges = aggregateEdges(payload.edges, repOf);
  return { items, edges, counts: { nodes: items.length, collapsed: 0, expanded: 0, folded: 0, edges: edges.length } };
}

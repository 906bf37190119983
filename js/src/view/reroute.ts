// Edge routes after a layout: orthogonal routes for edges a placement left straight, and no edge
// through an open box's header text. Pure geometry over a Layout (no DOM), unit-tested in node.
//
// An open box's header label sits in the room the layout keeps above the drawn border
// (BOX_PADDING.top - BOX_PADDING.side high, centred, as wide as the measured label). An edge into a
// member of the box has to cross that strip; where its vertical segment would cross the label, it
// steps aside just above the box, runs down beside the label and steps back just inside the border
// (a jog of a few pixels, inside the box's own padding).
import type { VisibleGraph } from "../state/quotient";
import { BOX_PADDING, type Layout, type Point, type Size } from "./elkgraph";
import { rectOf, segmentCrosses, type Rect } from "./incremental";

/** Header strip height: from the top of the layout's room to the drawn border. */
const HEADER = BOX_PADDING.top - BOX_PADDING.side;

/** The header label's rectangle of open box `key` (layout space), or null. `sizes` holds the open box's
 *  minimum width: its measured header plus the side padding on both sides. */
export function headerRect(key: string, layout: Layout, sizes: ReadonlyMap<string, Size>): Rect | null {
  const p = layout.positions.get(key);
  const box = layout.boxes.get(key);
  if (!p || !box) return null;
  const measured = sizes.get(key)?.width ?? 0;
  const w = Math.min(box.width, measured > 0 ? measured - 2 * BOX_PADDING.side : box.width);
  const top = p.y - box.height / 2;
  return [p.x - w / 2, top, p.x + w / 2, top + HEADER];
}

/** Open boxes holding `key`, innermost first. */
function holders(key: string, parent: ReadonlyMap<string, string | null>): string[] {
  const out: string[] = [];
  for (let k = parent.get(key); k; k = parent.get(k)) out.push(k);
  return out;
}

/** Drop repeated points and middle points on a straight run (the route Cytoscape draws is the same). */
export function simplify(route: Point[]): Point[] {
  const out: Point[] = [];
  for (const p of route) {
    const last = out[out.length - 1];
    if (last && Math.abs(last.x - p.x) < 0.01 && Math.abs(last.y - p.y) < 0.01) continue;
    const prev = out[out.length - 2];
    if (prev && last) {
      const straight = (Math.abs(prev.x - last.x) < 0.01 && Math.abs(last.x - p.x) < 0.01) || (Math.abs(prev.y - last.y) < 0.01 && Math.abs(last.y - p.y) < 0.01);
      if (straight) out.pop();
    }
    out.push(p);
  }
  return out;
}

/** Orthogonal routes for the edges of `layout` that have none (a placement draws them straight, often
 *  diagonally across a box): out of the bottom of the source, across below the boxes it leaves (or above
 *  the boxes it enters), into the top of the target. Only edges that run downwards; returns the keys routed. */
export function orthogonalRoutes(graph: VisibleGraph, layout: Layout, sizes: ReadonlyMap<string, Size>): string[] {
  const parent = new Map<string, string | null>(graph.items.map((i) => [i.key, i.parent]));
  const routed: string[] = [];
  for (const e of graph.edges) {
    if (e.ghost || layout.routes.has(e.key)) continue;
    const sr = rectOf(e.source, layout, sizes);
    const tr = rectOf(e.target, layout, sizes);
    if (!sr || !tr || sr[3] + 4 > tr[1]) continue;
    const sx = (sr[0] + sr[2]) / 2;
    const tx = (tr[0] + tr[2]) / 2;
    if (Math.abs(sx - tx) < 0.5) {
      layout.routes.set(e.key, [{ x: sx, y: sr[3] }, { x: tx, y: tr[1] }]);
      routed.push(e.key);
      continue;
    }
    const up = holders(e.source, parent);
    const down = holders(e.target, parent);
    const left = up.filter((k) => !down.includes(k));
    const entered = down.filter((k) => !up.includes(k));
    let y = tr[1] - 10;
    const enterTop = entered.length ? rectOf(entered[entered.length - 1], layout, sizes) : null;
    if (enterTop) y = enterTop[1] - 8;
    const leaveBottom = left.length ? rectOf(left[left.length - 1], layout, sizes) : null;
    if (leaveBottom) y = Math.max(y, leaveBottom[3] + 8);
    y = Math.min(Math.max(y, sr[3] + 3), tr[1] - 3);
    layout.routes.set(e.key, [
      { x: sx, y: sr[3] },
      { x: sx, y },
      { x: tx, y },
      { x: tx, y: tr[1] },
    ]);
    routed.push(e.key);
  }
  return routed;
}

/** One downward vertical segment a-b through header `h`: step aside above the box, down beside the
 *  label, back just inside the border. Null when the segment does not run down through it. */
function jog(a: Point, b: Point, h: Rect): Point[] | null {
  if (Math.abs(a.x - b.x) > 0.5 || b.y <= a.y) return null;
  const above = Math.max(a.y, h[1] - 8); // orthogonalRoutes' crossing height: one straight run
  const below = h[3] + 6;
  if (above >= h[1] || b.y < below + 1) return null;
  // Just outside the label's room, still inside the box's side padding (BOX_PADDING.side wide).
  const side = a.x - h[0] <= h[2] - a.x ? h[0] - 4 : h[2] + 4;
  return [a, { x: a.x, y: above }, { x: side, y: above }, { x: side, y: below }, { x: a.x, y: below }, b];
}

/** Make every routed edge go round the header labels of the open boxes it enters (the only headers an
 *  edge may cross: any other box is an obstacle as a whole). Mutates `layout.routes`; returns how many
 *  edges changed. */
export function avoidHeaders(graph: VisibleGraph, layout: Layout, sizes: ReadonlyMap<string, Size>): number {
  if (!layout.boxes.size) return 0;
  const parent = new Map<string, string | null>(graph.items.map((i) => [i.key, i.parent]));
  const heads = new Map<string, Rect | null>();
  const head = (k: string): Rect | null => {
    if (!heads.has(k)) heads.set(k, headerRect(k, layout, sizes));
    return heads.get(k) ?? null;
  };
  let changed = 0;
  for (const e of graph.edges) {
    let route = layout.routes.get(e.key);
    if (!route || e.ghost) continue;
    const up = new Set(holders(e.source, parent));
    const entered = holders(e.target, parent).filter((k) => !up.has(k));
    let moved = false;
    for (const k of entered) {
      const h = head(k);
      if (!h) continue;
      const i = route.findIndex((p, j) => j > 0 && segmentCrosses(route![j - 1], p, h));
      if (i < 0) continue;
      const detour = jog(route[i - 1], route[i], h);
      if (!detour) continue;
      route = [...route.slice(0, i - 1), ...detour, ...route.slice(i + 1)];
      moved = true;
    }
    if (moved) {
      layout.routes.set(e.key, simplify(route));
      changed++;
    }
  }
  return changed;
}

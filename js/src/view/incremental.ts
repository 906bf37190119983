// Incremental re-layout for one expand / collapse / unfold: only the changed region is laid out
// again; everything else keeps its place up to a pure shift that makes room. Pure geometry (no DOM,
// no worker), unit-tested in node.
//
// The region: items that are new (added) or gone (removed) between two visible graphs, where an item
// is unchanged when it keeps its key, type, parent and size. It must hang under ONE container (an
// unchanged open box, or the root): the removed and the added items whose parent is not themselves
// in the region all share that parent.
//
// Making room, level by level up the container chain. At the bottom, the grown element is the region:
// its old rectangle O (the union of the removed tops) is replaced by the laid-out new items, placed so
// that their top-centre is O's top-centre (rectangle N). Every sibling (another child of the same
// container, moved rigidly with everything inside it) is classified against O:
//   above   (bottom <= O.top)                     stays;
//   in rows (overlaps O's vertical span) or below: shifts sideways when it lies wholly left of O's
//            column (by N.left - O.left) or wholly right (by N.right - O.right), else stays in x;
//   below   (top >= O.bottom)                     also shifts down by N.bottom - O.bottom.
// Siblings that did not overlap O cannot overlap N afterwards (a left one ends left of N, a lower one
// below N), and siblings in one class move together, so their arrangement is kept. The container's
// box then follows its members (each edge of its old box moves as its members' bounding box edge
// moved, which keeps ELK's own margins), and it is the grown element one level up. If any two
// siblings overlap afterwards that did not before (possible with tall items beside the region), the
// caller falls back to a full layout.
import type { VisibleGraph, VisibleItem } from "../state/quotient";
import type { Layout, Point, Size } from "./elkgraph";

/** What a drawn layout needs to be re-used: the graph, its layout, and the leaf sizes it was made for. */
export interface Snapshot {
  graph: VisibleGraph;
  layout: Layout;
  sizes: ReadonlyMap<string, Size>;
}

export interface Region {
  /** The container: an open box present (and open) in both graphs, or null for the root. */
  parent: string | null;
  removed: Set<string>;
  /** Removed items directly under `parent`. */
  removedTops: string[];
  added: Set<string>;
  /** Added items directly under `parent`. */
  addedTops: string[];
  /** The added items (tops re-parented to the root) and the edges among them: what to lay out. */
  sub: VisibleGraph;
}

export type Rect = [number, number, number, number]; // x1, y1, x2, y2

const EPS = 0.5;

function sameItem(a: VisibleItem, b: VisibleItem): boolean {
  return a.type === b.type && (a.parent ?? null) === (b.parent ?? null);
}

/** The one changed region between `prev` and `next`, or null when a full layout is due: nothing or
 *  too much changed (more than `maxFraction` of the items), or the change is not under one container. */
export function findRegion(
  prev: VisibleGraph,
  next: VisibleGraph,
  sizes: { prev: ReadonlyMap<string, Size>; next: ReadonlyMap<string, Size> },
  maxFraction = 0.5,
): Region | null {
  const before = new Map(prev.items.map((i) => [i.key, i]));
  const after = new Map(next.items.map((i) => [i.key, i]));
  const unchanged = (item: VisibleItem): boolean => {
    const old = before.get(item.key);
    if (!old || !sameItem(old, item)) return false;
    if (item.type === "expanded") return true;
    const a = sizes.prev.get(item.key);
    const b = sizes.next.get(item.key);
    return !!a && !!b && Math.abs(a.width - b.width) < EPS && Math.abs(a.height - b.height) < EPS;
  };
  const added = new Set<string>();
  for (const item of next.items) if (!unchanged(item)) added.add(item.key);
  const removed = new Set<string>();
  for (const item of prev.items) {
    const now = after.get(item.key);
    if (!now || added.has(item.key)) removed.add(item.key);
  }
  if (added.size === 0 || removed.size === 0) return null;
  if (added.size > maxFraction * next.items.length || removed.size > maxFraction * prev.items.length) return null;
  const removedTops = prev.items.filter((i) => removed.has(i.key) && !(i.parent && removed.has(i.parent))).map((i) => i.key);
  const addedTops = next.items.filter((i) => added.has(i.key) && !(i.parent && added.has(i.parent))).map((i) => i.key);
  const parent = after.get(addedTops[0])!.parent ?? null;
  for (const k of addedTops) if ((after.get(k)!.parent ?? null) !== parent) return null;
  for (const k of removedTops) if ((before.get(k)!.parent ?? null) !== parent) return null;
  if (parent !== null && (added.has(parent) || removed.has(parent))) return null;
  const items = next.items
    .filter((i) => added.has(i.key))
    .map((i) => ((i.parent && added.has(i.parent)) || i.parent === null ? i : { ...i, parent: null }));
  const edges = next.edges.filter((e) => added.has(e.source) && added.has(e.target));
  const sub: VisibleGraph = { items, edges, counts: { ...next.counts, edges: edges.length } };
  return { parent, removed, removedTops, added, addedTops, sub };
}

/** An item's rectangle in layout space (open boxes with the header room ELK keeps). */
export function rectOf(key: string, layout: Layout, sizes: ReadonlyMap<string, Size>): Rect | null {
  const p = layout.positions.get(key);
  const s = layout.boxes.get(key) ?? sizes.get(key);
  if (!p || !s) return null;
  return [p.x - s.width / 2, p.y - s.height / 2, p.x + s.width / 2, p.y + s.height / 2];
}

function union(rects: Rect[]): Rect | null {
  if (!rects.length) return null;
  const out: Rect = [...rects[0]];
  for (const r of rects) {
    out[0] = Math.min(out[0], r[0]);
    out[1] = Math.min(out[1], r[1]);
    out[2] = Math.max(out[2], r[2]);
    out[3] = Math.max(out[3], r[3]);
  }
  return out;
}

const shift = (r: Rect, d: Point): Rect => [r[0] + d.x, r[1] + d.y, r[2] + d.x, r[3] + d.y];

/** How a sibling with rectangle `r` moves when the grown element goes from `o` to `n` (see top). */
export function offsetFor(r: Rect, o: Rect, n: Rect): Point {
  if (r[3] <= o[1] + EPS) return { x: 0, y: 0 }; // above
  const below = r[1] >= o[3] - EPS;
  let x = 0;
  if (r[2] <= o[0] + EPS) x = n[0] - o[0];
  else if (r[0] >= o[2] - EPS) x = n[2] - o[2];
  return { x, y: below ? n[3] - o[3] : 0 };
}

/** Pairs of rectangles (indices) that overlap by more than EPS, via a uniform grid. */
export function overlappingPairs(rects: Rect[]): Array<[number, number]> {
  if (rects.length < 2) return [];
  let cell = 256;
  for (const r of rects) cell = Math.max(cell, (r[2] - r[0]) / 32, (r[3] - r[1]) / 32);
  const grid = new Map<string, number[]>();
  const seen = new Set<string>();
  const out: Array<[number, number]> = [];
  rects.forEach((r, i) => {
    const cx1 = Math.floor(r[0] / cell);
    const cx2 = Math.floor(r[2] / cell);
    const cy1 = Math.floor(r[1] / cell);
    const cy2 = Math.floor(r[3] / cell);
    for (let cx = cx1; cx <= cx2; cx++) {
      for (let cy = cy1; cy <= cy2; cy++) {
        const k = cx + "," + cy;
        let list = grid.get(k);
        if (!list) grid.set(k, (list = []));
        for (const j of list) {
          const q = rects[j];
          if (r[0] < q[2] - EPS && q[0] < r[2] - EPS && r[1] < q[3] - EPS && q[1] < r[3] - EPS) {
            const pk = j + "," + i;
            if (!seen.has(pk)) {
              seen.add(pk);
              out.push([j, i]);
            }
          }
        }
        list.push(i);
      }
    }
  });
  return out;
}

const pairKey = (s: string, t: string, ghost?: boolean): string => s + "\u0000" + t + (ghost ? "\u0000g" : "");

export interface Placed {
  layout: Layout;
  /** Item key -> the pure shift it got (unchanged items only; ancestors of the region excluded). */
  offsets: Map<string, Point>;
  /** The region's old and new rectangles. */
  old: Rect;
  now: Rect;
}

/** The new layout: `sub` (the region laid out alone) placed where the old region was, the rest
 *  shifted to make room, ancestor boxes refitted, routes kept where both ends moved alike.
 *  Null when the shift would make two siblings overlap (the caller then lays out everything). */
export function placeRegion(prev: Snapshot, next: VisibleGraph, region: Region, sub: Layout, sizes: ReadonlyMap<string, Size>): Placed | null {
  const old = union(region.removedTops.map((k) => rectOf(k, prev.layout, prev.sizes)).filter((r): r is Rect => !!r));
  const fresh = union(region.addedTops.map((k) => rectOf(k, sub, sizes)).filter((r): r is Rect => !!r));
  if (!old || !fresh) return null;
  const o: Point = { x: (old[0] + old[2]) / 2 - (fresh[0] + fresh[2]) / 2, y: old[1] - fresh[1] };
  const now = shift(fresh, o);

  const positions = new Map<string, Point>();
  const boxes = new Map<string, Size>();
  const routes = new Map<string, Point[]>();
  for (const k of region.added) {
    const p = sub.positions.get(k);
    if (p) positions.set(k, { x: p.x + o.x, y: p.y + o.y });
    const b = sub.boxes.get(k);
    if (b) boxes.set(k, b);
  }
  for (const [k, route] of sub.routes) routes.set(k, route.map((p) => ({ x: p.x + o.x, y: p.y + o.y })));

  const children = new Map<string | null, string[]>();
  const parentOf = new Map<string, string | null>();
  for (const item of next.items) {
    parentOf.set(item.key, item.parent ?? null);
    if (region.added.has(item.key)) continue;
    const p = item.parent ?? null;
    let list = children.get(p);
    if (!list) children.set(p, (list = []));
    list.push(item.key);
  }
  const offsets = new Map<string, Point>();
  const moveTree = (key: string, d: Point): void => {
    const stack = [key];
    while (stack.length) {
      const k = stack.pop()!;
      offsets.set(k, d);
      const p = prev.layout.positions.get(k);
      if (p) positions.set(k, { x: p.x + d.x, y: p.y + d.y });
      const b = prev.layout.boxes.get(k);
      if (b) boxes.set(k, b);
      for (const c of children.get(k) ?? []) stack.push(c);
    }
  };

  let grownOld: Rect = old;
  let grownNew: Rect = now;
  let container = region.parent;
  let skip: string | null = null; // the grown element itself, among its container's children
  for (;;) {
    const siblings = (children.get(container) ?? []).filter((k) => k !== skip);
    const before: Rect[] = [grownOld];
    const after: Rect[] = [grownNew];
    for (const k of siblings) {
      const r = rectOf(k, prev.layout, prev.sizes);
      if (!r) return null;
      const d = offsetFor(r, grownOld, grownNew);
      moveTree(k, d);
      before.push(r);
      after.push(shift(r, d));
    }
    if (grownOld.some((v, i) => Math.abs(v - grownNew[i]) > EPS)) {
      const was = new Set(overlappingPairs(before).map(([a, b]) => a + "," + b));
      for (const [a, b] of overlappingPairs(after)) if (!was.has(a + "," + b)) return null;
    }
    if (container === null) break;
    // The container follows its members: each side moves as the members' bounding box side moved.
    const membersBefore = union(before);
    const membersAfter = union(after);
    const box = rectOf(container, prev.layout, prev.sizes);
    if (!box || !membersBefore || !membersAfter) return null;
    const refit: Rect = [
      box[0] + membersAfter[0] - membersBefore[0],
      box[1] + membersAfter[1] - membersBefore[1],
      box[2] + membersAfter[2] - membersBefore[2],
      box[3] + membersAfter[3] - membersBefore[3],
    ];
    positions.set(container, { x: (refit[0] + refit[2]) / 2, y: (refit[1] + refit[3]) / 2 });
    boxes.set(container, { width: refit[2] - refit[0], height: refit[3] - refit[1] });
    grownOld = box;
    grownNew = refit;
    skip = container;
    container = parentOf.get(container) ?? null;
  }

  // Routes: kept (shifted) where both ends moved by the same offset; others are drawn straight.
  const oldRoutes = new Map<string, Point[]>();
  for (const e of prev.graph.edges) {
    const r = prev.layout.routes.get(e.key);
    if (r) oldRoutes.set(pairKey(e.source, e.target, e.ghost), r);
  }
  for (const e of next.edges) {
    if (routes.has(e.key) || region.added.has(e.source) || region.added.has(e.target)) continue;
    const r = oldRoutes.get(pairKey(e.source, e.target, e.ghost));
    const a = offsets.get(e.source);
    const b = offsets.get(e.target);
    if (!r || !a || !b || Math.abs(a.x - b.x) > EPS || Math.abs(a.y - b.y) > EPS) continue;
    routes.set(e.key, r.map((p) => ({ x: p.x + a.x, y: p.y + a.y })));
  }
  return { layout: { positions, boxes, routes }, offsets, old, now };
}

/** Edges of `layout` that pass through an item they do not connect to (a node, a closed box, a
 *  stack, or an open box holding neither end), by edge key. Routes are followed bend by
 *  bend; an edge without a route is the straight line between its ends (how it will be drawn). */
export function edgesThroughItems(graph: VisibleGraph, layout: Layout, sizes: ReadonlyMap<string, Size>): string[] {
  const rects = new Map<string, Rect>();
  for (const item of graph.items) {
    const r = rectOf(item.key, layout, sizes);
    if (r) rects.set(item.key, r);
  }
  const parent = new Map<string, string | null>(graph.items.map((i) => [i.key, i.parent]));
  const holds = (box: string, key: string): boolean => {
    for (let k: string | null | undefined = key; k; k = parent.get(k)) if (k === box) return true;
    return false;
  };
  const bad: string[] = [];
  for (const e of graph.edges) {
    if (e.ghost) continue;
    const s = layout.positions.get(e.source);
    const t = layout.positions.get(e.target);
    if (!s || !t) continue;
    const pts = layout.routes.get(e.key) ?? [s, t];
    for (const [key, r] of rects) {
      if (key === e.source || key === e.target || holds(key, e.source) || holds(key, e.target)) continue;
      if (pts.some((p, i) => i > 0 && segmentCrosses(pts[i - 1], p, r))) {
        bad.push(e.key);
        break;
      }
    }
  }
  return bad;
}

/** Whether the segment a-b passes through the inside of rectangle r (2 px inset: touching is fine). */
export function segmentCrosses(a: Point, b: Point, r: Rect): boolean {
  const [x1, y1, x2, y2] = [r[0] + 2, r[1] + 2, r[2] - 2, r[3] - 2];
  if (x1 >= x2 || y1 >= y2) return false;
  // Liang-Barsky clipping: does any part of the segment lie inside the rectangle?
  let t0 = 0;
  let t1 = 1;
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  for (const [p, q] of [[-dx, a.x - x1], [dx, x2 - a.x], [-dy, a.y - y1], [dy, y2 - a.y]] as const) {
    if (p === 0) {
      if (q < 0) return false;
      continue;
    }
    const t = q / p;
    if (p < 0) t0 = Math.max(t0, t);
    else t1 = Math.min(t1, t);
    if (t0 > t1) return false;
  }
  return true;
}

/** Route each of `keys` round the whole drawing instead of through it: down out of its source, across
 *  to a lane beside everything, down the lane, and across into its target from above (the way a
 *  long skip connection is drawn by hand). Only for edges that run downwards; returns the ones routed. */
export function detourEdges(graph: VisibleGraph, layout: Layout, sizes: ReadonlyMap<string, Size>, keys: readonly string[]): string[] {
  const rects = graph.items.map((i) => rectOf(i.key, layout, sizes)).filter((r): r is Rect => !!r);
  if (!rects.length) return [];
  const minX = Math.min(...rects.map((r) => r[0]));
  const maxX = Math.max(...rects.map((r) => r[2]));
  const byKey = new Map(graph.edges.map((e) => [e.key, e]));
  const routed: string[] = [];
  let left = 0;
  let right = 0;
  for (const key of keys) {
    const e = byKey.get(key);
    const sr = e && rectOf(e.source, layout, sizes);
    const tr = e && rectOf(e.target, layout, sizes);
    if (!e || !sr || !tr || sr[3] + 16 > tr[1]) continue;
    const sx = (sr[0] + sr[2]) / 2;
    const tx = (tr[0] + tr[2]) / 2;
    const onLeft = (sx + tx) / 2 - minX <= maxX - (sx + tx) / 2;
    const lane = onLeft ? minX - 16 - 10 * left++ : maxX + 16 + 10 * right++;
    const y1 = sr[3] + 8;
    const y2 = tr[1] - 8;
    layout.routes.set(key, [
      { x: sx, y: sr[3] },
      { x: sx, y: y1 },
      { x: lane, y: y1 },
      { x: lane, y: y2 },
      { x: tx, y: y2 },
      { x: tx, y: tr[1] },
    ]);
    routed.push(key);
  }
  return routed;
}

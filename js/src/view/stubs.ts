// Ghost stubs beside what they feed, whatever the layout engine did with them. A stub is a source with one
// edge, yet the layout lifted some several layers above their target (seen on a LoRA GPT-2: two "from ❄
// wte.weight" stubs 1,000 px over the add they feed, dashed edges down a column of ops). After layout each stub whose
// edge is long moves just above its target, else beside it, to the first spot that is free of other
// items and routes and inside its box; its edge becomes one short straight piece. Pure data: node-tested.
import type { VisibleGraph, VisibleItem } from "../state/quotient";
import { BOX_PADDING, type Layout, type Point, type Size } from "./elkgraph";

/** Room between a moved stub and its target. */
export const STUB_GAP = 14;
/** A stub's edge at most this long (route length, px) stays as laid out. */
export const STUB_REACH = 120;
/** Past this many stubs the check is not worth its time (each looks at every item and route). */
const MAX_STUBS = 400;

interface Rect {
  x1: number;
  y1: number;
  x2: number;
  y2: number;
}

const around = (p: Point, s: Size): Rect => ({ x1: p.x - s.width / 2, y1: p.y - s.height / 2, x2: p.x + s.width / 2, y2: p.y + s.height / 2 });
const meets = (a: Rect, b: Rect): boolean => a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;

/** Whether segment p-q crosses rectangle r (Liang-Barsky clipping). */
function segmentMeets(p: Point, q: Point, r: Rect): boolean {
  let t0 = 0;
  let t1 = 1;
  const dx = q.x - p.x;
  const dy = q.y - p.y;
  for (const [d, v] of [[-dx, p.x - r.x1], [dx, r.x2 - p.x], [-dy, p.y - r.y1], [dy, r.y2 - p.y]] as const) {
    if (d === 0) {
      if (v < 0) return false;
    } else {
      const t = v / d;
      if (d < 0) t0 = Math.max(t0, t);
      else t1 = Math.min(t1, t);
      if (t0 > t1) return false;
    }
  }
  return true;
}

function routeLength(route: readonly Point[] | undefined, s: Point, t: Point): number {
  if (!route || route.length < 2) return Math.hypot(t.x - s.x, t.y - s.y);
  let n = 0;
  for (let i = 1; i < route.length; i++) n += Math.hypot(route[i].x - route[i - 1].x, route[i].y - route[i - 1].y);
  return n;
}

/** Spots to try for a stub of size `s` feeding target rectangle `t`: above it, then left, then right,
 *  each with the straight edge it would get (stub side -> target side). */
function candidates(t: Rect, s: Size): { at: Point; route: Point[] }[] {
  const cx = (t.x1 + t.x2) / 2;
  const cy = (t.y1 + t.y2) / 2;
  const above = { x: cx, y: t.y1 - STUB_GAP - s.height / 2 };
  const left = { x: t.x1 - STUB_GAP - s.width / 2, y: cy };
  const right = { x: t.x2 + STUB_GAP + s.width / 2, y: cy };
  return [
    { at: above, route: [{ x: cx, y: above.y + s.height / 2 }, { x: cx, y: t.y1 }] },
    { at: left, route: [{ x: left.x + s.width / 2, y: cy }, { x: t.x1, y: cy }] },
    { at: right, route: [{ x: right.x - s.width / 2, y: cy }, { x: t.x2, y: cy }] },
  ];
}

/** Move long-edged ghost stubs of `graph` next to their targets in `layout` (positions and routes are
 *  updated in place: the view's snapshot and its camera then agree with what is drawn). `sizes` are the
 *  laid-out sizes. Returns the keys of the stubs moved. */
export function pullStubs(graph: VisibleGraph, layout: Layout, sizes: ReadonlyMap<string, Size>): string[] {
  const stubs = graph.items.filter((i): i is Extract<VisibleItem, { type: "ghost" }> => i.type === "ghost");
  if (stubs.length === 0 || stubs.length > MAX_STUBS) return [];
  const { positions, boxes, routes } = layout;
  const rectOf = (key: string): Rect | null => {
    const p = positions.get(key);
    const s = boxes.get(key) ?? sizes.get(key);
    return p && s ? around(p, s) : null;
  };
  const parentOf = new Map(graph.items.map((i) => [i.key, i.parent]));
  const edgeOf = new Map(graph.edges.filter((e) => e.ghost).map((e) => [e.source, e.key]));
  const moved: string[] = [];
  for (const stub of stubs) {
    const edge = edgeOf.get(stub.key);
    const size = sizes.get(stub.key);
    const from = positions.get(stub.key);
    const target = rectOf(stub.target);
    if (!edge || !size || !from || !target) continue;
    const to = { x: (target.x1 + target.x2) / 2, y: (target.y1 + target.y2) / 2 };
    if (routeLength(routes.get(edge), from, to) <= STUB_REACH) continue;
    const ancestors = new Set<string>([stub.key]);
    for (let p = stub.parent; p; p = parentOf.get(p) ?? null) ancestors.add(p);
    const box = stub.parent ? rectOf(stub.parent) : null;
    const inside = box ? { x1: box.x1 + BOX_PADDING.side, y1: box.y1 + BOX_PADDING.top, x2: box.x2 - BOX_PADDING.side, y2: box.y2 - BOX_PADDING.side } : null;
    const free = (r: Rect): boolean => {
      if (inside && (r.x1 < inside.x1 || r.y1 < inside.y1 || r.x2 > inside.x2 || r.y2 > inside.y2)) return false;
      const margin = { x1: r.x1 - 4, y1: r.y1 - 4, x2: r.x2 + 4, y2: r.y2 + 4 };
      for (const key of positions.keys()) {
        if (ancestors.has(key)) continue;
        const other = rectOf(key);
        if (other && meets(margin, other)) return false;
      }
      for (const [key, route] of routes) {
        if (key === edge) continue;
        for (let i = 1; i < route.length; i++) if (segmentMeets(route[i - 1], route[i], margin)) return false;
      }
      return true;
    };
    const spot = candidates(target, size).find((c) => free(around(c.at, size)));
    if (!spot) continue;
    positions.set(stub.key, spot.at);
    routes.set(edge, spot.route);
    moved.push(stub.key);
  }
  return moved;
}

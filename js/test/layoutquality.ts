// What a person sees of a layout, measured on the layout itself (node, no browser), with the same
// geometry as the screenshot suite's checks (tests/lab/canvas_checks.py): an edge's polyline against
// every box it does not connect (open boxes with their header room, 1-unit inset so grazing is not
// crossing), open boxes at least as wide as their header, members inside their boxes; plus edge
// crossings and the drawing's area, to compare engines.
import type { VisibleGraph } from "../src/state/quotient";
import type { Layout, Point, Size } from "../src/view/elkgraph";

interface Rect {
  x1: number;
  y1: number;
  x2: number;
  y2: number;
}

/** Liang-Barsky, as canvas_checks.py's segHitsRect. */
export function segHitsRect(a: Point, b: Point, r: Rect): boolean {
  if (!(r.x2 > r.x1 && r.y2 > r.y1)) return false;
  let t0 = 0;
  let t1 = 1;
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  for (const [p, q] of [[-dx, a.x - r.x1], [dx, r.x2 - a.x], [-dy, a.y - r.y1], [dy, r.y2 - a.y]] as const) {
    if (p === 0) {
      if (q < 0) return false;
      continue;
    }
    const t = q / p;
    if (p < 0) {
      if (t > t1) return false;
      t0 = Math.max(t0, t);
    } else {
      if (t < t0) return false;
      t1 = Math.min(t1, t);
    }
  }
  return t0 <= t1;
}

export interface Quality {
  /** Edges whose route passes through a box they do not connect: "edge -> box". */
  through: string[];
  /** Edges through an open box's header text (any edge, its own boxes' too): "edge -> box". */
  headers: string[];
  /** Open boxes narrower than their header: "box: width < header". */
  narrow: string[];
  /** Members reaching outside their open box, and leaves overlapping a sibling. */
  outside: string[];
  overlaps: number;
  crossings: number;
  width: number;
  height: number;
  /** Edges without a route (drawn straight). */
  unrouted: number;
}

function rectsOf(graph: VisibleGraph, layout: Layout, sizeOf: (key: string) => Size): Map<string, Rect> {
  const rects = new Map<string, Rect>();
  for (const item of graph.items) {
    const p = layout.positions.get(item.key);
    const s = item.type === "expanded" ? layout.boxes.get(item.key) : sizeOf(item.key);
    if (p && s) rects.set(item.key, { x1: p.x - s.width / 2, y1: p.y - s.height / 2, x2: p.x + s.width / 2, y2: p.y + s.height / 2 });
  }
  return rects;
}

/** Proper crossings between segments of different edges (an orthogonal drawing: horizontal x vertical;
 *  a straight route counts against every segment it meets in its interior). */
function crossings(routes: Point[][]): number {
  const segs: [Point, Point, number][] = [];
  routes.forEach((r, e) => {
    for (let i = 0; i + 1 < r.length; i++) segs.push([r[i], r[i + 1], e]);
  });
  let count = 0;
  const cross = (a: Point, b: Point, c: Point, d: Point): boolean => {
    const o = (p: Point, q: Point, s: Point): number => Math.sign((q.x - p.x) * (s.y - p.y) - (q.y - p.y) * (s.x - p.x));
    return o(a, b, c) * o(a, b, d) < 0 && o(c, d, a) * o(c, d, b) < 0;
  };
  for (let i = 0; i < segs.length; i++) {
    for (let j = i + 1; j < segs.length; j++) {
      if (segs[i][2] !== segs[j][2] && cross(segs[i][0], segs[i][1], segs[j][0], segs[j][1])) count++;
    }
  }
  return count;
}

export function quality(graph: VisibleGraph, layout: Layout, sizeOf: (key: string) => Size, headerOf: (key: string) => number): Quality {
  const rects = rectsOf(graph, layout, sizeOf);
  const parent = new Map(graph.items.map((i) => [i.key, i.parent]));
  const holds = (box: string, key: string): boolean => {
    for (let k: string | null | undefined = key; k; k = parent.get(k)) if (k === box) return true;
    return false;
  };
  const through: string[] = [];
  const drawn: Point[][] = [];
  const keys: string[] = [];
  let unrouted = 0;
  for (const e of graph.edges) {
    const s = layout.positions.get(e.source);
    const t = layout.positions.get(e.target);
    if (!s || !t || e.source === e.target) continue;
    const route = layout.routes.get(e.key);
    if (!route) unrouted++;
    const pts = route ?? [s, t];
    drawn.push(pts);
    keys.push(e.key);
    for (const [key, r] of rects) {
      if (key === e.source || key === e.target || holds(key, e.source) || holds(key, e.target)) continue;
      const inset = { x1: r.x1 + 1, y1: r.y1 + 1, x2: r.x2 - 1, y2: r.y2 - 1 };
      if (pts.some((p, i) => i > 0 && segHitsRect(pts[i - 1], p, inset))) through.push(`${e.key} -> ${key}`);
    }
  }
  // Header text: centred, `headerOf` wide less the side padding, drawn in the top rows of the box (the
  // view trims BOX_PADDING.top - side = 22 units off the box and puts the label above what is left).
  const headers: string[] = [];
  for (const item of graph.items) {
    const r = rects.get(item.key);
    const text = headerOf(item.key) - 24;
    if (item.type !== "expanded" || !r || text <= 0) continue;
    const c = (r.x1 + r.x2) / 2;
    const head = { x1: c - text / 2 + 1, y1: r.y1 + 5, x2: c + text / 2 - 1, y2: r.y1 + 17 };
    drawn.forEach((pts, i) => {
      if (pts.some((p, j) => j > 0 && segHitsRect(pts[j - 1], p, head))) headers.push(`${keys[i]} -> ${item.key}`);
    });
  }
  const narrow: string[] = [];
  const outside: string[] = [];
  let overlaps = 0;
  const siblings = new Map<string | null, Rect[]>();
  for (const item of graph.items) {
    const r = rects.get(item.key);
    if (!r) continue;
    if (item.type === "expanded" && r.x2 - r.x1 + 0.5 < headerOf(item.key)) narrow.push(`${item.key}: ${(r.x2 - r.x1).toFixed(0)} < ${headerOf(item.key).toFixed(0)}`);
    const box = item.parent ? rects.get(item.parent) : undefined;
    if (box && (r.x1 < box.x1 - 0.5 || r.x2 > box.x2 + 0.5 || r.y1 < box.y1 - 0.5 || r.y2 > box.y2 + 0.5)) outside.push(item.key);
    const mates = siblings.get(item.parent) ?? [];
    for (const m of mates) if (r.x1 < m.x2 - 0.5 && m.x1 < r.x2 - 0.5 && r.y1 < m.y2 - 0.5 && m.y1 < r.y2 - 0.5) overlaps++;
    mates.push(r);
    siblings.set(item.parent, mates);
  }
  let [x1, y1, x2, y2] = [Infinity, Infinity, -Infinity, -Infinity];
  for (const r of rects.values()) [x1, y1, x2, y2] = [Math.min(x1, r.x1), Math.min(y1, r.y1), Math.max(x2, r.x2), Math.max(y2, r.y2)];
  return { through, headers, narrow, outside, overlaps, crossings: crossings(drawn), width: x2 - x1, height: y2 - y1, unrouted };
}

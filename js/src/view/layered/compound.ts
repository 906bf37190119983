// The whole view laid out box by box, innermost first: each open box is one layered layout of its
// members (leaves, and open boxes already laid out, as fixed rectangles; level.ts), then sized to its
// content and header. An edge between members of different boxes is cut where it crosses a box border:
// inside the box it runs to (or from) a terminal on the box's bottom (top), outside it leaves (enters)
// the box at that terminal's x, and the pieces are joined end to end. Every piece stays in its own
// box's layout, whose gaps and lanes are empty, so no route passes through a box it does not connect.
import { BOX_PADDING, type Layout, type Point, type Size } from "../elkgraph";
import { layoutLevel, simplify, type LevelEdge, type LevelUnit } from "./level";
import { wrapColumns } from "./wrap";

/** What the layout reads of a visible graph (a `VisibleGraph` is one; the worker gets only this). */
export interface LayeredGraph {
  items: readonly { key: string; type: string; parent: string | null }[];
  edges: readonly { key: string; source: string; target: string }[];
}

/** The part of a visible graph the layout reads, small enough to post to a worker. */
export function slim(graph: LayeredGraph): LayeredGraph {
  return {
    items: graph.items.map((i) => ({ key: i.key, type: i.type, parent: i.parent })),
    edges: graph.edges.map((e) => ({ key: e.key, source: e.source, target: e.target })),
  };
}

/** One edge's step inside one box: between two members, or from the box's entry / to its exit (-1). */
interface Step {
  edge: number;
  from: number;
  to: number;
}

interface Placed {
  /** Per container (item index; the top level is n): its members' top-left corners, local. */
  x: Float64Array;
  y: Float64Array;
  /** Size of each item (open boxes: as laid out). */
  w: Float64Array;
  h: Float64Array;
  /** Open boxes: where their content starts inside them. */
  innerX: Float64Array;
  /** Local route of each step, by container, in step order. */
  pieces: Point[][][];
}

/** Parent container of each item (n: the top level) and the steps each edge takes, per container. */
function steps(graph: LayeredGraph, at: Map<string, number>): { parent: Int32Array; steps: Step[][]; path: number[][] } {
  const n = graph.items.length;
  const parent = new Int32Array(n);
  graph.items.forEach((item, i) => (parent[i] = item.parent ? (at.get(item.parent) ?? n) : n));
  const open = (i: number): boolean => graph.items[i].type === "expanded";
  const chainUp = (i: number): number[] => {
    const out: number[] = [];
    for (let k = parent[i]; ; k = parent[k]) {
      out.push(k);
      if (k === n) return out;
    }
  };
  const byBox: Step[][] = Array.from({ length: n + 1 }, () => []);
  const path: number[][] = [];
  graph.edges.forEach((e, ei) => {
    const s = at.get(e.source);
    const t = at.get(e.target);
    path.push([]);
    if (s === undefined || t === undefined || s === t || open(s) || open(t)) return;
    const up = chainUp(s);
    const down = chainUp(t);
    const common = up.find((k) => down.includes(k)) ?? n;
    const upS = up.slice(0, up.indexOf(common));
    const downT = down.slice(0, down.indexOf(common));
    // Out of each box around the source, across the common box, into each box around the target.
    upS.forEach((box, i) => byBox[box].push({ edge: ei, from: i === 0 ? s : upS[i - 1], to: -1 }));
    byBox[common].push({ edge: ei, from: upS.length ? upS[upS.length - 1] : s, to: downT.length ? downT[downT.length - 1] : t });
    for (let i = downT.length - 1; i >= 0; i--) byBox[downT[i]].push({ edge: ei, from: -1, to: i === 0 ? t : downT[i - 1] });
    path[ei] = [...upS, common, ...downT.slice().reverse()];
  });
  return { parent, steps: byBox, path };
}

/** Height above an open box's content where an edge moved aside from the header turns in: below the
 *  header text (drawn in the top BOX_PADDING.top - BOX_PADDING.side of the box), above the content. */
const HEADER_JOG = BOX_PADDING.side / 2;

/** Where an edge entering an open box crosses its top (box coordinates): at `x`, or beside the header
 *  text (centred, `header` wide with the side padding) if `x` is under it; the k-th moved one a little
 *  further out, so a few do not run along each other. */
export function besideHeader(x: number, boxW: number, header: number, k: number): number {
  const text = Math.max(0, header - 2 * BOX_PADDING.side);
  const [a, b] = [(boxW - text) / 2 - 3, (boxW + text) / 2 + 3];
  if (text <= 0 || x <= a || x >= b) return x;
  const off = 3 * (k % 3);
  return x - a < b - x ? Math.max(2, a - off) : Math.min(boxW - 2, b + off);
}

/** Lays out every container innermost first (items come parents first: walk them backwards). */
function placeAll(graph: LayeredGraph, sizeOf: (key: string) => Size | undefined, parent: Int32Array, byBox: Step[][]): Placed {
  const n = graph.items.length;
  const members: number[][] = Array.from({ length: n + 1 }, () => []);
  for (let i = 0; i < n; i++) members[parent[i]].push(i);
  const placed: Placed = {
    x: new Float64Array(n),
    y: new Float64Array(n),
    w: new Float64Array(n),
    h: new Float64Array(n),
    innerX: new Float64Array(n),
    pieces: Array.from({ length: n + 1 }, () => []),
  };
  // Where edge e leaves (enters) open box b, from the box's left: key `${b}:${e}`.
  const exitAt = new Map<string, number>();
  const entryAt = new Map<string, number>();
  graph.items.forEach((item, i) => {
    if (item.type === "expanded") return;
    const s = sizeOf(item.key);
    placed.w[i] = s?.width ?? 10;
    placed.h[i] = s?.height ?? 10;
  });
  // Innermost boxes first, the top level (n) last.
  for (const c of [...Array.from({ length: n }, (_, i) => n - 1 - i), n]) {
    if (c < n && graph.items[c].type !== "expanded") continue;
    const own = members[c];
    const unitOf = new Map<number, number>(own.map((k, u) => [k, u]));
    const units: LevelUnit[] = own.map((k) => ({ w: placed.w[k], h: placed.h[k], term: 0 }));
    const edges: LevelEdge[] = byBox[c].map((st) => {
      const terminal = (term: 1 | 2): number => units.push({ w: 0, h: 0, term }) - 1;
      const s = st.from < 0 ? terminal(1) : unitOf.get(st.from)!;
      const t = st.to < 0 ? terminal(2) : unitOf.get(st.to)!;
      return { s, t, sOff: st.from >= 0 ? (exitAt.get(`${st.from}:${st.edge}`) ?? NaN) : 0, tOff: st.to >= 0 ? (entryAt.get(`${st.to}:${st.edge}`) ?? NaN) : 0 };
    });
    const r = layoutLevel(units, edges);
    own.forEach((k, u) => {
      placed.x[k] = r.x[u];
      placed.y[k] = r.y[u];
    });
    placed.pieces[c] = r.routes;
    if (c === n) continue;
    const header = sizeOf(graph.items[c].key)?.width ?? 0;
    const w = Math.max(r.width + 2 * BOX_PADDING.side, header > 0 ? Math.ceil(header) : 0);
    placed.w[c] = w;
    placed.h[c] = BOX_PADDING.top + r.height + BOX_PADDING.side;
    placed.innerX[c] = (w - r.width) / 2;
    let entries = 0;
    byBox[c].forEach((st, j) => {
      const e = edges[j];
      if (st.to < 0) exitAt.set(`${c}:${st.edge}`, placed.innerX[c] + r.x[e.t]);
      if (st.from >= 0) return;
      const x = r.x[e.s];
      const at = besideHeader(placed.innerX[c] + x, w, header, entries++);
      entryAt.set(`${c}:${st.edge}`, at);
      // Moved aside: in at the top, then across below the header text to where the route goes on.
      if (at !== placed.innerX[c] + x) r.routes[j].unshift({ x: at - placed.innerX[c], y: -HEADER_JOG }, { x, y: -HEADER_JOG });
    });
  }
  return placed;
}

/** The layered layout of the whole view: centres, open boxes' sizes, orthogonal routes (absolute);
 *  `aspect` (width / height) wraps the top level into columns. */
export function layeredLayout(graph: LayeredGraph, sizeOf: (key: string) => Size | undefined, aspect: number | null = null): Layout {
  const n = graph.items.length;
  const at = new Map<string, number>();
  graph.items.forEach((item, i) => at.set(item.key, i));
  const { parent, steps: byBox, path } = steps(graph, at);
  const placed = placeAll(graph, sizeOf, parent, byBox);
  // Content origin of each container, parents first.
  const originX = new Float64Array(n + 1);
  const originY = new Float64Array(n + 1);
  const positions = new Map<string, Point>();
  const boxes = new Map<string, Size>();
  graph.items.forEach((item, i) => {
    const left = originX[parent[i]] + placed.x[i];
    const top = originY[parent[i]] + placed.y[i];
    positions.set(item.key, { x: left + placed.w[i] / 2, y: top + placed.h[i] / 2 });
    if (item.type !== "expanded") return;
    boxes.set(item.key, { width: placed.w[i], height: placed.h[i] });
    originX[i] = left + placed.innerX[i];
    originY[i] = top + BOX_PADDING.top;
  });
  const routes = new Map<string, Point[]>();
  const next = new Int32Array(n + 1);
  graph.edges.forEach((e, ei) => {
    if (!path[ei].length) return;
    const pts: Point[] = [];
    for (const c of path[ei]) {
      const piece = placed.pieces[c][next[c]++];
      for (const p of piece) pts.push({ x: p.x + originX[c], y: p.y + originY[c] });
    }
    routes.set(e.key, simplify(pts));
  });
  const layout = { positions, boxes, routes };
  if (aspect && aspect > 0) {
    const topOf = new Map<string, string>();
    graph.items.forEach((item) => topOf.set(item.key, item.parent ? (topOf.get(item.parent) ?? item.parent) : item.key));
    wrapColumns(layout, sizeOf, graph.items.filter((i) => !i.parent).map((i) => i.key), topOf, aspect);
  }
  return layout;
}

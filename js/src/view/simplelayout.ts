// A plain layered layout for graphs too big for ELK. ELK's layered algorithm recurses deeply: on a
// 5,000-node graph it overflows the Web Worker's stack (and needs ~19 s even with a big stack). This one
// is iterative and linear: layers by longest path to a sink (so a leaf sits just above its consumer),
// one barycenter sweep for the order within a layer, straight edges. Open boxes become the bounding
// rectangles of their members (they may overlap: a degraded view, said so in the toolbar).
//
// The work itself (`plainLayoutCore` and its parts, `PLAIN_PARTS`) takes and returns typed arrays only and
// refers to nothing outside those functions, so layout.ts can run their source text in a Blob-URL Web Worker: a 20,000-node chain
// takes ~0.6 s, which on the main thread froze the page.
import type { VisibleGraph } from "../state/quotient";
import { BOX_PADDING, type Layout, type Point, type Size } from "./elkgraph";

const LAYER_GAP = 36;
const NODE_GAP = 22;

/** The graph as plain arrays (item i: open box or not, parent index or -1, size; edges as index pairs). */
export interface PlainInput {
  open: Uint8Array;
  parent: Int32Array;
  width: Float64Array;
  height: Float64Array;
  source: Int32Array;
  target: Int32Array;
  /** [layer gap, node gap, box padding top, box padding side]. */
  gaps: Float64Array;
}

/** Centre x, y of every item (NaN: not placed) and, for open boxes, their size. */
export interface PlainOutput {
  x: Float64Array;
  y: Float64Array;
  width: Float64Array;
  height: Float64Array;
}

export function encodePlain(graph: VisibleGraph, sizeOf: (key: string) => Size): PlainInput {
  const n = graph.items.length;
  const at = new Map<string, number>();
  graph.items.forEach((item, i) => at.set(item.key, i));
  const open = new Uint8Array(n);
  const parent = new Int32Array(n);
  const width = new Float64Array(n);
  const height = new Float64Array(n);
  graph.items.forEach((item, i) => {
    open[i] = item.type === "expanded" ? 1 : 0;
    parent[i] = item.parent ? (at.get(item.parent) ?? -1) : -1;
    if (!open[i]) {
      const s = sizeOf(item.key);
      width[i] = s.width;
      height[i] = s.height;
    }
  });
  const source: number[] = [];
  const target: number[] = [];
  for (const e of graph.edges) {
    const s = at.get(e.source);
    const t = at.get(e.target);
    if (s === undefined || t === undefined) continue;
    source.push(s);
    target.push(t);
  }
  return {
    open,
    parent,
    width,
    height,
    source: Int32Array.from(source),
    target: Int32Array.from(target),
    gaps: Float64Array.from([LAYER_GAP, NODE_GAP, BOX_PADDING.top, BOX_PADDING.side]),
  };
}

export function decodePlain(graph: VisibleGraph, out: PlainOutput): Layout {
  const positions = new Map<string, Point>();
  const boxes = new Map<string, Size>();
  graph.items.forEach((item, i) => {
    if (Number.isNaN(out.x[i])) return;
    positions.set(item.key, { x: out.x[i], y: out.y[i] });
    if (item.type === "expanded") boxes.set(item.key, { width: out.width[i], height: out.height[i] });
  });
  return { positions, boxes, routes: new Map() };
}

/** On the calling thread (node tests; the page runs the same code in a worker, see layout.ts). */
export function simpleLayout(graph: VisibleGraph, sizeOf: (key: string) => Size): Layout {
  return decodePlain(graph, plainLayoutCore(encodePlain(graph, sizeOf)));
}

/** Successors and predecessors of each leaf (CSR arrays); self loops and edges touching open boxes
 *  dropped. Part of the worker's source: refers only to the other `PLAIN_PARTS`. */
export function plainAdjacency(open: Uint8Array, source: Int32Array, target: Int32Array): PlainAdjacency {
  const n = open.length;
  const outDeg = new Int32Array(n);
  const inDeg = new Int32Array(n);
  const m = source.length;
  const keep = new Uint8Array(m);
  for (let e = 0; e < m; e++) {
    const s = source[e];
    const t = target[e];
    if (s === t || open[s] || open[t]) continue;
    keep[e] = 1;
    outDeg[s]++;
    inDeg[t]++;
  }
  const succStart = new Int32Array(n + 1);
  const predStart = new Int32Array(n + 1);
  for (let i = 0; i < n; i++) {
    succStart[i + 1] = succStart[i] + outDeg[i];
    predStart[i + 1] = predStart[i] + inDeg[i];
  }
  const succ = new Int32Array(succStart[n]);
  const pred = new Int32Array(predStart[n]);
  const sFill = succStart.slice(0, n);
  const pFill = predStart.slice(0, n);
  for (let e = 0; e < m; e++) {
    if (!keep[e]) continue;
    succ[sFill[source[e]]++] = target[e];
    pred[pFill[target[e]]++] = source[e];
  }
  return { outDeg, succStart, succ, predStart, pred };
}

export interface PlainAdjacency {
  outDeg: Int32Array;
  succStart: Int32Array;
  succ: Int32Array;
  predStart: Int32Array;
  pred: Int32Array;
}

/** Leaves in layers, top first: by longest path to a sink, without recursion (Kahn's order from the
 *  sinks up; a cycle, never in autograd, leaves its nodes at height 0), then ordered within each layer
 *  by the mean index of their predecessors above (one downward sweep). */
export function plainLayers(open: Uint8Array, adj: PlainAdjacency): number[][] {
  const n = open.length;
  const { succStart, succ, predStart, pred } = adj;
  const height = new Int32Array(n);
  const remaining = Int32Array.from(adj.outDeg);
  const queue = new Int32Array(n);
  let qEnd = 0;
  for (let i = 0; i < n; i++) if (!open[i] && remaining[i] === 0) queue[qEnd++] = i;
  for (let q = 0; q < qEnd; q++) {
    const k = queue[q];
    let h = 0;
    for (let j = succStart[k]; j < succStart[k + 1]; j++) h = Math.max(h, height[succ[j]] + 1);
    height[k] = h;
    for (let j = predStart[k]; j < predStart[k + 1]; j++) {
      const p = pred[j];
      if (--remaining[p] === 0) queue[qEnd++] = p;
    }
  }
  let top = 0;
  for (let i = 0; i < n; i++) if (!open[i]) top = Math.max(top, height[i]);
  const layers: number[][] = [];
  for (let l = 0; l <= top; l++) layers.push([]);
  for (let i = 0; i < n; i++) if (!open[i]) layers[top - height[i]].push(i);
  const index = new Int32Array(n).fill(-1);
  const bary = new Float64Array(n);
  for (const layer of layers) {
    for (const k of layer) {
      let sum = 0;
      let count = 0;
      for (let j = predStart[k]; j < predStart[k + 1]; j++) {
        const p = pred[j];
        if (index[p] >= 0) {
          sum += index[p];
          count++;
        }
      }
      bary[k] = count ? sum / count : Number.POSITIVE_INFINITY;
    }
    const order = layer.map((_, i) => i);
    order.sort((a, b) => (bary[layer[a]] === bary[layer[b]] ? a - b : bary[layer[a]] - bary[layer[b]]));
    const sorted = order.map((i) => layer[i]);
    sorted.forEach((k, i) => {
      index[k] = i;
      layer[i] = k;
    });
  }
  return layers;
}

/** Each open box: the rectangle around everything inside it, with the usual padding (sets x, y of the
 *  box; returns every item's box size, 0 for leaves). Walking the items backwards (parents come
 *  first), every child is final before its parent takes it in. */
export function plainBoxes(input: PlainInput, x: Float64Array, y: Float64Array): { width: Float64Array; height: Float64Array } {
  const { open, parent, width, height, gaps } = input;
  const n = open.length;
  const padTop = gaps[2];
  const padSide = gaps[3];
  const x1 = new Float64Array(n).fill(Number.POSITIVE_INFINITY);
  const y1 = new Float64Array(n).fill(Number.POSITIVE_INFINITY);
  const x2 = new Float64Array(n).fill(Number.NEGATIVE_INFINITY);
  const y2 = new Float64Array(n).fill(Number.NEGATIVE_INFINITY);
  const boxW = new Float64Array(n);
  const boxH = new Float64Array(n);
  for (let i = n - 1; i >= 0; i--) {
    let a: number, b: number, c: number, d: number;
    if (open[i]) {
      if (x1[i] === Number.POSITIVE_INFINITY) continue; // an empty box: not placed
      a = x1[i] - padSide;
      b = y1[i] - padTop;
      c = x2[i] + padSide;
      d = y2[i] + padSide;
      x[i] = (a + c) / 2;
      y[i] = (b + d) / 2;
      boxW[i] = c - a;
      boxH[i] = d - b;
    } else {
      if (Number.isNaN(x[i])) continue;
      a = x[i] - width[i] / 2;
      b = y[i] - height[i] / 2;
      c = x[i] + width[i] / 2;
      d = y[i] + height[i] / 2;
    }
    const p = parent[i];
    if (p >= 0) {
      x1[p] = Math.min(x1[p], a);
      y1[p] = Math.min(y1[p], b);
      x2[p] = Math.max(x2[p], c);
      y2[p] = Math.max(y2[p], d);
    }
  }
  return { width: boxW, height: boxH };
}

/** The layout proper: layers, then each layer centred, then the boxes around their members. Items come
 *  parents first. Refers to nothing outside `PLAIN_PARTS` (their source is shipped to a worker). */
export function plainLayoutCore(input: PlainInput): PlainOutput {
  const { open, width, height, source, target, gaps } = input;
  const n = open.length;
  const layers = plainLayers(open, plainAdjacency(open, source, target));
  const x = new Float64Array(n).fill(Number.NaN);
  const y = new Float64Array(n).fill(Number.NaN);
  let y0 = 0;
  for (const layer of layers) {
    let total = gaps[1] * Math.max(0, layer.length - 1);
    let tall = 0;
    for (const k of layer) {
      total += width[k];
      tall = Math.max(tall, height[k]);
    }
    let x0 = -total / 2;
    for (const k of layer) {
      x[k] = x0 + width[k] / 2;
      y[k] = y0 + tall / 2;
      x0 += width[k] + gaps[1];
    }
    y0 += tall + gaps[0];
  }
  const boxes = plainBoxes(input, x, y);
  return { x, y, width: boxes.width, height: boxes.height };
}

/** Every function the layout runs, the core last: the worker gets their source text. */
export const PLAIN_PARTS = [plainAdjacency, plainLayers, plainBoxes, plainLayoutCore] as const;

/** Source text of an expression that evaluates to the layout core, with its parts (for a worker). */
export function plainCoreSource(): string {
  return `(function(){${PLAIN_PARTS.map(String).join("\n")}\nreturn ${plainLayoutCore.name};})()`;
}

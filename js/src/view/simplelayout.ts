// A plain layered layout for graphs too big for ELK. ELK's layered algorithm recurses deeply: on a
// 5,000-node graph it overflows the Web Worker's stack (and needs ~19 s even with a big stack). This one
// is iterative and linear: layers by longest path to a sink (so a leaf sits just above its consumer),
// one barycenter sweep for the order within a layer, straight edges. Open boxes become the bounding
// rectangles of their members (they may overlap: a degraded view, said so in the toolbar).
import type { VisibleGraph } from "../state/quotient";
import { BOX_PADDING, type Layout, type Point, type Size } from "./elkgraph";

const LAYER_GAP = 36;
const NODE_GAP = 22;

export function simpleLayout(graph: VisibleGraph, sizeOf: (key: string) => Size): Layout {
  const keys = graph.items.filter((i) => i.type !== "expanded").map((i) => i.key);
  const known = new Set(keys);
  const succ = new Map<string, string[]>(keys.map((k) => [k, []]));
  const pred = new Map<string, string[]>(keys.map((k) => [k, []]));
  for (const e of graph.edges) {
    if (known.has(e.source) && known.has(e.target) && e.source !== e.target) {
      succ.get(e.source)!.push(e.target);
      pred.get(e.target)!.push(e.source);
    }
  }
  const height = heights(keys, succ, pred);
  const top = Math.max(0, ...height.values());
  const layers: string[][] = Array.from({ length: top + 1 }, () => []);
  for (const k of keys) layers[top - height.get(k)!].push(k);

  // Order within each layer by the mean index of its predecessors above (one downward sweep).
  const index = new Map<string, number>();
  for (const layer of layers) {
    const bary = (k: string): number => {
      const ps = pred.get(k)!.filter((p) => index.has(p));
      return ps.length ? ps.reduce((s, p) => s + index.get(p)!, 0) / ps.length : Number.POSITIVE_INFINITY;
    };
    const order = layer.map((k, i) => ({ k, b: bary(k), i }));
    order.sort((a, b) => (a.b === b.b ? a.i - b.i : a.b - b.b));
    order.forEach(({ k }, i) => index.set(k, i));
    layer.splice(0, layer.length, ...order.map((o) => o.k));
  }

  const positions = new Map<string, Point>();
  let y = 0;
  for (const layer of layers) {
    const sizes = layer.map(sizeOf);
    const width = sizes.reduce((s, z) => s + z.width, 0) + NODE_GAP * Math.max(0, layer.length - 1);
    const tall = Math.max(0, ...sizes.map((z) => z.height));
    let x = -width / 2;
    layer.forEach((k, i) => {
      positions.set(k, { x: x + sizes[i].width / 2, y: y + tall / 2 });
      x += sizes[i].width + NODE_GAP;
    });
    y += tall + LAYER_GAP;
  }
  return { positions, boxes: boxesAround(graph, positions, sizeOf), routes: new Map() };
}

/** Longest path from each node to a sink, without recursion (Kahn's order from the sinks up). */
function heights(keys: string[], succ: Map<string, string[]>, pred: Map<string, string[]>): Map<string, number> {
  const height = new Map<string, number>();
  const remaining = new Map(keys.map((k) => [k, succ.get(k)!.length]));
  const queue = keys.filter((k) => remaining.get(k) === 0);
  for (let q = 0; q < queue.length; q++) {
    const k = queue[q];
    height.set(k, Math.max(0, ...succ.get(k)!.map((s) => (height.get(s) ?? 0) + 1)));
    for (const p of pred.get(k)!) {
      const left = remaining.get(p)! - 1;
      remaining.set(p, left);
      if (left === 0) queue.push(p);
    }
  }
  for (const k of keys) if (!height.has(k)) height.set(k, 0); // a cycle (never in autograd): flat
  return height;
}

/** Each open box: the rectangle around everything inside it, with the usual padding. */
function boxesAround(graph: VisibleGraph, positions: Map<string, Point>, sizeOf: (key: string) => Size): Map<string, Size> {
  const extent = new Map<string, [number, number, number, number]>();
  const grow = (key: string, [x1, y1, x2, y2]: [number, number, number, number]): void => {
    const e = extent.get(key);
    extent.set(key, e ? [Math.min(e[0], x1), Math.min(e[1], y1), Math.max(e[2], x2), Math.max(e[3], y2)] : [x1, y1, x2, y2]);
  };
  // Items come parents first: walking backwards, every child is final before its parent takes it in.
  for (let i = graph.items.length - 1; i >= 0; i--) {
    const item = graph.items[i];
    let own: [number, number, number, number] | undefined;
    if (item.type === "expanded") {
      const e = extent.get(item.key);
      if (!e) continue;
      own = [e[0] - BOX_PADDING.side, e[1] - BOX_PADDING.top, e[2] + BOX_PADDING.side, e[3] + BOX_PADDING.side];
      positions.set(item.key, { x: (own[0] + own[2]) / 2, y: (own[1] + own[3]) / 2 });
      extent.set(item.key, own);
    } else {
      const p = positions.get(item.key);
      if (!p) continue;
      const s = sizeOf(item.key);
      own = [p.x - s.width / 2, p.y - s.height / 2, p.x + s.width / 2, p.y + s.height / 2];
    }
    if (item.parent) grow(item.parent, own);
  }
  const boxes = new Map<string, Size>();
  for (const item of graph.items) {
    const e = item.type === "expanded" ? extent.get(item.key) : undefined;
    if (e) boxes.set(item.key, { width: e[2] - e[0], height: e[3] - e[1] });
  }
  return boxes;
}

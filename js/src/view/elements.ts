// A laid-out graph -> Cytoscape element definitions: pure (no Cytoscape, no DOM), so node tests reach
// it. GraphView.show adds what this returns; what decorations change later is GraphView.paint's.
import type { ElementDefinition } from "cytoscape";
import { collapsedLabel, expandedLabel, foldedLabel, ghostLabel, nodeLabel } from "../state/labels";
import type { VisibleGraph, VisibleItem } from "../state/quotient";
import { BOX_PADDING, type Layout, type Size } from "./elkgraph";
import { toSegments } from "./segments";

/** The label an item is drawn (and measured) with before any feature decorates it. */
export function labelOf(item: VisibleItem): string {
  const prefix = item.prefix ?? "";
  switch (item.type) {
    case "node":
      return nodeLabel(item.node, prefix);
    case "collapsed":
      return collapsedLabel(item.call, item.size, prefix);
    case "folded":
      return foldedLabel(item.calls, item.size, prefix);
    case "expanded":
      return expandedLabel(item.call, prefix);
    case "ghost":
      return ghostLabel(item.ghost, prefix);
  }
}

/** Nodes, boxes and edges of `graph` placed as `layout` says, `sizes` being each item's measured size.
 *  Open boxes are plain nodes drawn behind their members (`z` = depth, `box` = the open box holding a
 *  member), not compounds: a restyle of one element then touches that element only. Their top is
 *  trimmed by the header room ELK keeps (BOX_PADDING.top), so the header label sits above the box.
 *  `base`, `bw`, `bh` keep the undecorated label and size that paint() starts from. */
export function toElements(graph: VisibleGraph, layout: Layout, sizes: ReadonlyMap<string, Size>): ElementDefinition[] {
  const { positions, boxes, routes } = layout;
  const elements: ElementDefinition[] = [];
  const depth = new Map<string, number>();
  for (const item of graph.items) {
    const z = item.parent ? (depth.get(item.parent) ?? 0) + 1 : 0;
    depth.set(item.key, z);
    let size = sizes.get(item.key);
    let position = positions.get(item.key);
    const box = item.type === "expanded" ? boxes.get(item.key) : undefined;
    if (box && position) {
      const trim = BOX_PADDING.top - BOX_PADDING.side;
      size = { width: box.width, height: box.height - trim };
      position = { x: position.x, y: position.y + trim / 2 };
    }
    const label = labelOf(item);
    const w = size?.width ?? 10;
    const h = size?.height ?? 10;
    const kind = item.type === "node" ? item.node.kind : item.type;
    elements.push({
      group: "nodes",
      data: { id: item.key, ...(item.parent ? { box: item.parent } : {}), kind, label, w, h, base: label, bw: w, bh: h, z },
      position,
    });
  }
  for (const e of graph.edges) {
    const route = routes.get(e.key);
    const s = positions.get(e.source);
    const t = positions.get(e.target);
    const segments = route && s && t ? toSegments(route, s, t) : null;
    elements.push({
      group: "edges",
      data: {
        id: e.key,
        source: e.source,
        target: e.target,
        count: e.count,
        countLabel: "×" + e.count,
        cutLabel: e.count > 1 ? "✂ ×" + e.count : "✂",
        ...segments,
      },
      classes: [segments ? (segments.ws ? "routed" : "pinned") : "", e.ghost ? "ghost" : ""].filter(Boolean).join(" "),
    });
  }
  return elements;
}

export interface Bounds {
  x1: number;
  y1: number;
  x2: number;
  y2: number;
  w: number;
  h: number;
}

/** Bounds of the laid-out items that `take` (key, is an open box, top edge): from the layout, not from
 *  Cytoscape (which measures every label: seconds at 20,000 nodes); labels of leaves are inside their
 *  boxes. Null when nothing is taken. */
export function layoutBounds(
  layout: Layout,
  sizes: ReadonlyMap<string, Size>,
  take: (key: string, open: boolean, y1: number) => boolean,
): Bounds | null {
  let x1 = Infinity;
  let y1 = Infinity;
  let x2 = -Infinity;
  let y2 = -Infinity;
  for (const [key, p] of layout.positions) {
    const box = layout.boxes.get(key);
    const s = box ?? sizes.get(key);
    if (!s) continue;
    const top = p.y - s.height / 2;
    if (!take(key, !!box, top)) continue;
    x1 = Math.min(x1, p.x - s.width / 2);
    y1 = Math.min(y1, top);
    x2 = Math.max(x2, p.x + s.width / 2);
    y2 = Math.max(y2, p.y + s.height / 2);
  }
  return x1 <= x2 ? { x1, y1, x2, y2, w: x2 - x1, h: y2 - y1 } : null;
}

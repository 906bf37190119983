// The big view's overview layer: one <canvas> under Cytoscape's, drawn with the same pan and zoom.
// Nodes are filled rectangles and edges straight lines, only those meeting the viewport (grid lookup),
// never text: a frame costs what is on screen. Elements mounted in Cytoscape are left to Cytoscape.
import type { Theme } from "../theme";
import type { GridIndex } from "./grid";

/** What the layer draws from: the indexes, what Cytoscape draws already, and the selection. */
export interface OverviewScene {
  nodes: GridIndex;
  edges: GridIndex;
  /** Per node: 0 plain node, 1 leaf, 2 root, 3 closed or folded box, 4 open box, 5 ghost. */
  style: Uint8Array;
  /** Per node: depth (open boxes are drawn deepest last, under their members). */
  z: Float64Array;
  /** Per edge: the source and target node index (lines run centre to centre). */
  source: Int32Array;
  target: Int32Array;
  mountedNode: Uint8Array;
  mountedEdge: Uint8Array;
  selected: number;
}

export interface Viewport {
  zoom: number;
  pan: { x: number; y: number };
  width: number;
  height: number;
}

export const STYLE = { node: 0, leaf: 1, root: 2, box: 3, open: 4, ghost: 5 } as const;

/** Element kind (`data('kind')`) -> overview style. */
export function styleOf(kind: string): number {
  if (kind === "leaf") return STYLE.leaf;
  if (kind === "root") return STYLE.root;
  if (kind === "collapsed" || kind === "folded") return STYLE.box;
  if (kind === "expanded") return STYLE.open;
  if (kind === "ghost") return STYLE.ghost;
  return STYLE.node;
}

function colours(t: Theme): Array<{ fill: string; line: string }> {
  return [
    { fill: t.panelAlt, line: t.border },
    { fill: t.leafFill, line: t.brand },
    { fill: t.panel, line: t.text },
    { fill: t.boxFill, line: t.brand },
    { fill: t.expandedFill, line: t.brand },
    { fill: t.background, line: t.ghost },
  ];
}

/** The viewport in model units. */
export function extent(v: Viewport): { x1: number; y1: number; x2: number; y2: number } {
  return { x1: -v.pan.x / v.zoom, y1: -v.pan.y / v.zoom, x2: (v.width - v.pan.x) / v.zoom, y2: (v.height - v.pan.y) / v.zoom };
}

/** Draw one frame; returns how many nodes and edges it drew (what the frame cost follows). */
export function drawOverview(ctx: CanvasRenderingContext2D, scene: OverviewScene, v: Viewport, theme: Theme): { nodes: number; edges: number } {
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.clearRect(0, 0, ctx.canvas.width, ctx.canvas.height);
  ctx.setTransform(v.zoom, 0, 0, v.zoom, v.pan.x, v.pan.y);
  const e = extent(v);
  const { nodes, edges } = scene;
  const n = nodes.rects;
  let edgeCount = 0;
  ctx.beginPath();
  edges.each(e.x1, e.y1, e.x2, e.y2, (i) => {
    if (scene.mountedEdge[i]) return;
    const s = scene.source[i];
    const t = scene.target[i];
    ctx.moveTo((n.x1[s] + n.x2[s]) / 2, n.y2[s]);
    ctx.lineTo((n.x1[t] + n.x2[t]) / 2, n.y1[t]);
    edgeCount++;
  });
  ctx.strokeStyle = theme.edge;
  ctx.lineWidth = Math.max(1, 1.2 * v.zoom) / v.zoom;
  ctx.stroke();
  // Bucket by style; open boxes by depth first so members sit on top of them.
  const open: number[] = [];
  const buckets: number[][] = [[], [], [], [], [], []];
  nodes.each(e.x1, e.y1, e.x2, e.y2, (i) => {
    if (scene.mountedNode[i]) return;
    if (scene.style[i] === STYLE.open) open.push(i);
    else buckets[scene.style[i]].push(i);
  });
  open.sort((a, b) => scene.z[a] - scene.z[b]);
  const palette = colours(theme);
  // Outlines only where a pixel of border shows; below that the fill alone reads better.
  const outline = v.zoom >= 0.08;
  ctx.lineWidth = 1 / v.zoom;
  for (const i of open) {
    ctx.fillStyle = palette[STYLE.open].fill;
    ctx.strokeStyle = palette[STYLE.open].line;
    ctx.fillRect(n.x1[i], n.y1[i], n.x2[i] - n.x1[i], n.y2[i] - n.y1[i]);
    if (outline) ctx.strokeRect(n.x1[i], n.y1[i], n.x2[i] - n.x1[i], n.y2[i] - n.y1[i]);
  }
  const least = 1 / v.zoom; // at least one pixel, so a far zoom still shows every node
  buckets.forEach((list, s) => {
    if (!list.length) return;
    ctx.beginPath();
    for (const i of list) ctx.rect(n.x1[i], n.y1[i], Math.max(least, n.x2[i] - n.x1[i]), Math.max(least, n.y2[i] - n.y1[i]));
    // Far out a node is a few pixels: its outline colour reads against the background, its fill does not.
    ctx.fillStyle = outline ? palette[s].fill : palette[s].line;
    ctx.fill();
    if (outline) {
      ctx.strokeStyle = palette[s].line;
      ctx.stroke();
    }
  });
  const sel = scene.selected;
  if (sel >= 0 && !scene.mountedNode[sel]) {
    ctx.strokeStyle = theme.brand;
    ctx.lineWidth = 3 / v.zoom;
    ctx.strokeRect(n.x1[sel], n.y1[sel], n.x2[sel] - n.x1[sel], n.y2[sel] - n.y1[sel]);
  }
  return { nodes: open.length + buckets.reduce((a, b) => a + b.length, 0), edges: edgeCount };
}

// The big view's overview layer: one <canvas> under Cytoscape's, drawn with the same pan and zoom.
// Nodes are filled rectangles and edges straight lines, only those meeting the viewport (grid lookup),
// never text: a frame costs what is on screen. Elements mounted in Cytoscape are left to Cytoscape, but for
// the fill of open boxes (drawn here under the members not mounted yet).
import type { Theme } from "../theme";
import type { Paint } from "./decorations";
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
  /** Per node and per edge: its decoration's index in `palette` (a feature's classes: what-if, diff,
   *  heat, stepper), -1 when it is drawn plain. */
  decoNode: Int16Array;
  decoEdge: Int16Array;
  palette: Paint[];
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
  const decoEdges = new Map<number, number[]>();
  ctx.beginPath();
  edges.each(e.x1, e.y1, e.x2, e.y2, (i) => {
    if (scene.mountedEdge[i]) return;
    edgeCount++;
    const d = scene.decoEdge[i];
    if (d >= 0) {
      push(decoEdges, d, i);
      return;
    }
    line(ctx, scene, i);
  });
  ctx.strokeStyle = theme.edge;
  const width = Math.max(1, 1.2 * v.zoom) / v.zoom;
  ctx.lineWidth = width;
  ctx.stroke();
  decoEdges.forEach((list, d) => {
    ctx.beginPath();
    for (const i of list) line(ctx, scene, i);
    ctx.globalAlpha = scene.palette[d].alpha;
    ctx.strokeStyle = scene.palette[d].line;
    ctx.lineWidth = 2 * width;
    ctx.stroke();
  });
  ctx.globalAlpha = 1;
  // Bucket by style (decorated nodes by decoration); open boxes by depth first so members sit on top of them.
  const open: number[] = [];
  const buckets: number[][] = [[], [], [], [], [], []];
  const decorated = new Map<number, number[]>();
  nodes.each(e.x1, e.y1, e.x2, e.y2, (i) => {
    if (scene.style[i] === STYLE.open) open.push(i); // mounted or not: Cytoscape draws no fill for it
    else if (scene.mountedNode[i]) return;
    else if (scene.decoNode[i] >= 0) push(decorated, scene.decoNode[i], i);
    else buckets[scene.style[i]].push(i);
  });
  open.sort((a, b) => scene.z[a] - scene.z[b]);
  const palette: Paint[] = colours(theme).map((c) => ({ ...c, far: c.line, alpha: 1 }));
  // Outlines only where a pixel of border shows; below that the fill alone reads better.
  const outline = v.zoom >= 0.08;
  ctx.lineWidth = 1 / v.zoom;
  for (const i of open) {
    const d = scene.decoNode[i];
    const p = d >= 0 ? scene.palette[d] : palette[STYLE.open];
    ctx.globalAlpha = p.alpha;
    ctx.fillStyle = palette[STYLE.open].fill;
    ctx.strokeStyle = p.line;
    ctx.fillRect(n.x1[i], n.y1[i], n.x2[i] - n.x1[i], n.y2[i] - n.y1[i]);
    if (!scene.mountedNode[i] && (outline || d >= 0)) ctx.strokeRect(n.x1[i], n.y1[i], n.x2[i] - n.x1[i], n.y2[i] - n.y1[i]);
  }
  const least = 1 / v.zoom; // at least one pixel, so a far zoom still shows every node
  const fill = (list: number[], p: Paint): void => {
    ctx.beginPath();
    for (const i of list) ctx.rect(n.x1[i], n.y1[i], Math.max(least, n.x2[i] - n.x1[i]), Math.max(least, n.y2[i] - n.y1[i]));
    // Far out a node is a few pixels: its outline colour reads against the background, its fill does not.
    ctx.globalAlpha = p.alpha;
    ctx.fillStyle = outline ? p.fill : p.far;
    ctx.fill();
    if (outline) {
      ctx.strokeStyle = p.line;
      ctx.stroke();
    }
  };
  buckets.forEach((list, s) => {
    if (list.length) fill(list, palette[s]);
  });
  decorated.forEach((list, d) => fill(list, scene.palette[d]));
  ctx.globalAlpha = 1;
  const sel = scene.selected;
  if (sel >= 0 && !scene.mountedNode[sel]) {
    ctx.strokeStyle = theme.brand;
    ctx.lineWidth = 3 / v.zoom;
    ctx.strokeRect(n.x1[sel], n.y1[sel], n.x2[sel] - n.x1[sel], n.y2[sel] - n.y1[sel]);
  }
  let count = open.length + buckets.reduce((a, b) => a + b.length, 0);
  decorated.forEach((list) => (count += list.length));
  return { nodes: count, edges: edgeCount };
}

function line(ctx: CanvasRenderingContext2D, scene: OverviewScene, i: number): void {
  const n = scene.nodes.rects;
  const s = scene.source[i];
  const t = scene.target[i];
  ctx.moveTo((n.x1[s] + n.x2[s]) / 2, n.y2[s]);
  ctx.lineTo((n.x1[t] + n.x2[t]) / 2, n.y1[t]);
}

function push(buckets: Map<number, number[]>, key: number, i: number): void {
  const list = buckets.get(key);
  if (list) list.push(i);
  else buckets.set(key, [i]);
}

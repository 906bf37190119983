// The big view: past BIG_VIEW_ITEMS items Cytoscape holds only what is on screen. Measured on a flat
// 20,000-node chain (benchmarks/bench_bigview.py), Cytoscape alone spends 45 s on the first render and
// ~500 ms on each pan or zoom frame (labels hidden or not), because its frame walks every element; this
// view 1.2 s and 33 ms (two frame intervals, the measure's floor). Here every position
// lives in typed arrays with a grid index; an overview layer (overview.ts) draws what meets the viewport
// as plain shapes, and once the zoom is readable the elements near the viewport are mounted into
// Cytoscape (labels, clicks, hover, decorations), re-synced after each pan or zoom settles.
import type { CollectionReturnValue, Core, ElementDefinition, EventObject, Position, StylesheetJson } from "cytoscape";
import { BIG_OPEN } from "../style";
import type { Theme } from "../theme";
import { DecorationColours, samePaint, type Paint } from "./decorations";
import { GridIndex } from "./grid";
import { drawOverview, extent, STYLE, styleOf, type OverviewScene, type Viewport } from "./overview";

/** Views with more items than this are drawn by the big view (the plain-layout regime). */
export const BIG_VIEW_ITEMS = 2500;
/** From this zoom on, elements near the viewport are mounted in Cytoscape: node labels are drawn from
 *  5 px (style.ts `min-zoomed-font-size`) of 11 px text, i.e. 0.45. */
export const MOUNT_ZOOM = 0.45;
/** At most this many nodes mounted by a sync (the viewport plus a margin; the viewport alone if that
 *  is too many; none if even that is). */
export const MOUNT_MAX = 1500;
/** A sync waits this long after the last pan or zoom event. */
const SYNC_MS = 120;

/** What a tap on the overview is handed to (GraphView's `ViewHandlers`). */
interface TapHandlers {
  tap(key: string, kind: string, shift: boolean): void;
}

type Lookup = (id: string) => CollectionReturnValue;

export class BigView {
  private readonly cy: Core;
  private readonly canvas: HTMLCanvasElement;
  private readonly ctx: CanvasRenderingContext2D | null;
  private theme: Theme;
  /** Re-applies the view's decorations (GraphView.paint with its paint state) to what is mounted. */
  private readonly repaint: () => void;
  private nodeDefs: ElementDefinition[] = [];
  private edgeDefs: ElementDefinition[] = [];
  private nodeAt = new Map<string, number>();
  private edgeAt = new Map<string, number>();
  /** Per node: the edges touching it (CSR). */
  private incStart = new Int32Array(1);
  private inc = new Int32Array(0);
  private scene: OverviewScene;
  private pinned = new Set<number>();
  private frame = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private busy = false;
  private readonly lookup: Lookup;
  private readonly colours: DecorationColours;
  /** The paint classes the overview's decorations are made from (GraphView.paint's map). */
  private decorations: ReadonlyMap<string, string> = new Map();
  private readonly onViewport = (): void => this.moved();
  private readonly onResize = (): void => this.moved();
  // The selected node stays mounted and outlined however far the view moves.
  private readonly onSelect = (): void => this.setSelected(this.cy.$("node:selected").first().id() ?? null);
  private readonly onDestroy = (): void => this.dispose();
  /** Syncs done, nodes and edges mounted, and what the last overview frame drew (for hooks, tests). */
  stats = { syncs: 0, syncMs: 0, drawMs: 0, mountedNodes: 0, mountedEdges: 0, drawnNodes: 0, drawnEdges: 0 };

  /** The big view for a view of `items` items: `current` (or a new one from `make`) past
   *  BIG_VIEW_ITEMS, else null (`current` disposed): below it everything stays as it always was. */
  static forSize(current: BigView | null, items: number, make: () => BigView): BigView | null {
    // `globalThis.gradvizBigViewItems` moves the threshold: benchmarks/bench_bigview.py draws the same
    // page with Cytoscape alone (Infinity) to compare.
    const limit = (globalThis as { gradvizBigViewItems?: number }).gradvizBigViewItems ?? BIG_VIEW_ITEMS;
    if (items > limit) return current ?? make();
    current?.dispose();
    return null;
  }

  constructor(cy: Core, container: HTMLElement, theme: Theme, sheet: StylesheetJson, repaint: () => void) {
    this.cy = cy;
    this.theme = theme;
    this.colours = new DecorationColours(sheet);
    this.repaint = repaint;
    this.canvas = document.createElement("canvas");
    this.canvas.className = "gradviz-overview";
    this.canvas.dataset.testid = "gradviz-overview";
    this.canvas.style.cssText = "position:absolute;left:0;top:0;pointer-events:none;";
    container.insertBefore(this.canvas, container.firstChild);
    // Page tests and image tools reach the view through its canvas (as `root.__gradviz` for the rest).
    Object.assign(this.canvas, { __gradvizBig: this });
    this.ctx = this.canvas.getContext("2d");
    const empty = new GridIndex({ x1: new Float64Array(0), y1: new Float64Array(0), x2: new Float64Array(0), y2: new Float64Array(0) });
    this.scene = {
      nodes: empty,
      edges: empty,
      style: new Uint8Array(0),
      z: new Float64Array(0),
      source: new Int32Array(0),
      target: new Int32Array(0),
      mountedNode: new Uint8Array(0),
      mountedEdge: new Uint8Array(0),
      selected: -1,
      decoNode: new Int16Array(0),
      decoEdge: new Int16Array(0),
      palette: [],
    };
    // Anything that asks Cytoscape for an element by id (a feature's focus, the stepper's running
    // node, a search reveal, selection) gets it mounted, so code written for a full Cytoscape works.
    const own = cy.getElementById.bind(cy) as Lookup;
    this.lookup = own;
    const demand = ((id: string) => {
      const found = own(id);
      if (found.nonempty() || this.busy) return found;
      if (!this.nodeAt.has(id) && !this.edgeAt.has(id)) return found;
      this.mountKeys([id]);
      return own(id);
    }) as Lookup;
    Object.assign(cy, { getElementById: demand, $id: demand });
    cy.on("viewport", this.onViewport);
    cy.on("resize", this.onResize);
    cy.on("select unselect", "node", this.onSelect);
    cy.on("destroy", this.onDestroy);
  }

  /** Replace what is drawn by `elements` (from toElements); mounts what the viewport needs and keeps
   *  the selection. */
  load(elements: ElementDefinition[]): void {
    const selected = this.cy.$("node:selected").first();
    const keep = selected.nonempty() ? selected.id() : null;
    this.nodeDefs = elements.filter((d) => d.group === "nodes");
    this.edgeDefs = elements.filter((d) => d.group === "edges");
    const n = this.nodeDefs.length;
    const m = this.edgeDefs.length;
    this.nodeAt = new Map(this.nodeDefs.map((d, i) => [d.data.id!, i]));
    const rect = { x1: new Float64Array(n), y1: new Float64Array(n), x2: new Float64Array(n), y2: new Float64Array(n) };
    const style = new Uint8Array(n);
    const z = new Float64Array(n);
    this.pinned = new Set();
    this.nodeDefs.forEach((d, i) => {
      const p = d.position ?? { x: 0, y: 0 };
      const w = Number(d.data.w) || 10;
      const h = Number(d.data.h) || 10;
      rect.x1[i] = p.x - w / 2;
      rect.x2[i] = p.x + w / 2;
      rect.y1[i] = p.y - h / 2;
      rect.y2[i] = p.y + h / 2;
      style[i] = styleOf(String(d.data.kind));
      z[i] = Number(d.data.z) || 0;
      // The loss stays mounted: the first view frames it (GraphView.fitReadable looks it up by kind).
      if (d.data.kind === "root") this.pinned.add(i);
    });
    const source = new Int32Array(m);
    const target = new Int32Array(m);
    const erect = { x1: new Float64Array(m), y1: new Float64Array(m), x2: new Float64Array(m), y2: new Float64Array(m) };
    const degree = new Int32Array(n + 1);
    this.edgeAt = new Map();
    this.edgeDefs.forEach((d, k) => {
      this.edgeAt.set(d.data.id!, k);
      const s = (source[k] = this.nodeAt.get(String(d.data.source)) ?? -1);
      const t = (target[k] = this.nodeAt.get(String(d.data.target)) ?? -1);
      if (s < 0 || t < 0) return;
      erect.x1[k] = Math.min(rect.x1[s] + rect.x2[s], rect.x1[t] + rect.x2[t]) / 2;
      erect.x2[k] = Math.max(rect.x1[s] + rect.x2[s], rect.x1[t] + rect.x2[t]) / 2;
      erect.y1[k] = Math.min(rect.y2[s], rect.y1[t]);
      erect.y2[k] = Math.max(rect.y2[s], rect.y1[t]);
      degree[s + 1]++;
      if (t !== s) degree[t + 1]++;
    });
    for (let i = 0; i < n; i++) degree[i + 1] += degree[i];
    const fill = degree.slice(0, n);
    const inc = new Int32Array(degree[n]);
    for (let k = 0; k < m; k++) {
      if (source[k] < 0 || target[k] < 0) continue;
      inc[fill[source[k]]++] = k;
      if (target[k] !== source[k]) inc[fill[target[k]]++] = k;
    }
    this.incStart = degree;
    this.inc = inc;
    this.scene = {
      nodes: new GridIndex(rect),
      edges: new GridIndex(erect),
      style,
      z,
      source,
      target,
      mountedNode: new Uint8Array(n),
      mountedEdge: new Uint8Array(m),
      selected: -1,
      decoNode: new Int16Array(n).fill(-1),
      decoEdge: new Int16Array(m).fill(-1),
      palette: [],
    };
    this.redecorate();
    this.stats.mountedNodes = 0;
    this.stats.mountedEdges = 0;
    this.busy = true;
    this.cy.elements().remove();
    this.busy = false;
    if (keep !== null && this.nodeAt.has(keep)) this.setSelected(keep);
    this.sync();
  }

  get nodeCount(): number {
    return this.nodeDefs.length;
  }

  setTheme(theme: Theme, sheet: StylesheetJson): void {
    this.theme = theme;
    this.colours.setSheet(sheet);
    this.redecorate();
  }

  /** A feature's classes per element key (GraphView.paint): what the overview draws in their colours,
   *  so a decoration reads zoomed out as it does mounted (lost leaves, diff changes, heat, NaN). */
  decorate(classes: ReadonlyMap<string, string>): void {
    if (classes === this.decorations) return; // a repaint after a mount passes the same map
    this.decorations = classes;
    this.redecorate();
  }

  /** Each element's decoration index, from the paint classes, the loaded elements and the stylesheet. */
  private redecorate(): void {
    const classes = this.decorations;
    const { decoNode, decoEdge } = this.scene;
    decoNode.fill(-1);
    decoEdge.fill(-1);
    const palette: Paint[] = [];
    const index = (p: Paint): number => {
      let k = palette.findIndex((q) => samePaint(p, q));
      if (k < 0) k = palette.push(p) - 1;
      return k;
    };
    classes.forEach((extra, key) => {
      if (!extra) return;
      const i = this.nodeAt.get(key);
      if (i !== undefined) {
        const d = this.nodeDefs[i];
        const own = ownClasses(d);
        const kind = String(d.data.kind);
        const p = this.colours.node(kind, `${own} ${extra}`.trim());
        if (!samePaint(p, this.colours.node(kind, own))) decoNode[i] = index(p);
        return;
      }
      const k = this.edgeAt.get(key);
      if (k === undefined) return;
      const own = ownClasses(this.edgeDefs[k]);
      const p = this.colours.edge(`${own} ${extra}`.trim());
      if (!samePaint(p, this.colours.edge(own))) decoEdge[k] = index(p);
    });
    this.scene.palette = palette;
    this.requestDraw();
  }

  /** The selected element key (kept mounted and outlined); null: none. */
  private setSelected(key: string | null): void {
    const i = key === null ? undefined : this.nodeAt.get(key);
    const before = this.scene.selected;
    if (before >= 0 && this.nodeDefs[before]?.data.kind !== "root") this.pinned.delete(before);
    this.scene.selected = i ?? -1;
    if (i !== undefined) this.pinned.add(i);
    this.requestDraw();
  }

  /** The node under a model position (a member before the open box holding it); null: none. */
  hit(p: Position): { key: string; kind: string } | null {
    let best = -1;
    const r = this.scene.nodes.rects;
    this.scene.nodes.each(p.x, p.y, p.x, p.y, (i) => {
      const rank = (j: number) => (this.scene.style[j] === 4 ? 0 : 1e6) + this.scene.z[j];
      if (p.x < r.x1[i] || p.x > r.x2[i] || p.y < r.y1[i] || p.y > r.y2[i]) return;
      if (best < 0 || rank(i) > rank(best)) best = i;
    });
    if (best < 0) return null;
    const d = this.nodeDefs[best].data;
    return { key: String(d.id), kind: String(d.kind) };
  }

  /** Model rectangle of a node or box by element key (mounted or not); null when not drawn. */
  rectOf(key: string): { x1: number; y1: number; x2: number; y2: number } | null {
    const i = this.nodeAt.get(key);
    if (i === undefined) return null;
    const r = this.scene.nodes.rects;
    return { x1: r.x1[i], y1: r.y1[i], x2: r.x2[i], y2: r.y2[i] };
  }

  private viewport(): Viewport {
    return { zoom: this.cy.zoom(), pan: this.cy.pan(), width: this.cy.width(), height: this.cy.height() };
  }

  /** A pan or zoom: redraw the overview next frame, re-sync the mounted set once it settles. */
  private moved(): void {
    this.requestDraw();
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.sync();
    }, SYNC_MS);
  }

  private requestDraw(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  /** Draw the overview now (also what a frame does). */
  draw(): void {
    if (!this.ctx) return;
    const v = this.viewport();
    const w = Math.max(1, Math.round(v.width));
    const h = Math.max(1, Math.round(v.height));
    if (this.canvas.width !== w || this.canvas.height !== h) {
      this.canvas.width = w;
      this.canvas.height = h;
      this.canvas.style.width = `${w}px`;
      this.canvas.style.height = `${h}px`;
    }
    const started = performance.now();
    const drawn = drawOverview(this.ctx, this.scene, v, this.theme);
    this.stats.drawMs = performance.now() - started;
    this.stats.drawnNodes = drawn.nodes;
    this.stats.drawnEdges = drawn.edges;
    this.canvas.dataset.drawnNodes = String(drawn.nodes);
  }

  /** Nodes a sync keeps mounted: the pinned ones, plus (at a readable zoom) those near the viewport. */
  private wanted(): Set<number> {
    const want = new Set(this.pinned);
    const v = this.viewport();
    if (v.zoom < MOUNT_ZOOM - 1e-9) return want;
    const e = extent(v);
    const mx = (e.x2 - e.x1) / 2;
    const my = (e.y2 - e.y1) / 2;
    const grid = this.scene.nodes;
    const near = grid.within(e.x1 - mx, e.y1 - my, e.x2 + mx, e.y2 + my, MOUNT_MAX) ?? grid.within(e.x1, e.y1, e.x2, e.y2, MOUNT_MAX) ?? [];
    for (const i of near) want.add(i);
    return want;
  }

  /** Mount exactly what is wanted now (batched adds and removes). */
  sync(): void {
    const started = performance.now();
    const want = this.wanted();
    const { mountedNode } = this.scene;
    const gone: number[] = [];
    for (let i = 0; i < mountedNode.length; i++) if (mountedNode[i] && !want.has(i)) gone.push(i);
    this.unmount(gone);
    this.mount([...want].filter((i) => !mountedNode[i]));
    this.draw();
    this.stats.syncs++;
    this.stats.syncMs = performance.now() - started;
    this.cy.container()?.setAttribute("data-big-syncs", String(this.stats.syncs));
    this.cy.container()?.setAttribute("data-big-sync-ms", this.stats.syncMs.toFixed(1));
    // The viewport this sync mounted for: a test (or tool) waits until it is the current one.
    const v = this.viewport();
    this.cy.container()?.setAttribute("data-big-synced", `${v.zoom} ${v.pan.x} ${v.pan.y}`);
  }

  /** Run `f` with every element mounted (image export draws the whole graph), then mount only what
   *  the viewport needs again. */
  whole<T>(f: () => T): T {
    const { mountedNode } = this.scene;
    this.mount([...mountedNode.keys()].filter((i) => !mountedNode[i]));
    try {
      return f();
    } finally {
      this.sync();
    }
  }

  /** Mount elements by key (nodes, or edges with both their ends). */
  private mountKeys(keys: string[]): void {
    const nodes: number[] = [];
    for (const key of keys) {
      const i = this.nodeAt.get(key);
      if (i !== undefined) nodes.push(i);
      const k = this.edgeAt.get(key);
      if (k !== undefined) nodes.push(this.scene.source[k], this.scene.target[k]);
    }
    this.mount(nodes.filter((i) => i >= 0 && !this.scene.mountedNode[i]));
    this.requestDraw();
  }

  private mount(nodes: number[]): void {
    const { mountedNode, mountedEdge, source, target } = this.scene;
    const defs: ElementDefinition[] = [];
    for (const i of nodes) {
      mountedNode[i] = 1;
      this.stats.mountedNodes++;
      const d = this.nodeDefs[i];
      // Copies: Cytoscape keeps the objects it is given and paint() changes their data. An open box gets
      // no fill of its own: the overview draws it, under the members it has not mounted yet.
      const open = this.scene.style[i] === STYLE.open;
      const classes = open ? `${ownClasses(d)} ${BIG_OPEN}`.trim() : d.classes;
      defs.push({ group: "nodes", data: { ...d.data }, position: { ...d.position! }, classes });
    }
    for (const i of nodes) {
      for (let j = this.incStart[i]; j < this.incStart[i + 1]; j++) {
        const k = this.inc[j];
        if (mountedEdge[k] || !mountedNode[source[k]] || !mountedNode[target[k]]) continue;
        mountedEdge[k] = 1;
        this.stats.mountedEdges++;
        const d = this.edgeDefs[k];
        defs.push({ group: "edges", data: { ...d.data }, classes: d.classes });
      }
    }
    if (!defs.length) return;
    this.busy = true;
    try {
      let added: CollectionReturnValue | null = null;
      this.cy.batch(() => {
        added = this.cy.add(defs);
      });
      const sel = this.scene.selected;
      if (sel >= 0 && mountedNode[sel] && !this.cy.autounselectify()) this.lookup(String(this.nodeDefs[sel].data.id)).select();
      if (added) {
        (added as CollectionReturnValue).forEach((ele) => {
          ele.scratch("_base", ele.classes().join(" "));
          ele.scratch("_cls", ele.scratch("_base"));
        });
        this.repaint();
      }
    } finally {
      this.busy = false;
    }
    this.count();
  }

  private unmount(nodes: number[]): void {
    if (!nodes.length) return;
    const { mountedNode, mountedEdge } = this.scene;
    this.busy = true;
    try {
      this.cy.batch(() => {
        const gone = this.cy.collection();
        for (const i of nodes) {
          mountedNode[i] = 0;
          this.stats.mountedNodes--;
          for (let j = this.incStart[i]; j < this.incStart[i + 1]; j++) {
            const k = this.inc[j];
            if (mountedEdge[k]) this.stats.mountedEdges--;
            mountedEdge[k] = 0;
          }
          gone.merge(this.lookup(String(this.nodeDefs[i].data.id)));
        }
        gone.remove(); // takes the edges touching them along
      });
    } finally {
      this.busy = false;
    }
    this.count();
  }

  private count(): void {
    this.cy.container()?.setAttribute("data-big-mounted", String(this.stats.mountedNodes));
  }

  /** A tap Cytoscape gave the background: when a node of the overview is under it, hand it on as a
   *  tap on that node (true). */
  tapped(e: EventObject, handlers: TapHandlers, shift: boolean): boolean {
    const hit = this.hit(e.position);
    if (hit) handlers.tap(hit.key, hit.kind, shift);
    return !!hit;
  }

  dispose(): void {
    this.cy.off("viewport", this.onViewport);
    this.cy.off("resize", this.onResize);
    this.cy.off("select unselect", "node", this.onSelect);
    this.cy.off("destroy", this.onDestroy);
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.frame) cancelAnimationFrame(this.frame);
    this.colours.dispose();
    // Back to Cytoscape's own lookups (the prototype's).
    delete (this.cy as unknown as Record<string, unknown>).getElementById;
    delete (this.cy as unknown as Record<string, unknown>).$id;
    this.canvas.remove();
  }
}

/** The classes an element definition brings (toElements gives a string or none). */
function ownClasses(d: ElementDefinition): string {
  return typeof d.classes === "string" ? d.classes : "";
}

// The canvas: Cytoscape draws, ELK (in a worker) places. Knows nothing of the anywidget model.
import cytoscape from "cytoscape";
import type { Core, ElementDefinition, EventObject, NodeSingular, StylesheetJson } from "cytoscape";
import type { VisibleGraph, VisibleItem } from "../state/quotient";
import { BOX_PADDING } from "./elkgraph";
import { labelOf, layoutBounds, toElements, type Bounds } from "./elements";
import { detourEdges, edgesThroughItems, findRegion, placeRegion, type Snapshot } from "./incremental";
import { LayoutEngine, type Layout, type Point, type Size } from "./layout";
import { avoidHeaders, orthogonalRoutes } from "./reroute";
import { FONT_SIZE, LINE_HEIGHT, NODE_PAD, stylesheet } from "./style";
import { toSVG } from "./svg";
import { pullStubs } from "./stubs";
import { BigView } from "./bigview/bigview";
import { Camera, type Subject } from "./camera";
import type { Theme } from "./theme";

/** Everything drawn over the laid-out graph, merged from what-if, stepper and overlay: applied as
 *  classes and label / size data only, never a re-layout. */
export interface Paint {
  /** Element key -> space separated classes (style.ts selectors). */
  classes: Map<string, string>;
  /** Element key -> label template, "{base}" standing for the base label. */
  labels: Map<string, string>;
  /** Element key -> size factor (overlay encoding "size"). */
  sizes: Map<string, number>;
  /** Edge key -> label (gradient carried now). */
  edgeLabels: Map<string, string>;
  /** Element key -> text appended to the label's first line (" ⊘"). */
  suffixes: Map<string, string>;
}

export const EMPTY_PAINT: Paint = { classes: new Map(), labels: new Map(), sizes: new Map(), edgeLabels: new Map(), suffixes: new Map() };

export interface ViewHandlers {
  /** A node or box was clicked; `key` is its element id ("n:<node id>" or "c:<call id>"). */
  tap(key: string, kind: string, shift: boolean): void;
  /** An edge was clicked (only in what-if mode do edges take clicks); `key` is a VisibleEdge key. */
  tapEdge(key: string, shift: boolean): void;
  background(): void;
  /** The pointer entered (key) or left (null) a node or box. */
  hover?(key: string | null, client: { x: number; y: number }): void;
}

/** Keep a box where the user clicked it: its top-centre stays at the same screen point. */
export interface Anchor {
  key: string;
  rendered: { x: number; y: number };
}

export interface ShowOptions {
  anchor?: Anchor;
  fit?: boolean;
  /** One user expand / collapse / unfold: re-lay out only the changed region and shift the rest,
   *  when a previous layout exists (falls back to a full layout otherwise). */
  incremental?: boolean;
}

/** Up to this many items an incremental placement is checked for edges through boxes (and laid out
 *  in full when it has any); bigger views keep the fast placement. */
const REROUTE_LIMIT = 1500;

export { READABLE_ZOOM } from "./camera";
/** Edge data that toSegments() sets (an edge is kept in place only when these are unchanged). */
const SEGMENT_KEYS = ["ws", "ds", "sep", "tep"] as const;
const POINTER_EVENTS = ["mousedown", "touchstart", "pointerdown", "wheel", "mouseover"] as const;

type FindNearest = (x: number, y: number, interactiveOnly: boolean, isTouch: boolean) => { id(): string } | null;

export class GraphView {
  readonly cy: Core;
  /** Where the viewport looks (camera.ts): framing, resizes, clamped pans, Fit. */
  readonly camera: Camera;
  private engine = new LayoutEngine();
  private generation = 0;
  private measureCtx: CanvasRenderingContext2D | null;
  private measured = new Map<string, Readonly<Size>>(); // label sizes by font and text (measureLabel)
  private theme: Theme;
  lastLayoutMs = 0;
  /** The last show() re-laid out only the changed region (incremental) and shifted the rest. */
  lastLayoutIncremental = false;
  private simple = false;
  /** The graph, layout and leaf sizes last drawn: what an incremental show() builds on. */
  private snapshot: Snapshot | null = null;
  /** The last layout was the plain fallback for graphs too big for ELK (for an incremental one:
   *  the picture it builds on, or the region itself, was). */
  get simpleLayout(): boolean {
    return this.simple;
  }
  /** The graph currently drawn (null before the first layout). */
  shown: VisibleGraph | null = null;
  private tapEdges = false;
  private paintState: Paint = EMPTY_PAINT;
  /** Edges of the selected node (class "hl"). */
  private hl = new Set<string>();
  /** Extra label variants to size a node for at layout (stepper "data | grad" lines). */
  private reserve: ((key: string) => string[][] | null) | null = null;
  private layoutScale: ((graph: VisibleGraph) => ReadonlyMap<string, number>) | null = null;
  /** Edges the last incremental placement would have drawn through boxes (routed round, or the view
   *  laid out in full when that was not enough). */
  rerouted = 0;
  private invalidateOffsets: () => void;
  private container: HTMLElement;
  /** Pixels at the bottom of the canvas that a fit leaves free (the legend sits there). */
  private bottomReserve = 0;
  big: BigView | null = null; // past BIG_VIEW_ITEMS items Cytoscape holds only what is near the viewport
  /** The stylesheet Cytoscape draws with (the big view's overview asks it for decoration colours). */
  private sheet: StylesheetJson;

  constructor(container: HTMLElement, theme: Theme, handlers: ViewHandlers) {
    this.theme = theme;
    this.measureCtx = document.createElement("canvas").getContext("2d");
    this.sheet = stylesheet(theme);
    this.cy = cytoscape({
      container,
      style: this.sheet,
      layout: { name: "preset" },
      minZoom: 0.03,
      maxZoom: 4,
      boxSelectionEnabled: false,
      selectionType: "single",
      autoungrabify: true,
      // Pans and zooms move a snapshot of the canvas instead of redrawing every element; edges are
      // hidden while the viewport moves (big graphs stay smooth).
      textureOnViewport: true,
      hideEdgesOnViewport: true,
      pixelRatio: 1,
    });
    // Cytoscape caches the canvas's page offset and drops the cache on scroll events of the
    // ancestors it saw when created. anywidget may render before `el` is in the page, so a
    // notebook scrolling later goes unseen and clicks land beside their target. Drop the cache
    // ourselves before every pointer interaction (capture phase: before Cytoscape's handlers).
    this.invalidateOffsets = () => {
      const r = (this.cy as unknown as { renderer(): { invalidateContainerClientCoordsCache?(): void } }).renderer();
      if (r.invalidateContainerClientCoordsCache) r.invalidateContainerClientCoordsCache();
      else this.cy.resize();
    };
    this.container = container;
    this.camera = new Camera(this.cy, () => this.snapshot, () => this.bottomReserve);
    for (const type of POINTER_EVENTS) container.addEventListener(type, this.invalidateOffsets, { capture: true, passive: true });
    let lastEvent: Event | undefined;
    this.cy.on("tap", (e: EventObject) => {
      // One physical click can reach us more than once (Cytoscape's tap can repeat per target).
      if (e.originalEvent && e.originalEvent === lastEvent) return;
      lastEvent = e.originalEvent;
      const shift = !!(e.originalEvent as MouseEvent | undefined)?.shiftKey;
      if (e.target === this.cy) {
        if (!this.big?.tapped(e, handlers, shift)) handlers.background();
      } else if (e.target.isNode()) handlers.tap(e.target.id(), e.target.data("kind"), shift);
      else if (e.target.isEdge()) handlers.tapEdge(e.target.id(), shift);
    });
    if (handlers.hover) {
      const hover = handlers.hover;
      const at = (e: EventObject) => {
        const rect = container.getBoundingClientRect();
        return { x: rect.left + e.renderedPosition.x, y: rect.top + e.renderedPosition.y };
      };
      this.cy.on("mouseover", "node", (e: EventObject) => hover(e.target.id(), at(e)));
      this.cy.on("mouseout", "node", (e: EventObject) => hover(null, at(e)));
    }
  }

  /** Lay out and draw `graph`. Resolves false when a newer call superseded this one. */
  async show(graph: VisibleGraph, options: ShowOptions = {}): Promise<boolean> {
    const generation = ++this.generation;
    const sizes = new Map<string, Size>();
    for (const item of graph.items) {
      if (item.type === "expanded") {
        // An open box's header sits above it: the box is laid out at least that wide (height: ELK's).
        sizes.set(item.key, { width: this.measure(item).width + 2 * BOX_PADDING.side, height: 0 });
        continue;
      }
      let size = this.measure(item);
      // With a recording, any node may become the running node: its label drawn bold inside a 5 px border
      // (at the label's width alone the border covered its first and last letters: "lata 6 | grad 4.77e-").
      if (this.reserve && item.type === "node") size = maxSize(size, runRoom(this.measureLabel(labelOf(item), true, false)));
      for (const lines of this.reserve?.(item.key) ?? []) {
        if (!lines.length) continue;
        const r = runRoom(this.measureLabel(labelOf(item) + "\n" + lines.join("\n"), true, item.type === "collapsed"));
        size = { width: Math.max(size.width, r.width), height: Math.max(size.height, r.height) };
      }
      sizes.set(item.key, size);
    }
    // Nodes a feature draws bigger (an overlay's "size" encoding) are laid out at that size, so they
    // never overlap; their elements keep the measured size, and paint() applies the factor.
    const scale = this.layoutScale?.(graph);
    const laidOut = new Map(sizes);
    for (const [key, f] of scale ?? []) {
      const size = sizes.get(key);
      if (size && f > 1) laidOut.set(key, { width: Math.ceil(size.width * f), height: Math.ceil(size.height * f) });
    }
    const started = performance.now();
    const layout = await this.layoutOf(graph, laidOut, !!options.incremental);
    if (!layout) return false;
    if (generation !== this.generation) return false;
    pullStubs(graph, layout.layout, laidOut); // ghost stubs the engine lifted far from their target
    avoidHeaders(graph, layout.layout, laidOut); // a full layout's own routes too enter boxes through their header text
    this.lastLayoutMs = performance.now() - started;
    this.snapshot = { graph, layout: layout.layout, sizes: laidOut };
    this.camera.laidOut();
    this.lastLayoutIncremental = layout.incremental;
    this.simple = layout.simple;
    const elements = toElements(graph, layout.layout, sizes);
    if (this.showBig(graph, elements)) return true;
    const selected = this.cy.$("node:selected").map((n) => n.id());
    let fresh: ElementDefinition[] = elements;
    this.cy.batch(() => {
      if (layout.incremental) fresh = this.update(elements);
      else this.cy.elements().remove();
      const added = this.cy.add(fresh);
      for (const id of selected) this.cy.getElementById(id).select();
      added.forEach((ele) => {
        ele.scratch("_base", ele.classes().join(" "));
        ele.scratch("_cls", ele.scratch("_base"));
      });
    });
    this.shown = graph;
    this.paint(this.paintState);
    if (options.anchor && this.cy.getElementById(options.anchor.key).nonempty()) this.keepAnchor(options.anchor);
    else if (options.fit) this.camera.frame(this.camera.subject);
    else this.camera.relaid();
    return true;
  }

  /** Big view hook: a view past BIG_VIEW_ITEMS items goes to the big view (true). */
  private showBig(graph: VisibleGraph, elements: ElementDefinition[]): boolean {
    this.big = BigView.forSize(this.big, graph.items.length, () => new BigView(this.cy, this.container, this.theme, this.sheet, () => this.paint(this.paintState)));
    if (!this.big) return false;
    this.shown = graph;
    this.big.load(elements);
    return true;
  }

  /** After an incremental layout: keep the elements that are still drawn alike (moving them, and
   *  resizing refitted boxes), remove the others; returns the definitions still to add. Kept elements
   *  keep their Cytoscape caches (label sizes, styles), which is most of the saving on big views. */
  private update(elements: ElementDefinition[]): ElementDefinition[] {
    const want = new Map<string, ElementDefinition>();
    for (const def of elements) want.set(def.data.id!, def);
    const gone = this.cy.collection();
    this.cy.elements().forEach((ele) => {
      const def = want.get(ele.id());
      const d = def?.data;
      if (!def || !d) {
        gone.merge(ele);
        return;
      }
      if (ele.group() === "nodes") {
        if (d.kind !== ele.data("kind") || d.base !== ele.data("base") || d.box !== ele.data("box") || d.z !== ele.data("z")) {
          gone.merge(ele);
          return;
        }
        if (d.bw !== ele.data("bw") || d.bh !== ele.data("bh")) {
          // A refitted open box: back to its base label and size; paint() redoes any decoration.
          ele.data({ label: d.base, w: d.w, h: d.h, bw: d.bw, bh: d.bh });
          ele.removeScratch("_f");
        }
        const p = def.position;
        const q = ele.position();
        if (p && (p.x !== q.x || p.y !== q.y)) ele.position(p);
        return;
      }
      const same =
        d.source === ele.data("source") &&
        d.target === ele.data("target") &&
        d.count === ele.data("count") &&
        (def.classes ?? "") === (ele.scratch("_base") ?? "") &&
        SEGMENT_KEYS.every((k) => JSON.stringify(d[k]) === JSON.stringify(ele.data(k)));
      if (!same) gone.merge(ele);
    });
    gone.remove();
    return elements.filter((def) => this.cy.getElementById(def.data.id!).empty());
  }

  /** Incremental when asked and possible (one changed region, see incremental.ts), else whole-graph. */
  private async layoutOf(
    graph: VisibleGraph,
    sizes: Map<string, Size>,
    incremental: boolean,
  ): Promise<{ layout: Layout; incremental: boolean; simple: boolean } | null> {
    const sizeOf = (key: string): Size => sizes.get(key)!;
    const prev = this.snapshot;
    const generation = this.generation;
    if (incremental && prev && this.engine.aspect === null) {
      const region = findRegion(prev.graph, graph, { prev: prev.sizes, next: sizes });
      if (region) {
        const sub = await this.engine.layout(region.sub, sizeOf);
        if (generation !== this.generation) return null;
        const placed = placeRegion(prev, graph, region, sub, sizes);
        if (placed) {
          // Edges whose ends moved apart lost their route: orthogonal ones, clear of header text.
          orthogonalRoutes(graph, placed.layout, sizes);
          avoidHeaders(graph, placed.layout, sizes);
        }
        // Placement keeps everything else where it was, but an edge from outside the region is then a
        // straight line that may cut through boxes (a tied weight across every block): when it does,
        // the whole view is laid out again so ELK routes it round them.
        let crossing = placed && graph.items.length <= REROUTE_LIMIT ? edgesThroughItems(graph, placed.layout, sizes) : [];
        this.rerouted = crossing.length;
        // First try to route just those edges round the drawing (everything else stays put); only if
        // some still cross is the whole view laid out again.
        if (placed && crossing.length && detourEdges(graph, placed.layout, sizes, crossing).length) {
          crossing = edgesThroughItems(graph, placed.layout, sizes);
        }
        if (placed && !crossing.length) return { layout: placed.layout, incremental: true, simple: this.simple || this.engine.simple };
      }
    }
    const layout = await this.engine.layout(graph, sizeOf);
    return { layout, incremental: false, simple: this.engine.simple };
  }

  /** Screen point (relative to the canvas) of a box's top-centre, for `Anchor`. */
  anchorOf(key: string): Anchor | undefined {
    const n = this.cy.getElementById(key);
    if (n.empty()) return undefined;
    const bb = n.renderedBoundingBox({ includeLabels: false, includeOverlays: false });
    return { key, rendered: { x: (bb.x1 + bb.x2) / 2, y: bb.y1 } };
  }

  private keepAnchor(anchor: Anchor): void {
    const bb = this.cy.getElementById(anchor.key).boundingBox({ includeLabels: false, includeOverlays: false });
    const zoom = this.cy.zoom();
    this.cy.pan({ x: anchor.rendered.x - zoom * ((bb.x1 + bb.x2) / 2), y: anchor.rendered.y - zoom * bb.y1 });
  }

  /** The toolbar's Fit (camera.fitAll): the whole graph when it reads, else `subject`'s neighbourhood; again:
   *  the whole graph. `subject` undefined: what the view was last framed on. */
  fit(subject?: Subject | null, whole = false): void {
    this.cy.resize();
    this.camera.fitAll(subject === undefined ? this.camera.subject : subject, whole);
  }

  /** Keep `px` free at the bottom on the next fit; true when it changed. */
  setBottomReserve(px: number): boolean {
    const changed = Math.abs(px - this.bottomReserve) > 0.5;
    this.bottomReserve = px;
    return changed;
  }

  /** The whole graph (not only what is in view) as an SVG document. */
  toSVG(): string {
    return this.whole(() => toSVG(this.cy, this.theme.background, this.theme.fontFamily));
  }

  /** The whole graph as a PNG data URL (`scale` x model resolution). */
  toPNG(scale = 2): string {
    return this.whole(() => this.cy.png({ full: true, scale, bg: this.theme.background, output: "base64uri" }));
  }

  /** The whole graph as a PNG blob, for a download. */
  toPNGBlob(scale = 2): Blob {
    return this.whole(() => this.cy.png({ full: true, scale, bg: this.theme.background, output: "blob" }));
  }

  /** Big view hook: images are of the whole graph, so everything is mounted while one is made. */
  private whole<T>(f: () => T): T {
    return this.big ? this.big.whole(f) : f();
  }

  /** Height the drawn graph needs on screen at the largest fit zoom (model units x 1.25, plus room for
   *  the padding and the legend); null before the first layout. */
  contentHeight(zoom = 1.25): number | null {
    const bb = this.layoutBounds((k) => !!k);
    return bb ? Math.ceil(bb.h * zoom + 48 + this.bottomReserve) : null;
  }

  /** Bounds of the drawn items (as laid out) that `take`; null before the first layout. */
  private layoutBounds(take: (key: string, open: boolean, y1: number) => boolean): Bounds | null {
    return this.snapshot ? layoutBounds(this.snapshot.layout, this.snapshot.sizes, take) : null;
  }

  zoomReset(): void {
    const center = { x: this.cy.width() / 2, y: this.cy.height() / 2 };
    this.cy.zoom({ level: 1, renderedPosition: center });
  }

  select(key: string | null): void {
    this.cy.batch(() => {
      this.cy.$(":selected").unselect();
      this.hl = new Set();
      if (key) {
        const n = this.cy.getElementById(key);
        n.select();
        n.connectedEdges().forEach((e) => {
          this.hl.add(e.id());
        });
      }
    });
    this.paint(this.paintState);
  }

  /** Page (client) coordinates to click an element with a real mouse: the centre of a node or
   *  collapsed box; for an expanded box, a point of its header strip that Cytoscape's own hit test
   *  gives to the box (not a child, not a label of something else). Null when not drawn. */
  clientPoint(key: string): { x: number; y: number } | null {
    const n = this.cy.getElementById(key) as NodeSingular;
    if (n.empty()) return null;
    this.scrollToClick(n);
    const rect = this.cy.container()!.getBoundingClientRect();
    const client = (p: Point) => ({ x: rect.left + p.x, y: rect.top + p.y });
    if (n.data("kind") !== "expanded") return client(n.renderedPosition());
    const bb = n.renderedBoundingBox({ includeLabels: false, includeOverlays: false });
    const withLabel = n.renderedBoundingBox({ includeLabels: true, includeOverlays: false });
    const mid = (bb.x1 + bb.x2) / 2;
    const candidates: Point[] = [];
    for (const y of [bb.y1 + 4, (withLabel.y1 + bb.y1) / 2, bb.y1 + 9]) {
      for (let dx = 0; dx < (bb.x2 - bb.x1) / 2 - 2; dx += 4) candidates.push({ x: mid - dx, y }, { x: mid + dx, y });
    }
    const hitTest = (this.cy as unknown as { renderer(): { findNearestElement?: FindNearest } }).renderer().findNearestElement;
    if (!hitTest) return client(candidates[0]);
    const pan = this.cy.pan();
    const zoom = this.cy.zoom();
    const renderer = (this.cy as unknown as { renderer(): unknown }).renderer();
    const hit = candidates.find((p) => {
      const el = hitTest.call(renderer, (p.x - pan.x) / zoom, (p.y - pan.y) / zoom, true, false);
      return !!el && el.id() === key;
    });
    return client(hit ?? candidates[0]);
  }

  /** The canvas changed size (a wider cell, a side panel opening): the camera keeps its subject (or
   *  the graph) in view. */
  resize(): void {
    const before = { w: this.cy.width(), h: this.cy.height() };
    this.cy.resize();
    this.camera.keep(before);
  }

  /** A theme and the features' Cytoscape rules for it (from `Feature.styles`, in stylesheet order). */
  setStyles(theme: Theme, featureRules: StylesheetJson): void {
    this.theme = theme;
    this.sheet = stylesheet(theme, featureRules);
    this.big?.setTheme(theme, this.sheet);
    this.cy.style(this.sheet);
  }

  /** Edges take clicks and nothing gets selected (a feature, such as what-if, turns clicks into toggles). */
  setTapEdges(on: boolean): void {
    this.tapEdges = on;
    // A click toggles: Cytoscape must not select what was clicked.
    if (on) this.cy.$(":selected").unselect();
    this.cy.autounselectify(on);
    this.paint(this.paintState);
  }

  /** Pan (no zoom) so the element `key` is whole in the free part of the canvas (camera.reveal). */
  ensureVisible(key: string, margin?: number): boolean {
    return this.camera.reveal(key, margin);
  }


  /** Lay long graphs out in columns aiming at `aspect` (width / height; null: one tall column) from
   *  the next layout on; incremental placement is off while it is set. */
  setAspect(aspect: number | null): void {
    this.engine.aspect = aspect && aspect > 0 ? aspect : null;
  }

  /** Size factors a feature will draw nodes at (laid out at that size); null: none. */
  setLayoutScale(scale: ((graph: VisibleGraph) => ReadonlyMap<string, number>) | null): void {
    this.layoutScale = scale;
  }

  /** Node sizes are measured at layout for the widest of these label variants (then stay put). */
  setReserve(reserve: ((key: string) => string[][] | null) | null): void {
    this.reserve = reserve;
  }

  /** Apply classes and labels: styles only, never a re-layout. Each element gets ONE `classes()`
   *  call, and only when its class string changed; an element whose label changes is re-measured
   *  in place (a badge line, a snowflake, "data | grad") and never shrinks below its laid-out size. */
  paint(p: Paint): void {
    this.paintState = p;
    this.big?.decorate(p.classes);
    const tap = this.tapEdges ? " tap-edge" : "";
    this.cy.batch(() => {
      this.cy.elements().forEach((ele) => {
        const id = ele.id();
        const base: string = ele.scratch("_base") ?? "";
        const extra = p.classes.get(id);
        const isEdge = ele.group() === "edges";
        const want = (
          base + (extra ? " " + extra : "") + (isEdge && !base.includes("ghost") ? tap : "") + (isEdge && this.hl.has(id) ? " hl" : "")
        ).trim();
        if (want !== ele.scratch("_cls")) {
          ele.classes(want);
          ele.scratch("_cls", want);
        }
        if (isEdge) {
          const el = p.edgeLabels.get(id) ?? "";
          if (el !== (ele.data("flowLabel") ?? "")) ele.data("flowLabel", el);
          return;
        }
        const template = p.labels.get(id);
        const baseLabel: string = ele.data("base");
        const suffix = p.suffixes.get(id);
        const firstLine = suffix ? baseLabel.replace(/\n|$/, (m) => suffix + m) : baseLabel;
        const label = template ? template.split("{base}").join(firstLine) : firstLine;
        const factor = p.sizes.get(id) ?? 1;
        if (label === ele.data("label") && factor === (ele.scratch("_f") ?? 1)) return;
        ele.scratch("_f", factor);
        const bw: number = ele.data("bw");
        const bh: number = ele.data("bh");
        if (label === baseLabel) {
          ele.data({ label, w: bw * factor, h: bh * factor });
          return;
        }
        const kind: string = ele.data("kind");
        if (kind === "expanded") {
          ele.data({ label });
          return;
        }
        const size = this.measureLabel(label, kind === "collapsed" || kind === "root", kind === "collapsed");
        ele.data({ label, w: Math.max(size.width, bw) * factor, h: Math.max(size.height, bh) * factor });
      });
    });
  }

  /** Pan (no zoom change), as a user scrolls, so the point a click needs is well inside the canvas:
   *  a node's centre, an open box's header. */
  private scrollToClick(n: NodeSingular): void {
    const bb = n.renderedBoundingBox({ includeLabels: false, includeOverlays: false });
    const w = this.cy.width();
    const h = this.cy.height();
    const open = n.data("kind") === "expanded";
    const p = { x: (bb.x1 + bb.x2) / 2, y: open ? bb.y1 + 6 : (bb.y1 + bb.y2) / 2 };
    if (p.x >= 30 && p.x <= w - 30 && p.y >= 30 && p.y <= h - 40) return;
    this.cy.panBy({ x: w / 2 - p.x, y: (open ? h / 3 : h / 2) - p.y });
  }

  /** Client coordinates of an edge's midpoint (on its drawn route), for a real mouse click. */
  edgePoint(key: string): { x: number; y: number } | null {
    const e = this.cy.getElementById(key);
    if (e.empty() || !e.isEdge()) return null;
    const m = e.renderedMidpoint();
    if (m.x < 30 || m.x > this.cy.width() - 30 || m.y < 30 || m.y > this.cy.height() - 40) {
      this.cy.panBy({ x: this.cy.width() / 2 - m.x, y: this.cy.height() / 2 - m.y });
    }
    const rect = this.cy.container()!.getBoundingClientRect();
    const p = e.renderedMidpoint();
    return { x: rect.left + p.x, y: rect.top + p.y };
  }

  destroy(): void {
    for (const type of POINTER_EVENTS) this.container.removeEventListener(type, this.invalidateOffsets, { capture: true });
    this.generation++;
    this.engine.dispose();
    this.cy.destroy();
  }

  private measure(item: VisibleItem): Size {
    const boxy = item.type === "collapsed" || item.type === "folded";
    const bold = boxy || item.type === "expanded" || (item.type === "node" && item.node.kind === "root");
    return this.measureLabel(labelOf(item), bold, boxy);
  }

  private measureLabel(label: string, bold: boolean, collapsed: boolean): Size {
    // Remembered: a 20,000-node view spent ~0.7 s of its first render setting the font and measuring.
    const key = `${bold ? 1 : 0}${collapsed ? 1 : 0}${this.theme.fontFamily}\n${label}`;
    const known = this.measured.get(key);
    if (known) return known;
    if (this.measured.size > 100_000) this.measured.clear();
    const lines = label.split("\n");
    const ctx = this.measureCtx;
    let width = 0;
    if (ctx) {
      ctx.font = `${bold ? "bold " : ""}${FONT_SIZE}px ${this.theme.fontFamily}`;
      for (const line of lines) width = Math.max(width, ctx.measureText(line).width);
    } else {
      width = Math.max(...lines.map((l) => l.length)) * FONT_SIZE * 0.62;
    }
    const padY = collapsed ? NODE_PAD.y + 4 : NODE_PAD.y;
    const size = {
      width: Math.ceil(Math.max(48, width + 2 * NODE_PAD.x + (bold ? 4 : 0))),
      height: Math.ceil(lines.length * LINE_HEIGHT + 2 * padY),
    };
    this.measured.set(key, size);
    return size;
  }
}

function maxSize(a: Size, b: Size): Size {
  return { width: Math.max(a.width, b.width), height: Math.max(a.height, b.height) };
}

/** The stepper draws its running node with a 5 px border over the node's edge: room for it on each side. */
const RUN_BORDER_ROOM = 10;

function runRoom(s: Size): Size {
  return { width: s.width + RUN_BORDER_ROOM, height: s.height + RUN_BORDER_ROOM / 2 };
}

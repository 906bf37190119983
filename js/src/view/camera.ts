// The camera: where the viewport looks. Each view has a subject (the lost leaves of a what-if, the first
// change of a diff, a finding, boxes opened from Python, the running node, else the loss); `frame` shows
// it at a readable zoom (the whole graph when that fits at 90% or more), `keep` holds it on screen through
// container resizes, `clamp` stops a pan from losing the graph, and `fitAll` (the toolbar's Fit) stops at
// a floor where boxes can still be told apart.
import type { Core, NodeCollection } from "cytoscape";
import { layoutBounds, type Bounds } from "./elements";
import type { Layout, Size } from "./layout";

/** Zoom at which node text (FONT_SIZE 11) reads at 11 px. */
export const READABLE_ZOOM = 1;
/** A graph that fits whole at this zoom or more is shown whole (text >= 8.8 px: an MLP that fit at 89%
 *  opened at 100% with its top cut off). */
export const WHOLE_ZOOM = 0.8;
/** Fit never zooms out further: below it boxes blur into lines and nothing can be clicked. */
export const FIT_FLOOR = 0.4;
/** Fit shows the whole graph down to this zoom (labels at 6.6 px); a graph that needs less is fitted to
 *  the selection's neighbourhood at this zoom instead, and a second Fit shows the whole graph, however
 *  small (the overview: at 40% labels were 4-5 px and the graph still not whole). */
export const FIT_READABLE = 0.6;
/** A fit never blows a tiny graph up past this. */
const MAX_FIT = 1.25;
const PAD = 24;
/** Share of the graph (or of the canvas, for a graph bigger than it) a pan must leave on screen. */
const KEEP_SHARE = 0.15;

/** What a view is about: element keys (most important first, drawn representatives), and whether the
 *  loss may be framed with them (only when both fit). */
export interface Subject {
  keys: string[];
  withLoss: boolean;
  /** Says what it is ("the lost leaves", "blocks.1"). */
  name: string;
  /** Used only when no other feature names a subject, and framed only together with the loss (folded
   *  stacks: the bulk of the model). */
  weak?: boolean;
}

/** What a frame or fit did, for the toolbar's zoom chip. */
export interface Framing {
  /** The whole graph is in view. */
  whole: boolean;
  /** The zoom at which the whole graph fits the canvas. */
  fitZoom: number;
  zoom: number;
  /** What the view leaves out ("" when whole). */
  outside: string;
}

type Mode = "frame" | "fit" | null;
type Drawn = { layout: Layout; sizes: ReadonlyMap<string, Size> } | null;

export class Camera {
  subject: Subject | null = null;
  /** How the viewport was last placed by the camera; null once the user (or a feature) moved it. */
  private mode: Mode = null;
  /** The last Fit showed the subject's neighbourhood, not the whole graph (the next Fit shows it whole). */
  private fitNear = false;
  private own = false;
  private bbox: Bounds | null = null;
  /** Called after every frame / fit / re-frame on resize (the zoom chip follows). */
  onFramed: ((f: Framing) => void) | null = null;

  constructor(
    private readonly cy: Core,
    private readonly drawn: () => Drawn,
    private readonly reserve: () => number,
  ) {
    cy.on("viewport", () => {
      if (this.own) return;
      this.mode = null;
      this.clamp();
    });
  }

  /** A new layout was drawn: the graph's bounds change. */
  laidOut(): void {
    const d = this.drawn();
    this.bbox = d ? layoutBounds(d.layout, d.sizes, () => true) : null;
  }

  /** The canvas minus the bottom reserve (the legend's corner). */
  private area(): { w: number; h: number } {
    return { w: this.cy.width(), h: Math.max(60, this.cy.height() - this.reserve()) };
  }

  private fitZoom(g: Bounds): number {
    const { w, h } = this.area();
    return Math.min(MAX_FIT, (w - 2 * PAD) / Math.max(1, g.w), (h - 2 * PAD) / Math.max(1, g.h));
  }

  /** Show `subject` at a readable zoom, with the loss when both fit; the whole graph when it fits at
   *  WHOLE_ZOOM or more. */
  frame(subject: Subject | null): Framing {
    this.subject = subject;
    const g = this.bbox;
    if (!g) return this.framing(1);
    const fit = this.fitZoom(g);
    if (fit >= WHOLE_ZOOM) this.look(fit, g, "centre");
    else {
      // A graph whose width fits at WHOLE_ZOOM or more is shown at that width (nothing cut at the sides:
      // an MLP stepper opened with its left column off the canvas), the subject framed up and down.
      const across = (this.area().w - 2 * PAD) / Math.max(1, g.w);
      const z = across >= WHOLE_ZOOM ? Math.min(READABLE_ZOOM, across) : READABLE_ZOOM;
      const [box, how] = this.subjectBox(subject, z) ?? [g, "top" as const];
      this.look(z, box, how);
    }
    this.mode = "frame";
    return this.framing(fit);
  }

  /** The toolbar's Fit: the whole graph when its labels still read there (FIT_READABLE), else `subject`'s
   *  neighbourhood (the selection, what the view is about) at that zoom, the subject in view; Fit again on
   *  that view shows the whole graph at whatever zoom it needs (the overview); `whole`: that at once (the
   *  zoom chip's "N% fits"). */
  fitAll(subject: Subject | null = this.subject, whole = false): Framing {
    this.subject = subject;
    const again = this.mode === "fit" && this.fitNear;
    return this.placeFit(whole || again);
  }

  /** `whole`: the whole graph at its fit zoom; else the whole graph if it reads, the neighbourhood if not. */
  private placeFit(whole: boolean): Framing {
    const g = this.bbox;
    if (!g) return this.framing(1);
    const fit = this.fitZoom(g);
    this.fitNear = !whole && fit < FIT_READABLE;
    if (!this.fitNear) this.look(Math.max(fit, this.cy.minZoom()), g, "centre");
    else {
      const [box] = this.subjectBox(this.subject, FIT_READABLE) ?? [g];
      this.look(FIT_READABLE, box, "centre");
    }
    this.mode = "fit";
    return this.framing(fit);
  }

  /** The canvas was `before` in size and has been resized: a view the camera placed is placed again for
   *  the new size; one the user moved keeps its centre and its zoom, and a subject that was in view
   *  stays in view. */
  keep(before: { w: number; h: number }): Framing | null {
    if (!this.bbox || this.cy.elements().empty()) return null;
    if (this.mode === "frame") return this.frame(this.subject);
    if (this.mode === "fit") return this.placeFit(!this.fitNear);
    const dw = this.cy.width() - before.w;
    const dh = this.cy.height() - before.h;
    if (before.w <= 0 || before.h <= 0 || (!dw && !dh)) return null;
    const boxes = this.subjectElements(this.subject).map((e) => e.renderedBoundingBox({ includeLabels: false, includeOverlays: false }));
    const wasIn = boxes.filter((b) => b.x2 > 0 && b.x1 < before.w && b.y2 > 0 && b.y1 < before.h);
    // Sideways the view stays centred; a cell grows and shrinks at its bottom, so what is on screen
    // keeps its height (a box opened by a click stays under the pointer while the cell grows).
    this.move(() => this.cy.panBy({ x: dw / 2, y: 0 }));
    const first = wasIn[0];
    if (first) {
      // The first subject element that was on screen is brought back in, with the least move.
      const w = this.cy.width();
      const h = this.cy.height();
      const x = Math.min(0, w - PAD - (first.x2 + dw / 2)) + Math.max(0, PAD - (first.x1 + dw / 2));
      const y = Math.min(0, h - PAD - first.y2) + Math.max(0, PAD - first.y1);
      if (x || y) this.move(() => this.cy.panBy({ x, y }));
    }
    this.clamp();
    return null;
  }

  /** The view was laid out again without a fit (a new font, a recording's label lines): a view the
   *  camera placed is placed again; one the user moved is only clamped. */
  relaid(): void {
    if (this.mode === "frame") this.frame(this.subject);
    else if (this.mode === "fit") this.placeFit(!this.fitNear);
    else this.clamp();
  }

  /** Pan, without zooming, so the element `key` is whole in the free part of the canvas (its box, its
   *  label and its highlight at least `margin` px from each edge, above the bottom reserve: the legend's
   *  corner). An element already there stays put; one that is not moves in by the least pan that leaves
   *  it a quarter of the room (up to 120 px) of context on the side it came from, so its neighbours come
   *  into view with it; one bigger than the room shows its top left. Returns whether it moved. */
  reveal(key: string, margin = PAD): boolean {
    const e = this.cy.getElementById(key);
    if (e.empty() || !e.isNode()) return false;
    const b = e.renderedBoundingBox({ includeLabels: true, includeOverlays: true, includeUnderlays: true } as Parameters<typeof e.renderedBoundingBox>[0]);
    const { w, h } = this.area();
    const inside = (lo: number, hi: number, size: number): boolean => lo >= margin && hi <= size - margin;
    if (inside(b.x1, b.x2, w) && inside(b.y1, b.y2, h)) return false;
    const shift = (lo: number, hi: number, size: number): number => {
      const room = size - 2 * margin;
      if (hi - lo > room) return margin - lo;
      const context = Math.min(120, Math.max(0, (room - (hi - lo)) / 2), room / 4);
      if (lo < margin) return margin + context - lo;
      if (hi > size - margin) return size - margin - context - hi;
      return 0;
    };
    const x = shift(b.x1, b.x2, w);
    const y = shift(b.y1, b.y2, h);
    this.move(() => this.cy.panBy({ x, y }));
    this.mode = null; // a pan to follow the running node: a resize keeps it as a moved view (see keep)
    return true;
  }

  /** Pan back so that at least KEEP_SHARE of the graph (of the canvas, for a graph bigger than it)
   *  stays on screen on each axis. */
  clamp(): void {
    const g = this.bbox;
    if (!g) return;
    const z = this.cy.zoom();
    const pan = this.cy.pan();
    const fix = (lo: number, hi: number, size: number): number => {
      const need = KEEP_SHARE * Math.min(hi - lo, size);
      if (hi < need) return need - hi;
      if (lo > size - need) return size - need - lo;
      return 0;
    };
    const x = fix(g.x1 * z + pan.x, g.x2 * z + pan.x, this.cy.width());
    const y = fix(g.y1 * z + pan.y, g.y2 * z + pan.y, this.cy.height());
    if (x || y) this.move(() => this.cy.panBy({ x, y }));
  }

  /** The subject's drawn elements. */
  private subjectElements(subject: Subject | null): NodeCollection[] {
    const out: NodeCollection[] = [];
    for (const key of subject?.keys ?? []) {
      const e = this.cy.getElementById(key);
      if (e.nonempty() && e.isNode()) out.push(e);
    }
    return out;
  }

  /** The model box to show at zoom `z` and how to place it: the subject's elements nearest its first
   *  that fit together, with the loss when it fits too; the loss alone (at the bottom, what feeds it
   *  above) when there is no subject. Null: neither (the top rows then). */
  private subjectBox(subject: Subject | null, z: number): [Bounds, "centre" | "top" | "bottom"] | null {
    const { w, h } = this.area();
    const room = { w: (w - 2 * PAD) / z, h: (h - 2 * PAD) / z };
    const fits = (b: Bounds): boolean => b.w <= room.w && b.h <= room.h;
    const loss = this.cy.nodes('[kind = "root"]');
    const lossBox = loss.nonempty() ? bounds(loss.first()) : null;
    const eles = this.subjectElements(subject);
    if (!eles.length) return lossBox ? [lossBox, "bottom"] : null;
    const boxes = eles.map(bounds);
    const c = centre(boxes[0]);
    const near = boxes.slice(1).sort((a, b) => dist(centre(a), c) - dist(centre(b), c));
    let box = boxes[0];
    if (!fits(box)) return subject?.weak && lossBox ? [lossBox, "bottom"] : [box, "top"];
    for (const b of near) {
      const u = union(box, b);
      if (fits(u)) box = u;
    }
    if (subject?.withLoss && lossBox && fits(union(box, lossBox))) box = union(box, lossBox);
    // A weak subject (folded stacks) never pushes the loss out of the first view.
    else if (subject?.weak && lossBox) return [lossBox, "bottom"];
    return [box, "centre"];
  }

  /** Zoom `z`, `box` centred (too tall: its top at the top; "bottom": its bottom at the bottom). */
  private look(z: number, box: Bounds, how: "centre" | "top" | "bottom"): void {
    const { w, h } = this.area();
    const g = this.bbox;
    // The whole graph's width fits: centre the graph across (the box is in it), cutting nothing at the sides.
    const across = g && g.w * z <= w - 2 * PAD ? g : box;
    const x = across.w * z <= w - 2 * PAD ? w / 2 - (z * (across.x1 + across.x2)) / 2 : PAD - z * across.x1;
    const tall = box.h * z > h - 2 * PAD;
    let y = h / 2 - (z * (box.y1 + box.y2)) / 2;
    if (how === "bottom") y = h - PAD - z * box.y2;
    else if (how === "top" || tall) y = PAD - z * box.y1;
    y += this.fill(y, z, box, h);
    this.move(() => this.cy.viewport({ zoom: z, pan: { x, y } }));
    this.clamp();
  }

  /** How far to slide the view down (+) or up (-) so that no band of canvas stays empty while the graph
   *  is cut off at the other edge, as far as `box` stays in view (a finding framed with the loss left
   *  270 px blank under the loss while the graph above it was cut). */
  private fill(y: number, z: number, box: Bounds, h: number): number {
    const g = this.bbox;
    if (!g) return 0;
    const top = y + z * g.y1;
    const bottom = y + z * g.y2;
    if (top < PAD && bottom < h - PAD) return Math.max(0, Math.min(PAD - top, h - PAD - bottom, h - PAD - (y + z * box.y2)));
    if (bottom > h - PAD && top > PAD) return -Math.max(0, Math.min(top - PAD, bottom - (h - PAD), y + z * box.y1 - PAD));
    return 0;
  }

  private move(f: () => void): void {
    this.own = true;
    try {
      f();
    } finally {
      this.own = false;
    }
  }

  /** The zoom chip's facts for the viewport now. */
  private framing(fitZoom: number): Framing {
    const zoom = this.cy.zoom();
    const { outside, total } = this.countOutside();
    const framing = {
      whole: outside === 0,
      fitZoom,
      zoom,
      outside: outside ? `${outside} of ${total} nodes and boxes are outside the view (scroll to move, or close boxes)` : "",
    };
    this.onFramed?.(framing);
    return framing;
  }

  /** Drawn items (open boxes aside) wholly outside the viewport, from the layout (no label measuring). */
  private countOutside(): { outside: number; total: number } {
    const d = this.drawn();
    if (!d) return { outside: 0, total: 0 };
    const ext = this.cy.extent();
    let outside = 0;
    let total = 0;
    for (const [key, p] of d.layout.positions) {
      if (d.layout.boxes.has(key)) continue;
      const s = d.sizes.get(key);
      if (!s) continue;
      total++;
      const out = p.x + s.width / 2 < ext.x1 || p.x - s.width / 2 > ext.x2 || p.y + s.height / 2 < ext.y1 || p.y - s.height / 2 > ext.y2;
      if (out) outside++;
    }
    return { outside, total };
  }
}

function bounds(e: NodeCollection): Bounds {
  const b = e.boundingBox({ includeLabels: e.data("kind") === "expanded", includeOverlays: false });
  return { x1: b.x1, y1: b.y1, x2: b.x2, y2: b.y2, w: b.x2 - b.x1, h: b.y2 - b.y1 };
}

function union(a: Bounds, b: Bounds): Bounds {
  const x1 = Math.min(a.x1, b.x1);
  const y1 = Math.min(a.y1, b.y1);
  const x2 = Math.max(a.x2, b.x2);
  const y2 = Math.max(a.y2, b.y2);
  return { x1, y1, x2, y2, w: x2 - x1, h: y2 - y1 };
}

const centre = (b: Bounds): { x: number; y: number } => ({ x: (b.x1 + b.x2) / 2, y: (b.y1 + b.y2) / 2 });
const dist = (a: { x: number; y: number }, b: { x: number; y: number }): number => Math.hypot(a.x - b.x, a.y - b.y);

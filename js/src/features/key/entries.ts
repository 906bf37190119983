// What the canvas's basic encoding means: one entry per kind of thing drawn, with the swatch drawn in
// the theme's real colours (the same values `view/style.ts` gives Cytoscape; the page test compares
// the two, so a change there that forgets the key fails). Pure: no DOM.
import type { Theme } from "../../view/theme";

/** How to draw one swatch: a node-like box, or an edge (a line with an arrow head). */
export interface Swatch {
  shape: "box" | "edge";
  fill: string;
  stroke: string;
  strokeWidth: number;
  round: boolean;
  dashed: boolean;
  /** Folded stack: a double border and a faint outline a few pixels out. */
  double: boolean;
  /** Edges: text drawn on the line ("×2"). */
  label: string;
  labelColor: string;
}

export interface KeyEntry {
  /** The element kind it explains (`data('kind')` on the canvas), or "edge" / "edge-many". */
  kind: string;
  text: string;
  swatch: Swatch;
}

const box = (fill: string, stroke: string, strokeWidth: number, more: Partial<Swatch> = {}): Swatch => ({
  shape: "box", fill, stroke, strokeWidth, round: true, dashed: false, double: false, label: "", labelColor: "", ...more,
});

export function keyEntries(t: Theme): KeyEntry[] {
  const edge = (width: number, label: string): Swatch => ({
    shape: "edge", fill: "none", stroke: t.edge, strokeWidth: width, round: false, dashed: false, double: false, label, labelColor: t.textMuted,
  });
  return [
    { kind: "leaf", text: "leaf: a parameter or input; backward writes its .grad", swatch: box(t.leafFill, t.brand, 1.2) },
    { kind: "op", text: "op: the backward (grad_fn) of one forward operation", swatch: box(t.panelAlt, t.border, 1, { round: false }) },
    { kind: "root", text: "root, bold: the loss; backward starts here", swatch: box(t.panel, t.text, 3) },
    { kind: "collapsed", text: "dashed box: a closed module call (click to open)", swatch: box(t.boxFill, t.brand, 1.5, { dashed: true }) },
    { kind: "expanded", text: "open module call, its ops inside", swatch: box(t.expandedFill, t.brand, 1) },
    { kind: "folded", text: "double border: repeated calls folded into one stack (click to unfold)", swatch: box(t.boxFill, t.brand, 4, { double: true }) },
    { kind: "ghost", text: "ghost, dashed grey: detached or frozen in the forward pass; no gradient flows through it", swatch: box(t.background, t.ghost, 1.2, { dashed: true }) },
    { kind: "edge", text: "a tensor, drawn forward; gradients flow back against the arrow", swatch: edge(1.2, "") },
    { kind: "edge-many", text: "×2, thicker: several tensors between the same two", swatch: edge(2, "×2") },
  ];
}

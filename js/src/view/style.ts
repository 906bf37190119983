// Cytoscape stylesheet. Element data carries `kind` (op, leaf, root, collapsed, expanded, folded),
// `label`, `w`/`h` (measured label box) and, for edges, `count` (underlying tensor edges).
import type { StylesheetJson } from "cytoscape";
import { contrast, readable, type Theme } from "./theme";

export const FONT_SIZE = 11;
export const LINE_HEIGHT = 14;
export const NODE_PAD = { x: 10, y: 7 };

/** Sequential palette (ColorBrewer YlOrRd, 9 classes): small values pale yellow, large dark red. */
export const HEAT = ["#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026"];
/** Text colour readable on each palette colour. */
export const HEAT_TEXT = HEAT.map((c) => (contrast("#1a1a1a", c) >= contrast("#ffffff", c) ? "#1a1a1a" : "#ffffff"));
/** Fill for an exact zero (off a log scale). */
export const HEAT_ZERO = "#d9d9d9";
/** Marks and stepper highlights. */
export const MARK = { nan: "#d500f9", flag: "#ff8f00", run: "#1565c0", flow: "#1e88e5" };

function heatRules(t: Theme): StylesheetJson {
  const rules: StylesheetJson = HEAT.map((c, i) => ({
    selector: `node.heat-${i}`,
    style: { "background-color": c, color: HEAT_TEXT[i], "background-opacity": 1 },
  }));
  rules.push({ selector: "node.heat-zero", style: { "background-color": HEAT_ZERO, color: "#1a1a1a", "background-opacity": 1 } });
  // Expanded boxes are containers: a coloured outline, not a fill.
  HEAT.forEach((c, i) => rules.push({ selector: `node.heat-${i}[kind = "expanded"]`, style: { "background-color": t.expandedFill, color: t.brand, "border-color": c, "border-width": 3, "border-opacity": 1 } }));
  rules.push({ selector: 'node.heat-zero[kind = "expanded"]', style: { "background-color": t.expandedFill, color: t.brand } });
  return rules;
}

/** Nodes and boxes by kind, the selection and the pressed state. */
function nodeRules(t: Theme): StylesheetJson {
  return [
    {
      selector: "node",
      style: {
        label: "data(label)",
        "font-family": t.fontFamily,
        "font-size": FONT_SIZE,
        color: t.text,
        "text-wrap": "wrap",
        "text-valign": "center", // "text-halign" is Cytoscape's default "center": each property set costs per element
        "line-height": LINE_HEIGHT / FONT_SIZE,
        width: "data(w)",
        height: "data(h)",
        shape: "rectangle",
        "background-color": t.panel,
        "border-width": 1,
        "border-color": t.border,
        "min-zoomed-font-size": 5,
        // Manual stacking: open boxes (z = depth) under edges (50) under nodes (100).
        "z-index-compare": "manual",
        "z-index": 100,
      },
    },
    { selector: 'node[kind = "op"]', style: { "background-color": t.panelAlt } },
    {
      selector: 'node[kind = "leaf"]',
      style: { shape: "round-rectangle", "background-color": t.leafFill, "border-color": t.brand, "border-width": 1.2 },
    },
    {
      selector: 'node[kind = "root"]',
      style: { shape: "round-rectangle", "background-color": t.panel, "border-color": t.text, "border-width": 3, "font-weight": "bold" },
    },
    {
      selector: 'node[kind = "collapsed"]',
      style: {
        shape: "round-rectangle",
        "background-color": t.boxFill,
        "border-color": t.brand,
        "border-width": 1.5,
        "border-style": "dashed",
        "font-weight": "bold",
      },
    },
    {
      // A folded stack of repeated calls ("48 × Block"): a double border plus an outline a few pixels
      // out reads as several boxes stacked; solid (not dashed) so it does not look like one closed box.
      selector: 'node[kind = "folded"]',
      style: {
        shape: "round-rectangle",
        "background-color": t.boxFill,
        "border-color": t.brand,
        "border-width": 4,
        "border-style": "double",
        "outline-width": 1.5,
        "outline-color": t.brand,
        "outline-offset": 3,
        "outline-opacity": 0.55,
        "font-weight": "bold",
      } as Record<string, unknown>,
    },
    {
      selector: 'node[kind = "expanded"]',
      style: {
        shape: "round-rectangle",
        "background-color": t.expandedFill,
        "background-opacity": 1,
        "border-color": t.brand,
        "border-width": 1,
        "border-opacity": 0.6,
        "text-valign": "top",
        "text-halign": "center",
        "text-margin-y": -4,
        "font-weight": "bold",
        color: t.brand,
        "text-events": "yes",
        "min-zoomed-font-size": 4,
        // Open boxes are plain nodes behind their members: outer boxes lowest.
        "z-index": "data(z)",
      },
    },
    {
      selector: "node:selected",
      style: { "border-color": t.brand, "border-width": 3, "border-style": "solid", "overlay-opacity": 0 },
    },
    { selector: "node:active", style: { "overlay-opacity": 0.08, "overlay-color": t.brand } },
  ];
}

/** Edges: width by tensor count, ELK's routes, the selection's edges. */
function edgeRules(t: Theme): StylesheetJson {
  return [
    {
      selector: "edge",
      style: {
        width: 1.2,
        "line-color": t.edge,
        "target-arrow-color": t.edge,
        "target-arrow-shape": "triangle",
        "arrow-scale": 0.8,
        "curve-style": "straight",
        // Edges take no clicks: a click on an edge drawn across a box's header goes to the box.
        events: "no",
        "z-index-compare": "manual",
        "z-index": 50,
      },
    },
    // Thicker for more tensors: plain values per range, not a per-element mapping (mapped properties
    // are re-applied, with Cytoscape's cache invalidation, whenever an element is restyled).
    { selector: "edge[count > 1]", style: { label: "data(countLabel)", width: 2 } },
    // Label text only on the edges that draw one (a tensor count, the stepper's flow label, a what-if
    // cut): Cytoscape pays per property and element when it styles an element (Expand all on GPT-2
    // 124M styles ~600 edges), and most edges draw no text.
    {
      selector: "edge[count > 1], edge[?flowLabel], edge.wi-cut",
      style: {
        "font-family": t.fontFamily,
        "font-size": 9,
        color: t.textMuted,
        "text-background-color": t.background,
        "text-background-opacity": 0.85,
        "text-background-padding": "1px",
        "min-zoomed-font-size": 7,
      },
    },
    { selector: "edge[count > 3]", style: { width: 3 } },
    { selector: "edge[count > 7]", style: { width: 4.5 } },
    {
      // Follow ELK's orthogonal routes instead of cutting straight through other nodes.
      selector: "edge.routed",
      style: {
        "curve-style": "round-segments",
        "segment-weights": "data(ws)",
        "segment-distances": "data(ds)",
        "segment-radii": 6,
        "edge-distances": "endpoints",
        "source-endpoint": "data(sep)",
        "target-endpoint": "data(tep)",
      } as Record<string, unknown>,
    },
    {
      selector: "edge.pinned",
      style: { "source-endpoint": "data(sep)", "target-endpoint": "data(tep)" } as Record<string, unknown>,
    },
    { selector: "edge.hl", style: { "line-color": t.brand, "target-arrow-color": t.brand } },
  ];
}

/** Ghost tensors: forward-only detached / frozen tensors, greyed, take no clicks. */
function ghostRules(t: Theme): StylesheetJson {
  return [
    {
      selector: 'node[kind = "ghost"]',
      style: {
        shape: "round-rectangle",
        "background-color": t.background,
        "border-color": t.ghost,
        "border-style": "dashed",
        "border-width": 1.2,
        color: readable(t.ghost, t.background), // the border fades; the name must still read
        "font-style": "italic",
        // Hover shows the stub's whole source (a click does nothing: clicks.ts).
        events: "yes",
      },
    },
    {
      selector: "edge.ghost",
      style: { "line-style": "dashed", "line-dash-pattern": [4, 3], "line-color": t.ghost, "target-arrow-color": t.ghost, width: 1, events: "no" },
    },
  ];
}

/** The core's rules, then `featureRules` (see `features/index.ts`), then the selection on top. */
export function stylesheet(t: Theme, featureRules: StylesheetJson = []): StylesheetJson {
  return [
    ...nodeRules(t),
    ...edgeRules(t),
    ...ghostRules(t),
    // --- Heat colours (one "heat-<bin>" class per element: the overlay's values, the stepper's gradients). ---
    ...heatRules(t),
    // Edges take clicks while a feature asks for them (what-if); Cytoscape adds a hit margin around the line.
    { selector: "edge.tap-edge", style: { events: "yes" } },
    // --- The features' rules: the first feature in the list comes last, so it wins. ---
    ...featureRules,
    { selector: "node:selected", style: { "border-color": t.brand, "border-width": 3, "border-style": "solid" } },
    // A selected NaN/Inf node keeps the legend's magenta; the selection shows as a halo instead.
    { selector: "node.ov-nan:selected", style: { "border-color": MARK.nan, "underlay-color": t.brand, "underlay-opacity": 0.35, "underlay-padding": 5 } },
    // The big view's open boxes: the overview layer under Cytoscape draws their fill, so members not yet
    // mounted show through (view/bigview/).
    { selector: `node.${BIG_OPEN}`, style: { "background-opacity": 0 } },
  ];
}

/** Class of an open box the big view mounted (its fill is the overview's). */
export const BIG_OPEN = "big-open";

// Cytoscape stylesheet. Element data carries `kind` (op, leaf, root, collapsed, expanded, folded),
// `label`, `w`/`h` (measured label box) and, for edges, `count` (underlying tensor edges).
import type { StylesheetJson } from "cytoscape";
import type { Theme } from "./theme";

export const FONT_SIZE = 11;
export const LINE_HEIGHT = 14;
export const NODE_PAD = { x: 10, y: 7 };

/** Sequential palette (ColorBrewer YlOrRd, 9 classes): small values pale yellow, large dark red. */
export const HEAT = ["#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026"];
/** Text colour readable on each palette colour. */
export const HEAT_TEXT = HEAT.map((_, i) => (i < 5 ? "#1a1a1a" : "#ffffff"));
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

export function stylesheet(t: Theme): StylesheetJson {
  return [
    {
      selector: "node",
      style: {
        label: "data(label)",
        "font-family": t.fontFamily,
        "font-size": FONT_SIZE,
        color: t.text,
        "text-wrap": "wrap",
        "text-valign": "center",
        "text-halign": "center",
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
    {
      selector: "edge",
      style: {
        width: 1.2,
        "line-color": t.edge,
        "target-arrow-color": t.edge,
        "target-arrow-shape": "triangle",
        "arrow-scale": 0.8,
        "curve-style": "straight",
        "font-family": t.fontFamily,
        "font-size": 9,
        color: t.textMuted,
        "text-background-color": t.background,
        "text-background-opacity": 0.85,
        "text-background-padding": "1px",
        "min-zoomed-font-size": 7,
        // Edges take no clicks: a click on an edge drawn across a box's header goes to the box.
        events: "no",
        "z-index-compare": "manual",
        "z-index": 50,
      },
    },
    // Thicker for more tensors: plain values per range, not a per-element mapping (mapped properties
    // are re-applied, with Cytoscape's cache invalidation, whenever an element is restyled).
    { selector: "edge[count > 1]", style: { label: "data(countLabel)", width: 2 } },
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
    // --- Ghost tensors: forward-only detached / frozen tensors, greyed, take no clicks. ---
    {
      selector: 'node[kind = "ghost"]',
      style: {
        shape: "round-rectangle",
        "background-color": t.background,
        "border-color": t.ghost,
        "border-style": "dashed",
        "border-width": 1.2,
        color: t.ghost,
        "font-style": "italic",
        events: "no",
      },
    },
    {
      selector: "edge.ghost",
      style: { "line-style": "dashed", "line-dash-pattern": [4, 3], "line-color": t.ghost, "target-arrow-color": t.ghost, width: 1, events: "no" },
    },
    // --- Overlay and stepper colours (one "heat-<bin>" class per element), and overlay marks. ---
    ...heatRules(t),
    { selector: "node.ov-no-grad", style: { "border-color": t.danger, "border-style": "dashed", "border-width": 3 } },
    { selector: "node.ov-nan", style: { "border-color": MARK.nan, "border-style": "solid", "border-width": 3.5 } },
    { selector: "node.ov-flag", style: { "border-color": MARK.flag, "border-style": "solid", "border-width": 3 } },
    // --- Diff view (before / after): added green, removed red and dashed, changed amber; leaves that
    // gained / lost a gradient path get a thick outline; boxes with changes inside an amber outline. ---
    { selector: "node.df-added", style: { "background-color": t.addedFill, "border-color": t.added, "border-width": 2.5, "border-style": "solid" } },
    {
      selector: "node.df-removed",
      style: { "background-color": t.removedFill, "border-color": t.removed, "border-width": 2.5, "border-style": "dashed", color: t.removed, "font-style": "italic" },
    },
    { selector: "node.df-changed", style: { "background-color": t.changedFill, "border-color": t.changed, "border-width": 2.5, "border-style": "solid" } },
    { selector: 'node.df-added[kind = "expanded"]', style: { "background-color": t.expandedFill, "border-opacity": 1, color: t.added } },
    { selector: 'node.df-removed[kind = "expanded"]', style: { "background-color": t.expandedFill, "border-opacity": 1 } },
    { selector: "node.df-box", style: { "border-color": t.changed, "border-width": 2.5, "border-opacity": 1, "border-style": "solid", color: t.changed } },
    { selector: "node.df-gained", style: { "border-color": t.added, "border-width": 5, "border-style": "double" } },
    { selector: "node.df-lost", style: { "border-color": t.removed, "border-width": 5, "border-style": "double", color: t.removed } },
    // --- What-if. Order matters: later rules win. ---
    // In what-if mode tensors (edges) take clicks; Cytoscape adds a hit margin around the line.
    { selector: "edge.wi-tap", style: { events: "yes" } },
    { selector: ".wi-pruned", style: { opacity: 0.3 } },
    {
      selector: "node.wi-lost",
      style: { "background-color": t.dangerFill, "border-color": t.danger, "border-width": 3.5, "border-style": "solid", opacity: 1 },
    },
    {
      selector: "node.wi-frozen",
      style: { "background-color": t.frozenFill, "border-color": t.frozen, "border-style": "dashed", "border-width": 2.5 },
    },
    { selector: "node.wi-frozen.wi-lost", style: { "border-color": t.danger, "border-width": 3.5 } },
    {
      selector: 'node.wi-detached[kind = "op"]',
      style: { "border-color": t.danger, "border-width": 2.5, "border-style": "dashed", opacity: 1, color: t.danger },
    },
    {
      selector: 'node.wi-haslost[kind = "collapsed"], node.wi-haslost[kind = "folded"]',
      style: { "border-color": t.danger, "border-width": 3, "border-style": "solid", color: t.danger, opacity: 1 },
    },
    { selector: 'node.wi-haslost[kind = "expanded"]', style: { "border-color": t.danger, "border-width": 2, "border-opacity": 1, color: t.danger } },
    {
      selector: "edge.wi-partcut",
      style: { "line-color": t.danger, "target-arrow-color": t.danger, "line-style": "dashed", "line-dash-pattern": [2, 4] },
    },
    {
      selector: "edge.wi-cut",
      style: {
        "line-color": t.danger,
        "target-arrow-color": t.danger,
        "target-arrow-shape": "tee",
        "line-style": "dashed",
        "line-dash-pattern": [6, 4],
        width: 2.5,
        label: "data(cutLabel)",
        color: t.danger,
        "font-size": 13,
        "font-weight": "bold",
        "text-background-opacity": 1,
        "min-zoomed-font-size": 4,
        opacity: 1,
      },
    },
    { selector: "node:selected", style: { "border-color": t.brand, "border-width": 3, "border-style": "solid" } },
    // --- Backward stepper: the running node, the boxes around it, the edges carrying gradient now
    // (the arrow turned round: gradient flows from the consumer back to the producer). ---
    { selector: "node.st-bad", style: { "background-color": MARK.nan, color: "#ffffff", "border-color": MARK.nan, "border-width": 3 } },
    {
      selector: "node.st-run",
      style: {
        "border-color": MARK.run,
        "border-width": 5,
        "border-style": "solid",
        "border-opacity": 1,
        "underlay-color": MARK.run,
        "underlay-padding": 7,
        "underlay-opacity": 0.28,
        "font-weight": "bold",
      } as Record<string, unknown>,
    },
    { selector: "node.st-runbox", style: { "border-color": MARK.run, "border-width": 3, "border-opacity": 1, "border-style": "solid", color: MARK.run } },
    {
      selector: "edge.st-flow",
      style: {
        "line-color": MARK.flow,
        "source-arrow-color": MARK.flow,
        "source-arrow-shape": "triangle",
        "target-arrow-shape": "none",
        "arrow-scale": 1.3,
        width: 4,
        "line-style": "solid",
        label: "data(flowLabel)",
        color: MARK.run,
        "font-size": 12,
        "font-weight": "bold",
        "text-background-opacity": 1,
        "text-background-padding": "2px",
        "min-zoomed-font-size": 4,
        "z-index": 60,
      },
    },
  ];
}

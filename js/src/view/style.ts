// Cytoscape stylesheet. Element data carries `kind` (op, leaf, root, collapsed, expanded),
// `label`, `w`/`h` (measured label box) and, for edges, `count` (underlying tensor edges).
import type { StylesheetJson } from "cytoscape";
import type { Theme } from "./theme";

export const FONT_SIZE = 11;
export const LINE_HEIGHT = 14;
export const NODE_PAD = { x: 10, y: 7 };

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
      selector: 'node[kind = "expanded"]',
      style: {
        shape: "round-rectangle",
        "background-color": t.expandedFill,
        "background-opacity": 1,
        "border-color": t.brand,
        "border-width": 1,
        "border-opacity": 0.6,
        padding: "12px",
        "text-valign": "top",
        "text-halign": "center",
        "text-margin-y": -4,
        "font-weight": "bold",
        color: t.brand,
        "text-events": "yes",
        "min-zoomed-font-size": 4,
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
        width: "mapData(count, 1, 8, 1.2, 4.5)",
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
      },
    },
    { selector: "edge[count > 1]", style: { label: "data(countLabel)" } },
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

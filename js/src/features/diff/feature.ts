// The diff view (the `diff` trait: status per node of the merged before/after graph): added green,
// removed red and dashed, changed amber, leaves that gained / lost a gradient path outlined, boxes
// with changes inside badged; a summary under the toolbar, rows in the details panel, a legend.
import type { StylesheetJson } from "cytoscape";
import type { GraphDiff } from "../../payload";
import { withUnit } from "../../state/numbers";
import { readable, tint, type Theme } from "../../view/theme";
import type { Core, FeatureFactory } from "../../core/context";
import type { Feature, LegendSpec } from "../../core/feature";
import { repaint } from "../../core/paint";
import { showSelection } from "../../core/selection";
import css from "./diff.css";
import { createDiffPanel } from "./panel";
import { RANK } from "../../panels/status";
import { badgeText, diffDecorations, diffText, normalizeDiff, type DiffDecorations } from "./state";

export interface DiffHooks {
  /** Diff view: an element's status ("n:<id>") or its box badge ("c:<call id>"), and tooltip text. */
  diffOf(key: string): { status: string | null; badge: string; text: string };
}

/** The diff's colours on this theme: a border and a fill per status (the legend draws the same). */
export function diffPalette(t: Theme): { added: string; addedFill: string; removed: string; removedFill: string; changed: string; changedFill: string } {
  return {
    added: t.dark ? "#66bb6a" : "#2e7d32",
    addedFill: tint(t, [67, 160, 71], t.dark ? 0.35 : 0.22),
    removed: t.danger,
    removedFill: tint(t, t.danger, t.dark ? 0.3 : 0.14),
    changed: t.dark ? "#ffb74d" : "#e65100",
    changedFill: tint(t, [255, 179, 0], t.dark ? 0.35 : 0.28),
  };
}

export const diff: FeatureFactory<DiffHooks> = (core: Core): Feature<DiffHooks> => {
  let current: GraphDiff | null = null;
  let deco: DiffDecorations | null = null;
  const panel = createDiffPanel();
  core.toolbar.status.add(panel.element, RANK.headline); // the headline shares the status line

  /** The one-line summary (hidden without a diff). */
  function read(): void {
    current = normalizeDiff(core.model.get("diff"));
    if (!current) {
      panel.show("", null);
      return;
    }
    const counts = { added: 0, removed: 0, changed: 0 };
    for (const st of Object.values(current.status)) if (st !== "same") counts[st]++;
    panel.show(`Diff: ${counts.added} added · ${counts.removed} removed · ${counts.changed} changed`, current.summary);
  }

  function legendSpec(d: GraphDiff, p: ReturnType<typeof diffPalette>): LegendSpec {
    const items = [
      { kind: "added", text: "added (only after)", border: p.added, fill: p.addedFill },
      { kind: "removed", text: "removed (only before)", border: p.removed, fill: p.removedFill },
      { kind: "changed", text: "changed", border: p.changed, fill: p.changedFill },
      { kind: "neutral", text: "the same" },
    ];
    if (d.gained.length) items.push({ kind: "gained", text: "leaf gains a gradient path", border: p.added, fill: "" });
    if (d.lost.length) items.push({ kind: "lost", text: "leaf loses its gradient path", border: p.removed, fill: "" });
    items.push({ kind: "box", text: "box with changes inside (Δ)", border: p.changed, fill: "" });
    return { title: "diff: before → after", scaleText: "", min: "", max: "", ramp: false, items };
  }

  let palette: ReturnType<typeof diffPalette> | null = null;
  return {
    name: "diff",
    css,
    styles(t) {
      palette = diffPalette(t);
      return diffStyles(t, palette);
    },
    traits: {
      diff() {
        read();
        repaint(core);
        showSelection(core);
      },
    },
    loaded: read,
    decorate(shown) {
      deco = current ? diffDecorations(core.payload, shown, current, core.index) : null;
      return deco ? { classes: deco.classes, labels: deco.labels } : null;
    },
    legend: () => (current && palette ? { spec: legendSpec(current, palette) } : null),
    /** The changes, added first (what the headline counts first), each kind in the merged graph's
     *  order: the camera frames the first and those near it. */
    subject() {
      const d = current;
      if (!d) return null;
      const of = (st: string): string[] => core.payload.nodes.filter((n) => d.status[n.id] === st).map((n) => "n:" + n.id);
      const keys = [...of("added"), ...of("removed"), ...of("changed")];
      return keys.length ? { keys, withLoss: true, name: "the first change" } : null;
    },
    tooltip: (key) => (current && deco ? diffText(current, deco, key) : ""),
    details(node) {
      const st = current?.status[node.id];
      if (!current || !st) return [];
      const rows: [string, string][] = [["diff", st]];
      if (current.why[node.id]) rows.push(["why", current.why[node.id]]);
      const mem = current.memory[node.id];
      if (mem) rows.push(["saved for backward", `${withUnit(mem[0], "B")} → ${withUnit(mem[1], "B")}`]);
      return rows;
    },
    hooks: {
      diffOf(key) {
        const status = key.startsWith("n:") ? (deco?.status.get(key) ?? null) : null;
        const box = deco?.boxes.get(key);
        return { status, badge: box ? badgeText(box) : "", text: current && deco ? diffText(current, deco, key) : "" };
      },
    },
  };
};

function diffStyles(t: Theme, p: ReturnType<typeof diffPalette>): StylesheetJson {
  return [
    { selector: "node.df-added", style: { "background-color": p.addedFill, "border-color": p.added, "border-width": 2.5, "border-style": "solid" } },
    {
      selector: "node.df-removed",
      style: { "background-color": p.removedFill, "border-color": p.removed, "border-width": 2.5, "border-style": "dashed", color: readable(p.removed, p.removedFill), "font-style": "italic" },
    },
    { selector: "node.df-changed", style: { "background-color": p.changedFill, "border-color": p.changed, "border-width": 2.5, "border-style": "solid" } },
    { selector: 'node.df-added[kind = "expanded"]', style: { "background-color": t.expandedFill, "border-opacity": 1, color: readable(p.added, t.background) } },
    { selector: 'node.df-removed[kind = "expanded"]', style: { "background-color": t.expandedFill, "border-opacity": 1 } },
    { selector: "node.df-box", style: { "border-color": p.changed, "border-width": 2.5, "border-opacity": 1, "border-style": "solid", color: readable(p.changed, t.boxFill) } },
    { selector: "node.df-gained", style: { "border-color": p.added, "border-width": 5, "border-style": "double" } },
    { selector: "node.df-lost", style: { "border-color": p.removed, "border-width": 5, "border-style": "double", color: readable(p.removed, t.leafFill) } },
  ];
}

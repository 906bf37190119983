// Values and marks drawn over the graph (the `overlay` trait: gradient flow, memory, the doctor's
// marks): a heat colour or a node size per value, a bordered mark per flag, and their legend.
import type { StylesheetJson } from "cytoscape";
import type { Overlay } from "../../payload";
import { splitFill } from "../../state/classes";
import { withUnit } from "../../state/numbers";
import { MARK } from "../../view/style";
import type { Theme } from "../../view/theme";
import type { Core, FeatureFactory } from "../../core/context";
import type { Feature, LegendItem, LegendSpec } from "../../core/feature";
import { relayout } from "../../core/drawing";
import { repaint } from "../../core/paint";
import { callKey, nodeKey } from "../../state/quotient";
import { detailRows, MARK_TEXT, normalizeOverlay, overlayDecorations, overlayText, overlayTooltip, type OverlayDecorations } from "./state";

export interface OverlayHooks {
  /** Overlay value and mark shown for an element key ("n:<id>", "c:<call id>"). */
  overlayOf(key: string): { value: number | null; mark: string | null; text: string };
}

export const overlay: FeatureFactory<OverlayHooks> = (core: Core): Feature<OverlayHooks> => {
  let current: Overlay | null = null;
  let deco: OverlayDecorations | null = null;
  const read = (): void => {
    current = normalizeOverlay(core.model.get("overlay"));
  };

  function legendSpec(ov: Overlay): LegendSpec {
    const r = deco?.range ?? null;
    const present = new Set(Object.values(ov.marks));
    const colours = { "no-grad": undefined, nan: MARK.nan, flag: MARK.flag } as const;
    const items: LegendItem[] = [];
    for (const m of ["no-grad", "nan", "flag"] as const) if (present.has(m)) items.push({ kind: m, text: MARK_TEXT[m], border: colours[m] });
    // Marks only (the doctor's findings): no values, so no scale to explain.
    const valued = Object.keys(ov.values).length > 0;
    if (valued && r && r.min === r.max) {
      // One value everywhere: a ramp from it to itself would explain nothing.
      return { title: ov.title || "value", scaleText: `every value shown is ${withUnit(r.min, ov.unit)}`, min: "", max: "", ramp: false, items };
    }
    return {
      title: ov.title || "value",
      scaleText: !valued ? "" : ov.encoding === "size" ? `node size grows with the value (${ov.scale} scale)` : `${ov.scale} scale`,
      min: !valued ? "" : r ? withUnit(r.min, ov.unit) : "—",
      max: !valued ? "" : r ? withUnit(r.max, ov.unit) : "—",
      ramp: valued && ov.encoding !== "size",
      items,
    };
  }

  return {
    name: "overlay",
    styles: overlayStyles,
    traits: {
      overlay() {
        const sized = current?.encoding === "size";
        read();
        // Sizes feed the layout: a "size" overlay (coming or going) lays the graph out again.
        if (sized || current?.encoding === "size") void relayout(core, {});
        else repaint(core);
      },
    },
    layoutScale: () => {
      const ov = current;
      return ov && ov.encoding === "size" ? (graph) => overlayDecorations(core.payload, graph, ov, core.index).scale : null;
    },
    loaded: read,
    decorate(shown) {
      deco = current ? overlayDecorations(core.payload, shown, current, core.index) : null;
      if (!current || !deco) return null;
      const { fill, rest } = splitFill(deco.classes);
      return { classes: rest, fill, suffixes: deco.suffix, sizes: current.encoding === "size" ? deco.scale : undefined };
    },
    legend: () => (current ? { spec: legendSpec(current) } : null),
    tooltip(key) {
      return current && deco ? overlayTooltip(current, key, deco.values.get(key), deco.marks.get(key)) : "";
    },
    details: (node) => (current ? detailRows(current, nodeKey(node.id)) : []),
    callDetails: (call) => (current ? detailRows(current, callKey(call.id)) : []),
    hooks: {
      overlayOf(key) {
        const value = deco?.values.get(key);
        const mark = deco?.marks.get(key);
        return { value: value ?? null, mark: mark ?? null, text: current ? overlayText(current, value, mark) : "" };
      },
    },
  };
};

function overlayStyles(t: Theme): StylesheetJson {
  return [
    { selector: "node.ov-no-grad", style: { "border-color": t.danger, "border-style": "dashed", "border-width": 3 } },
    { selector: "node.ov-nan", style: { "border-color": MARK.nan, "border-style": "solid", "border-width": 3.5 } },
    { selector: "node.ov-flag", style: { "border-color": MARK.flag, "border-style": "solid", "border-width": 3 } },
  ];
}

// What the legend explains for the current decorations: the stepper's gradient scale, else the
// overlay's, else the diff's statuses (null: no legend).
import { MARK_TEXT } from "../state/overlay";
import { fmt, withUnit } from "../state/numbers";
import type { LegendSpec, LegendSwatch } from "../panels/legend";
import type { WidgetContext } from "./context";

export function legendSpec(ctx: WidgetContext, stepColours: boolean): LegendSpec | null {
  const { overlay } = ctx;
  const { rix } = ctx.step;
  if (rix && (stepColours || !overlay)) {
    const sc = rix.scale;
    return {
      title: "gradient each node received (‖·‖, log scale)",
      scaleText: "",
      min: sc ? fmt(sc.min) : "—",
      max: sc ? fmt(sc.max) : "—",
      ramp: true,
      items: [
        ["run", "running now"],
        ["flow", "gradient sent now"],
        ["neutral", "not run yet"],
        ["zero", "zero"],
      ],
    };
  }
  if (!overlay) return ctx.diff ? diffLegend(ctx) : null;
  const r = ctx.ovDeco?.range ?? null;
  const items: [LegendSwatch, string][] = [];
  const present = new Set(Object.values(overlay.marks));
  for (const m of ["no-grad", "nan", "flag"] as const) if (present.has(m)) items.push([m, MARK_TEXT[m]]);
  // Marks only (the doctor's findings): no values, so no scale to explain.
  const valued = Object.keys(overlay.values).length > 0;
  return {
    title: overlay.title || "value",
    scaleText: !valued ? "" : overlay.encoding === "size" ? `node size grows with the value (${overlay.scale} scale)` : `${overlay.scale} scale`,
    min: !valued ? "" : r ? withUnit(r.min, overlay.unit) : "—",
    max: !valued ? "" : r ? withUnit(r.max, overlay.unit) : "—",
    ramp: valued && overlay.encoding !== "size",
    items,
  };
}

function diffLegend(ctx: WidgetContext): LegendSpec {
  const items: [LegendSwatch, string][] = [
    ["added", "added (only after)"],
    ["removed", "removed (only before)"],
    ["changed", "changed"],
    ["neutral", "the same"],
  ];
  if (ctx.diff?.gained.length) items.push(["gained", "leaf gains a gradient path"]);
  if (ctx.diff?.lost.length) items.push(["lost", "leaf loses its gradient path"]);
  items.push(["box", "box with changes inside (Δ)"]);
  return { title: "diff: before → after", scaleText: "", min: "", max: "", ramp: false, items };
}

// Everything drawn over a laid-out graph (what-if, diff, overlay, stepper) merged into ONE class
// string and label per element and handed to `GraphView.paint` (styles only, never a re-layout).
import { diffDecorations, diffText } from "../state/diff";
import { foldedText } from "../state/labels";
import { fmt } from "../state/numbers";
import { overlayDecorations, overlayText } from "../state/overlay";
import { stepDecorations, stepView } from "../state/stepper";
import { evaluate } from "../state/whatif";
import { decorate } from "../state/whatifview";
import type { Paint } from "../view/graphview";
import type { WidgetContext } from "./context";
import { legendSpec } from "./legendspec";
import { repOf, updateStepperPanel } from "./stepper";
import { addClass } from "../state/classes";

/** Merge what-if, overlay and stepper decorations into one class string and label per element,
 *  and apply them (styles only). */
export function repaint(ctx: WidgetContext): void {
  const { payload, view, wi, step, overlay, diff } = ctx;
  const shown = view.shown;
  if (!shown) return;
  const { rix, cursor } = step;
  if (!wi.deco) wi.deco = decorate(payload, shown, wi.state ?? evaluate(payload, wi.toggles), wi.toggles);
  const wiDeco = wi.deco;
  const ovDeco = (ctx.ovDeco = overlay ? overlayDecorations(payload, shown, overlay, ctx.index) : null);
  const dfDeco = (ctx.dfDeco = diff ? diffDecorations(payload, shown, diff, ctx.index) : null);
  const sv = (step.sv = rix ? stepView(rix, cursor) : null);
  const stepColours = !!rix && cursor >= 0;
  const st = rix && sv ? stepDecorations(rix, sv, shown, (id) => repOf(ctx, id)) : null;
  const paint: Paint = { classes: new Map(), labels: new Map(), sizes: new Map(), edgeLabels: st?.edgeLabels ?? new Map(), suffixes: ovDeco?.suffix ?? new Map() };
  const addAll = (m: Map<string, string> | undefined, keep?: (cls: string) => boolean): void => {
    if (!m) return;
    for (const [k, v] of m) {
      const cls = keep ? v.split(" ").filter(keep).join(" ") : v;
      if (!cls) continue;
      addClass(paint.classes, k, cls);
    }
  };
  addAll(wiDeco.classes);
  addAll(dfDeco?.classes);
  addAll(ovDeco?.classes, stepColours ? (c) => !c.startsWith("heat-") : undefined);
  addAll(st?.classes);
  if (dfDeco) for (const [k, v] of dfDeco.labels) paint.labels.set(k, v);
  // What-if marks go inside the diff's ("+ ❄ name"): templates compose through "{base}".
  for (const [k, v] of wiDeco.labels) paint.labels.set(k, paint.labels.has(k) ? paint.labels.get(k)!.split("{base}").join(v) : v);
  if (st) for (const [k, lines] of st.lines) paint.labels.set(k, (paint.labels.get(k) ?? "{base}") + "\n" + lines.join("\n"));
  if (ovDeco && overlay?.encoding === "size" && !stepColours) for (const [k, f] of ovDeco.scale) paint.sizes.set(k, f);
  view.paint(paint);
  step.flowEdges = st ? [...st.edgeLabels.keys()] : [];
  ctx.legend.show(legendSpec(ctx, stepColours));
  updateStepperPanel(ctx);
}

/** The diff panel's one-line summary (hidden without a diff). */
export function showDiff(ctx: WidgetContext): void {
  const { diff } = ctx;
  if (!diff) {
    ctx.diffPanel.show("", null);
    return;
  }
  const counts = { added: 0, removed: 0, changed: 0 };
  for (const st of Object.values(diff.status)) if (st !== "same") counts[st]++;
  ctx.diffPanel.show(`Diff: ${counts.added} added · ${counts.removed} removed · ${counts.changed} changed`, diff.summary);
}

/** Hover text for an element: its stack, diff, overlay value and received gradient, as drawn now. */
export function tooltipText(ctx: WidgetContext, key: string): string {
  const { diff, dfDeco, overlay, ovDeco } = ctx;
  const { rix, sv } = ctx.step;
  const parts: string[] = [];
  if (key.startsWith("f:")) {
    const item = ctx.view.shown?.items.find((i) => i.key === key);
    if (item?.type === "folded") parts.push(foldedText(item.calls, item.size));
  }
  if (diff && dfDeco) {
    const t = diffText(diff, dfDeco, key);
    if (t) parts.push(t);
  }
  if (overlay && ovDeco) {
    const t = overlayText(overlay, ovDeco.values.get(key), ovDeco.marks.get(key));
    if (t) parts.push(t);
  }
  if (rix && sv && key.startsWith("n:")) {
    const r = sv.ran.get(key.slice(2));
    if (r) parts.push(`gradient received: ‖·‖ ${r.nonfinite ? "NaN/Inf" : fmt(r.norm)}`);
  }
  return parts.join(" · ");
}

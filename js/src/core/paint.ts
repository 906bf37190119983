// Everything the features draw over a laid-out graph merged into ONE class string and label per
// element and handed to `GraphView.paint` (styles only, never a re-layout). Where features overlap,
// their order in `features/index.ts` decides (see `Decoration`).
import { addClass } from "../state/classes";
import { foldedText, fullNameText, ghostText } from "../state/labels";
import type { Paint } from "../view/graphview";
import type { Core } from "./context";
import type { Decoration, LegendSpec } from "./feature";

/** Merge every feature's decorations and apply them (styles only); then the legend and the panels
 *  that follow the decorations. */
export function repaint(ctx: Core): void {
  const { view } = ctx;
  const shown = view.shown;
  if (!shown) return;
  const decos: Decoration[] = [];
  for (const f of ctx.features) {
    const d = f.decorate?.(shown);
    if (d) decos.push(d);
  }
  view.paint(mergeDecorations(decos));
  ctx.legend.show(pickLegend(ctx));
  for (const f of ctx.features) f.painted?.();
}

/** Decorations in list order -> one paint: classes add up; fill and sizes come from the first that
 *  has them; each label template wraps what the ones before it made; lines and edge labels add up. */
export function mergeDecorations(decos: readonly Decoration[]): Paint {
  const paint: Paint = { classes: new Map(), labels: new Map(), sizes: new Map(), edgeLabels: new Map(), suffixes: new Map() };
  const fill = decos.find((d) => d.fill)?.fill;
  const sizes = decos.find((d) => d.sizes)?.sizes;
  const lines = new Map<string, string[]>();
  for (const d of decos) {
    for (const [k, v] of d.classes ?? []) if (v) addClass(paint.classes, k, v);
    for (const [k, v] of d.labels ?? []) {
      const inner = paint.labels.get(k);
      paint.labels.set(k, inner === undefined ? v : v.split("{base}").join(inner));
    }
    for (const [k, l] of d.lines ?? []) lines.set(k, [...(lines.get(k) ?? []), ...l]);
    for (const [k, v] of d.edgeLabels ?? []) paint.edgeLabels.set(k, v);
    for (const [k, v] of d.suffixes ?? []) paint.suffixes.set(k, (paint.suffixes.get(k) ?? "") + v);
  }
  for (const [k, v] of fill ?? []) addClass(paint.classes, k, v);
  for (const [k, f] of sizes ?? []) paint.sizes.set(k, f);
  for (const [k, l] of lines) paint.labels.set(k, (paint.labels.get(k) ?? "{base}") + "\n" + l.join("\n"));
  return paint;
}

/** The first legend in list order; a feature's fallback legend only when no feature has a real one. */
function pickLegend(ctx: Core): LegendSpec | null {
  let fallback: LegendSpec | null = null;
  for (const f of ctx.features) {
    const l = f.legend?.();
    if (!l) continue;
    if (!l.fallback) return l.spec;
    fallback ??= l.spec;
  }
  return fallback;
}

/** Hover text for an element: a folded stack's members, then every feature's line, as drawn now. */
export function tooltipText(ctx: Core, key: string): string {
  const parts: string[] = [];
  if (key.startsWith("f:")) {
    const item = ctx.view.shown?.items.find((i) => i.key === key);
    if (item?.type === "folded") parts.push(foldedText(item.calls, item.size));
  }
  // A ghost stub names its whole source; a label drawn without the module prefix, its full name.
  if (key.startsWith("g:") || ctx.payload.meta.prefix) {
    const item = ctx.view.shown?.items.find((i) => i.key === key);
    if (item?.type === "ghost") parts.push(ghostText(item.ghost));
    const full =
      item?.type === "collapsed" || item?.type === "expanded"
        ? fullNameText(item.call.id, item.prefix)
        : item?.type === "node" && item.node.kind === "leaf"
          ? fullNameText(item.node.names.join(", "), item.prefix)
          : "";
    if (full) parts.push(full);
  }
  for (const f of ctx.features) {
    const t = f.tooltip?.(key);
    if (t) parts.push(t);
  }
  return parts.join(" · ");
}

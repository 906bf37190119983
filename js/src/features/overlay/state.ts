// The per-node overlay (synced trait `overlay`, payload.ts `Overlay`): values drawn as colour (or
// size) on a sequential palette, plus marks (no-grad, nan, flag). Pure: classes, label suffixes and
// size factors per visible element; the view applies them without re-layout.
import type { GraphPayload, Overlay } from "../../payload";
import { binOf, fractionOf, scaleOf, withUnit, type Scale } from "../../state/numbers";
import { callKey, nodeKey, type CallIndex, type VisibleGraph } from "../../state/quotient";
import { addClass } from "../../state/classes";
import { reviveValues } from "../../state/finite";

export type Mark = Overlay["marks"][string];
const MARK_ORDER: Mark[] = ["nan", "no-grad", "flag"];

/** `{}` (or anything without values and marks) is no overlay. */
export function normalizeOverlay(o: Partial<Overlay> | null | undefined): Overlay | null {
  if (!o || typeof o !== "object") return null;
  const values = o.values && typeof o.values === "object" ? reviveValues(o.values) : {};
  const marks = o.marks && typeof o.marks === "object" ? o.marks : {};
  if (Object.keys(values).length === 0 && Object.keys(marks).length === 0) return null;
  return {
    title: typeof o.title === "string" ? o.title : "",
    values,
    scale: o.scale === "linear" ? "linear" : "log",
    encoding: o.encoding === "size" ? "size" : "color",
    marks,
    unit: typeof o.unit === "string" ? o.unit : "",
    detail: o.detail && typeof o.detail === "object" ? o.detail : {},
  };
}

/** Rows shown in a tooltip; the details panel shows all of them. */
export const TOOLTIP_ROWS = 6;

/** The overlay's rows for an element key ("n:<id>" reads `detail[id]`, "c:<call id>" reads
 *  `detail["call:<id>"]`); a folded stack or a ghost has none. */
export function detailRows(overlay: Overlay, key: string): [string, string][] {
  const id = key.startsWith("n:") ? key.slice(2) : key.startsWith("c:") ? "call:" + key.slice(2) : null;
  const rows = id === null ? undefined : overlay.detail?.[id];
  return Array.isArray(rows) ? rows : [];
}

/** Hover text: the value and mark line, then the first rows of detail ("… and N more" past them). */
export function overlayTooltip(overlay: Overlay, key: string, value: number | undefined, mark: Mark | undefined): string {
  const head = overlayText(overlay, value, mark);
  const rows = detailRows(overlay, key);
  const shown = rows.slice(0, TOOLTIP_ROWS).map(([label, text]) => `${label}: ${text}`);
  if (rows.length > TOOLTIP_ROWS) shown.push(`… and ${rows.length - TOOLTIP_ROWS} more (details panel)`);
  return [head, ...shown].filter(Boolean).join("\n");
}

export interface OverlayDecorations {
  /** Element key -> "heat-<bin>" / "ov-<mark>" classes. */
  classes: Map<string, string>;
  /** Element key -> suffix for the label's first line (" ⊘" for no-grad). */
  suffix: Map<string, string>;
  /** Element key -> size factor (encoding "size"). */
  scale: Map<string, number>;
  /** Element key -> the value it shows (for tooltips). */
  values: Map<string, number>;
  /** Element key -> its mark (boxes: the worst mark inside). */
  marks: Map<string, Mark>;
  range: Scale | null;
}

/** Value of a visible element: a node's own; a box's "call:<id>" key, else the max of its members. */
export function overlayDecorations(
  payload: GraphPayload,
  graph: VisibleGraph,
  overlay: Overlay,
  index: CallIndex,
): OverlayDecorations {
  const classes = new Map<string, string>();
  const suffix = new Map<string, string>();
  const scale = new Map<string, number>();
  const values = new Map<string, number>();
  const marks = new Map<string, Mark>();
  const add = (key: string, cls: string): void => addClass(classes, key, cls);
  // Call id -> the key of the closed box (or folded stack) drawn for it.
  const boxes = new Map<string, string>();
  for (const item of graph.items) {
    if (item.type === "collapsed") boxes.set(item.call.id, item.key);
    if (item.type === "folded") for (const c of item.calls) boxes.set(c.id, item.key);
  }
  // Members' values and marks, rolled up to every collapsed box holding them.
  const boxMax = new Map<string, number>();
  const boxMark = new Map<string, Mark>();
  const worse = (a: Mark | undefined, b: Mark): Mark => (a && MARK_ORDER.indexOf(a) <= MARK_ORDER.indexOf(b) ? a : b);
  for (const n of payload.nodes) {
    const v = overlay.values[n.id];
    const m = overlay.marks[n.id];
    const key = nodeKey(n.id);
    if (typeof v === "number") values.set(key, v);
    if (m) {
      add(key, "ov-" + m);
      marks.set(key, m);
      if (m === "no-grad") suffix.set(key, " ⊘");
    }
    if (!n.call) continue;
    for (const c of index.chain.get(n.call) ?? []) {
      const box = boxes.get(c);
      if (!box) continue;
      if (typeof v === "number" && !Number.isNaN(v)) boxMax.set(box, Math.max(boxMax.get(box) ?? -Infinity, v));
      if (m) boxMark.set(box, worse(boxMark.get(box), m));
    }
  }
  const done = new Set<string>();
  for (const [id, key] of boxes) {
    // A stack (several calls, one key) has no value of its own: the largest of its members.
    if (done.has(key)) continue;
    done.add(key);
    const own = key === callKey(id) ? overlay.values[`call:${id}`] : undefined;
    const v = typeof own === "number" ? own : boxMax.get(key);
    if (v !== undefined) values.set(key, v);
    const m = (key === callKey(id) ? overlay.marks[`call:${id}`] : undefined) ?? boxMark.get(key);
    if (m) {
      add(key, "ov-" + m);
      marks.set(key, m);
      if (m === "no-grad") suffix.set(key, " ⊘");
    }
  }
  const drawn = new Set<string>();
  for (const item of graph.items) if (item.type === "node" || item.type === "collapsed" || item.type === "folded") drawn.add(item.key);
  const shownValues = [...values].filter(([k]) => drawn.has(k)).map(([, v]) => v);
  const range = scaleOf(shownValues.length ? shownValues : Object.values(overlay.values), overlay.scale);
  for (const [key, v] of values) {
    if (!drawn.has(key) || !range) continue;
    if (overlay.encoding === "size") scale.set(key, 1 + 1.5 * fractionOf(v, range));
    else {
      const b = binOf(v, range);
      add(key, b < 0 ? "heat-zero" : `heat-${b}`);
    }
  }
  return { classes, suffix, scale, values, marks, range };
}

/** Tooltip / details text: "gradient L2 norm: 0.031" or "saved for backward: 1.5 MiB". */
export function overlayText(overlay: Overlay, value: number | undefined, mark: Mark | undefined): string {
  const parts: string[] = [];
  if (value !== undefined) parts.push(`${overlay.title || "value"}: ${withUnit(value, overlay.unit)}`);
  if (mark) parts.push(MARK_TEXT[mark]);
  return parts.join(" · ");
}

export const MARK_TEXT: Record<Mark, string> = {
  "no-grad": "⊘ no gradient",
  nan: "NaN / Inf",
  flag: "flagged",
};

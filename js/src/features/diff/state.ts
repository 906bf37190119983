// The diff view's look: classes, label marks and box badges per visible element, from a GraphDiff
// (Python's `gv.diff(before, after).to_payload()`) over the merged graph. Pure (no DOM): node tests.
import type { DiffStatus, GraphDiff, GraphPayload } from "../../payload";
import type { CallIndex, VisibleGraph } from "../../state/quotient";
import { addClass } from "../../state/classes";

/** Classes the view knows (style.ts): every one starts with "df-". */
export const DF = {
  added: "df-added",
  removed: "df-removed",
  changed: "df-changed",
  /** Leaf that gained / lost a gradient path. */
  gained: "df-gained",
  lost: "df-lost",
  /** Box (collapsed or open) with changes inside. */
  boxChanged: "df-box",
} as const;

const MARK: Record<DiffStatus, string> = { added: "+ ", removed: "− ", changed: "~ ", same: "" };

/** `{}` (or anything without `status`) is no diff. */
export function normalizeDiff(d: Partial<GraphDiff> | null | undefined): GraphDiff | null {
  if (!d || !d.status || typeof d.status !== "object" || Object.keys(d.status).length === 0) return null;
  const list = (x: unknown): string[] => (Array.isArray(x) ? x.map(String) : []);
  return {
    status: d.status,
    why: d.why && typeof d.why === "object" ? d.why : {},
    added_leaves: list(d.added_leaves),
    removed_leaves: list(d.removed_leaves),
    gained: list(d.gained),
    lost: list(d.lost),
    hidden: list(d.hidden),
    memory: d.memory && typeof d.memory === "object" ? d.memory : {},
    memory_total: Array.isArray(d.memory_total) ? d.memory_total : [0, 0],
    summary: typeof d.summary === "string" ? d.summary : "",
  };
}

export interface BoxCounts {
  added: number;
  removed: number;
  changed: number;
}

export interface DiffDecorations {
  classes: Map<string, string>;
  /** Label templates ("{base}" = the base label). */
  labels: Map<string, string>;
  /** Box key -> changes inside it (only boxes with any). */
  boxes: Map<string, BoxCounts>;
  /** Node key -> status, for tooltips and details. */
  status: Map<string, DiffStatus>;
}

/** "Δ 12 added · 3 removed · 1 changed" (parts that are zero left out). */
export function badgeText(c: BoxCounts): string {
  const parts: string[] = [];
  if (c.added) parts.push(`${c.added} added`);
  if (c.removed) parts.push(`${c.removed} removed`);
  if (c.changed) parts.push(`${c.changed} changed`);
  return parts.length ? "Δ " + parts.join(" · ") : "";
}

/** Leaf gradient-path marks, by any of the leaf's names. */
function leafMark(names: readonly string[], gained: ReadonlySet<string>, lost: ReadonlySet<string>): "gained" | "lost" | null {
  if (names.some((n) => lost.has(n))) return "lost";
  if (names.some((n) => gained.has(n))) return "gained";
  return null;
}

export function diffDecorations(payload: GraphPayload, graph: VisibleGraph, diff: GraphDiff, index: CallIndex): DiffDecorations {
  const classes = new Map<string, string>();
  const labels = new Map<string, string>();
  const boxes = new Map<string, BoxCounts>();
  const status = new Map<string, DiffStatus>();
  const add = (key: string, cls: string): void => addClass(classes, key, cls);
  const gained = new Set(diff.gained);
  const lost = new Set(diff.lost);
  const shownBoxes = new Set<string>();
  for (const item of graph.items) if (item.type === "collapsed" || item.type === "expanded") shownBoxes.add(item.call.id);
  const drawn = new Set<string>();
  for (const item of graph.items) if (item.type === "node") drawn.add(item.key);
  for (const n of payload.nodes) {
    const st = diff.status[n.id] ?? "same";
    const key = "n:" + n.id;
    status.set(key, st);
    if (drawn.has(key)) {
      if (st !== "same") add(key, "df-" + st);
      const mark = n.kind === "leaf" ? leafMark(n.names, gained, lost) : null;
      if (mark) add(key, mark === "gained" ? DF.gained : DF.lost);
      const tail = mark === "gained" ? "\n▲ gains a gradient path" : mark === "lost" ? "\n✖ loses its gradient path" : "";
      if (MARK[st] || tail) labels.set(key, MARK[st] + "{base}" + tail);
    }
    if (st === "same" || !n.call) continue;
    for (const c of index.chain.get(n.call) ?? []) {
      if (!shownBoxes.has(c)) continue;
      const k = "c:" + c;
      const counts = boxes.get(k) ?? { added: 0, removed: 0, changed: 0 };
      counts[st]++;
      boxes.set(k, counts);
    }
  }
  for (const item of graph.items) {
    if (item.type !== "collapsed" && item.type !== "expanded") continue;
    const c = boxes.get(item.key);
    if (!c) continue;
    const members = item.size || index.size.get(item.call.id) || 0;
    // A box all of whose members were added (or removed) is itself added (removed): a new module.
    if (c.added === members && members > 0) add(item.key, DF.added);
    else if (c.removed === members && members > 0) add(item.key, DF.removed);
    else add(item.key, DF.boxChanged);
    labels.set(item.key, "{base}" + (item.type === "collapsed" ? "\n" : " · ") + badgeText(c));
  }
  return { classes, labels, boxes, status };
}

/** Tooltip text for an element of the diff view ("" for unchanged). */
export function diffText(diff: GraphDiff, deco: DiffDecorations, key: string): string {
  if (key.startsWith("c:")) {
    const c = deco.boxes.get(key);
    return c ? badgeText(c) : "";
  }
  const st = deco.status.get(key);
  if (!st || st === "same") return "";
  const id = key.slice(2);
  const why = diff.why[id];
  return st === "changed" && why ? `changed: ${why}` : st === "added" ? "added (only in after)" : st === "removed" ? "removed (only in before)" : st;
}

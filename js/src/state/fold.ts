// Repeated-block folding: runs of identical sibling calls (`blocks.0` ... `blocks.47`, from the
// payload's `folds`) are drawn as ONE stacked box until unfolded. A group is shown folded iff the
// user has not unfolded it (synced trait `unfolded`) and none of its calls is expanded.
import type { FoldGroup, GraphPayload } from "../payload";
import type { CallIndex } from "./calltree";

/** Prefix of a folded box's element key: "f:<group id>". */
export const foldKey = (groupId: string): string => "f:" + groupId;

export interface FoldIndex {
  groups: Map<string, FoldGroup>;
  /** Call id (a direct member of a group) -> its group. */
  groupOf: Map<string, FoldGroup>;
}

/** Call id -> the folded box standing for it (only calls of groups shown folded now). */
export type FoldedCalls = ReadonlyMap<string, FoldGroup>;

export const NO_FOLDS: FoldedCalls = new Map();

export function indexFolds(payload: GraphPayload, index: CallIndex): FoldIndex {
  const groups = new Map<string, FoldGroup>();
  const groupOf = new Map<string, FoldGroup>();
  for (const g of payload.folds ?? []) {
    // A group naming unknown calls (bad payload) is ignored rather than half drawn.
    if (g.calls.length < 2 || !g.calls.every((c) => index.calls.has(c))) continue;
    groups.set(g.id, g);
    for (const c of g.calls) groupOf.set(c, g);
  }
  return { groups, groupOf };
}

/** The calls of every group shown folded with these `expanded` calls and `unfolded` group ids. */
export function foldedCalls(folds: FoldIndex, expanded: ReadonlySet<string>, unfolded: ReadonlySet<string>): FoldedCalls {
  const out = new Map<string, FoldGroup>();
  for (const g of folds.groups.values()) {
    if (unfolded.has(g.id) || g.calls.some((c) => expanded.has(c))) continue;
    for (const c of g.calls) out.set(c, g);
  }
  return out;
}

/** Group ids shown folded now (each once, payload order). */
export function foldedGroups(folded: FoldedCalls): string[] {
  return [...new Set([...folded.values()].map((g) => g.id))];
}

/** `unfolded` plus every group holding an expanded call (or an ancestor of one): expanding a call
 *  inside a group, from anywhere, unfolds that group for good. */
export function unfoldForExpanded(
  unfolded: ReadonlySet<string>,
  expanded: ReadonlySet<string>,
  folds: FoldIndex,
  index: CallIndex,
): Set<string> {
  const next = new Set(unfolded);
  for (const c of expanded) {
    for (const a of index.chain.get(c) ?? []) {
      const g = folds.groupOf.get(a);
      if (g) next.add(g.id);
    }
  }
  return next;
}

/** Groups to unfold so that call `id` (or a node inside it) can be drawn. */
export function groupsAround(id: string, folds: FoldIndex, index: CallIndex): string[] {
  const out: string[] = [];
  for (const a of index.chain.get(id) ?? []) {
    const g = folds.groupOf.get(a);
    if (g) out.push(g.id);
  }
  return out;
}

/** The trait value: known group ids only, sorted (a stable value for Python). */
export function canonicalUnfolded(unfolded: Iterable<string>, folds: FoldIndex): string[] {
  return [...new Set(unfolded)].filter((id) => folds.groups.has(id)).sort();
}

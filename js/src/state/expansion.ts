// Which module calls are expanded. The synced `expanded` trait is a list; these helpers keep it
// canonical (known ids, payload order) so Python sees a stable value and set comparisons are cheap.
import type { CallIndex } from "./quotient";

/** Expanding a call also expands its ancestors, so the call is really visible afterwards. */
export function expand(expanded: ReadonlySet<string>, id: string, index: CallIndex): Set<string> {
  const next = new Set(expanded);
  for (const c of index.chain.get(id) ?? []) next.add(c);
  return next;
}

/** Collapsing a call also collapses everything inside it: re-expanding starts one level deep. */
export function collapse(expanded: ReadonlySet<string>, id: string, index: CallIndex): Set<string> {
  const next = new Set<string>();
  for (const c of expanded) {
    if (!(index.chain.get(c) ?? []).includes(id)) next.add(c);
  }
  return next;
}

/** Every call that holds at least one node (empty calls are never drawn). */
export function expandAll(index: CallIndex): Set<string> {
  return new Set(index.order.filter((id) => (index.size.get(id) ?? 0) > 0));
}

/** The trait value: known ids only, in payload order (parents before children). */
export function canonical(expanded: Iterable<string>, index: CallIndex): string[] {
  const set = new Set(expanded);
  return index.order.filter((id) => set.has(id));
}

export function sameSet(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  if (a.size !== b.size) return false;
  for (const x of a) if (!b.has(x)) return false;
  return true;
}

// The visible quotient graph: what is on screen for a payload and a set of expanded module calls.
// Pure data in, pure data out (no DOM), so it is unit-tested in node and cheap to recompute per click.
import type { FoldGroup, GhostTensor, GraphEdge, GraphNode, GraphPayload, ModuleCall } from "../payload";
import { indexCalls, type CallIndex } from "./calltree";
import { foldKey, NO_FOLDS, type FoldedCalls } from "./fold";

export { indexCalls, type CallIndex } from "./calltree";

/** Prefixes keep node ids and call ids apart in one id space (a node could be called "fc1"). */
export const nodeKey = (id: string): string => "n:" + id;
export const callKey = (id: string): string => "c:" + id;
export const ghostKey = (id: string): string => "g:" + id;

export type VisibleItem = (
  | { key: string; type: "node"; node: GraphNode; parent: string | null }
  /** A collapsed call: one box standing for every node inside it. */
  | { key: string; type: "collapsed"; call: ModuleCall; size: number; parent: string | null }
  /** An expanded call: a compound box drawn around its visible members. */
  | { key: string; type: "expanded"; call: ModuleCall; size: number; parent: string | null }
  /** A run of identical sibling calls shown folded: one stacked box standing for every node inside
   *  all of them (`calls` in order, `size` their total node count). */
  | { key: string; type: "folded"; group: FoldGroup; calls: ModuleCall[]; size: number; parent: string | null }
  /** A detached / frozen tensor seen in the forward pass only, drawn as a short greyed stub beside one
   *  of the items it feeds (`target`, its key): no edge runs back to its source. No part in what-if. */
  | { key: string; type: "ghost"; ghost: GhostTensor; parent: string | null; target: string }
) & {
  /** The module prefix every name shares (GraphMeta.prefix), left out of the drawn label. */
  prefix?: string;
};

export interface VisibleEdge {
  key: string;
  source: string;
  target: string;
  /** How many payload edges this visible edge stands for. */
  count: number;
  /** Indices into payload.edges (empty for ghost edges). */
  edges: number[];
  /** True for the dashed edges into and out of ghost tensors. */
  ghost?: boolean;
}

export interface VisibleGraph {
  items: VisibleItem[];
  edges: VisibleEdge[];
  counts: VisibleCounts;
}

export interface VisibleCounts {
  /** Op, leaf and root nodes drawn as themselves (ghosts are not counted, nor their edges). */
  nodes: number;
  collapsed: number;
  expanded: number;
  /** Folded stacks of repeated calls ("48 × Block"). */
  folded: number;
  edges: number;
}

/** Who stands for `node` on screen: itself, or the outermost collapsed call (or folded stack)
 *  around it. */
export function representative(node: GraphNode, index: CallIndex, expanded: ReadonlySet<string>, folded: FoldedCalls = NO_FOLDS): string {
  return representativeIn(node.call, nodeKey(node.id), index, expanded, folded);
}

/** Who stands for an element of call `call` whose own key is `own`. */
function representativeIn(call: string, own: string, index: CallIndex, expanded: ReadonlySet<string>, folded: FoldedCalls): string {
  const chain = call ? index.chain.get(call) : undefined;
  if (chain) {
    for (const c of chain) {
      if (expanded.has(c)) continue;
      const g = folded.get(c);
      return g ? foldKey(g.id) : callKey(c);
    }
  }
  return own;
}

/** Whether call `id` is drawn as a box (open or closed) with these expanded calls and folds. */
export function callShown(id: string, index: CallIndex, expanded: ReadonlySet<string>, folded: FoldedCalls = NO_FOLDS): boolean {
  const chain = index.chain.get(id);
  if (!chain || folded.has(id)) return false;
  for (let i = 0; i < chain.length - 1; i++) if (!expanded.has(chain[i])) return false;
  return true;
}

/** The innermost call of `chain` that is expanded with every ancestor expanded, as a box key. */
function enclosingBox(chain: readonly string[] | undefined, expanded: ReadonlySet<string>): string | null {
  let box: string | null = null;
  for (const c of chain ?? []) {
    if (!expanded.has(c)) break;
    box = callKey(c);
  }
  return box;
}

export function visibleGraph(
  payload: GraphPayload,
  expanded: ReadonlySet<string>,
  index = indexCalls(payload),
  folded: FoldedCalls = NO_FOLDS,
): VisibleGraph {
  const items: VisibleItem[] = [];
  const repOf = new Map<string, string>();
  const shownCalls = new Set<string>();
  let nodes = 0;
  // Every node of one call has the same stand-in and box: work them out once per call (a 50,000-node
  // graph has a few thousand calls), "" standing for "the node itself".
  const perCall = new Map<string, { rep: string; parent: string | null }>();
  for (const n of payload.nodes) {
    let at = perCall.get(n.call);
    if (!at) {
      const chain = n.call ? index.chain.get(n.call) : undefined;
      at = { rep: representativeIn(n.call, "", index, expanded, folded), parent: enclosingBox(chain, expanded) };
      perCall.set(n.call, at);
      // Every call on the chain down to the representative is shown (expanded ones as compounds).
      // A folded call stands for its whole group: the group's first call marks it shown.
      for (const c of chain ?? []) {
        const g = folded.get(c);
        shownCalls.add(g ? g.calls[0] : c);
        if (g || !expanded.has(c)) break;
      }
    }
    const rep = at.rep || nodeKey(n.id);
    repOf.set(n.id, rep);
    if (!at.rep) {
      items.push({ key: rep, type: "node", node: n, parent: at.parent });
      nodes++;
    }
  }
  let collapsed = 0;
  let expandedCount = 0;
  let foldedCount = 0;
  const callItems: VisibleItem[] = [];
  for (const id of index.order) {
    if (!shownCalls.has(id)) continue;
    const call = index.calls.get(id)!;
    const chain = index.chain.get(id)!;
    const parent = enclosingBox(chain.slice(0, -1), expanded);
    const group = folded.get(id);
    if (group) {
      const calls = group.calls.map((c) => index.calls.get(c)!);
      const size = calls.reduce((t, c) => t + (c.size || index.size.get(c.id) || 0), 0);
      callItems.push({ key: foldKey(group.id), type: "folded", group, calls, size, parent });
      foldedCount++;
      continue;
    }
    const size = call.size || index.size.get(id) || 0;
    if (expanded.has(id)) {
      callItems.push({ key: callKey(id), type: "expanded", call, size, parent });
      expandedCount++;
    } else {
      callItems.push({ key: callKey(id), type: "collapsed", call, size, parent });
      collapsed++;
    }
  }
  const edges = aggregateEdges(payload.edges, repOf);
  const parentOf = new Map<string, string | null>();
  for (const i of [...callItems, ...items]) parentOf.set(i.key, i.parent);
  const ghosts = ghostItems(payload.ghosts ?? [], repOf, parentOf, index, expanded, folded);
  const prefix = payload.meta.prefix ?? "";
  if (prefix) for (const i of [...callItems, ...items, ...ghosts.items]) i.prefix ??= prefix;
  return {
    // Compound parents first: graph libraries want a parent to exist before its children.
    items: [...callItems, ...items, ...ghosts.items],
    edges: [...edges, ...ghosts.edges],
    counts: { nodes, collapsed, expanded: expandedCount, folded: foldedCount, edges: edges.length },
  };
}

/** Edges between representatives, with multiplicities; self loops (inside one box) are dropped. */
export function aggregateEdges(edges: readonly GraphEdge[], repOf: ReadonlyMap<string, string>): VisibleEdge[] {
  const byPair = new Map<string, VisibleEdge>();
  edges.forEach((e, i) => {
    const s = repOf.get(e.source);
    const t = repOf.get(e.target);
    if (s === undefined || t === undefined || s === t) return;
    const pair = s + "\u0000" + t;
    let v = byPair.get(pair);
    if (!v) {
      v = { key: "e:" + byPair.size, source: s, target: t, count: 0, edges: [] };
      byPair.set(pair, v);
    }
    v.count++;
    v.edges.push(i);
  });
  return [...byPair.values()];
}

/** Ghost tensors as stubs: one per item on screen a ghost feeds, in that item's box, with a short dashed
 *  edge into it (a long edge back to the source crossed every box between; the stub's label names the
 *  source instead). A ghost hidden in the closed box that also holds its consumer is not drawn. The first
 *  stub of a ghost is keyed `g:<id>`, the others `g:<id>~<n>`. */
function ghostItems(
  ghosts: readonly GhostTensor[],
  repOf: ReadonlyMap<string, string>,
  parentOf: ReadonlyMap<string, string | null>,
  index: CallIndex,
  expanded: ReadonlySet<string>,
  folded: FoldedCalls,
): { items: VisibleItem[]; edges: VisibleEdge[] } {
  const items: VisibleItem[] = [];
  const byPair = new Map<string, VisibleEdge>();
  for (const g of ghosts) {
    const call = g.call && index.calls.has(g.call) ? g.call : "";
    const own = ghostKey(g.id);
    const rep = representativeIn(call, own, index, expanded, folded);
    let stubs = 0;
    for (const t of g.targets) {
      const target = repOf.get(t);
      if (target === undefined || target === rep || !parentOf.has(target)) continue;
      const pair = g.id + "\u0000" + target;
      const known = byPair.get(pair);
      if (known) {
        known.count++;
        continue;
      }
      const key = stubs === 0 ? own : `${own}~${stubs}`;
      stubs++;
      const parent = parentOf.get(target) ?? null;
      // Named from the box it sits in ("❄ bias" under "ln_2"): a narrow stub stays close to its target.
      const box = parent ? index.calls.get(parent.slice(2))?.path : undefined;
      const name = g.kind === "frozen" ? g.names[0] || g.label : g.where;
      const local = box && name?.startsWith(box + ".") ? { prefix: box + "." } : {};
      items.push({ key, type: "ghost", ghost: g, parent, target, ...local });
      byPair.set(pair, { key: "ge:" + byPair.size, source: key, target, count: 1, edges: [], ghost: true });
    }
  }
  return { items, edges: [...byPair.values()] };
}

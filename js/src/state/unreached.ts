// Parameters a cut left outside the loss's graph (a dead adapter): no leaf carries their name, but a
// detached ghost lists them in its `cut`. They have no node, so the page names them "p:<name>": search
// finds them, `selected` may hold them (from a pick, or Python: gv.Dashboard's ✖ row), reveal opens the
// box the ghost is drawn in, and the details panel shows them as a leaf outside the graph, with "Why?".
import type { GhostTensor, GraphNode, GraphPayload } from "../payload";

export const PARAM_PREFIX = "p:";

export const isParamId = (id: string): boolean => id.startsWith(PARAM_PREFIX);

const cache = new WeakMap<GraphPayload, Map<string, GhostTensor>>();

/** Parameter name -> the first ghost whose cut lists it, for every name no leaf of the payload carries. */
export function unreachedParams(payload: GraphPayload): Map<string, GhostTensor> {
  const known = cache.get(payload);
  if (known) return known;
  const leaves = new Set(payload.nodes.flatMap((n) => (n.kind === "leaf" ? n.names : [])));
  const out = new Map<string, GhostTensor>();
  for (const g of payload.ghosts ?? []) for (const name of g.cut ?? []) if (!leaves.has(name) && !out.has(name)) out.set(name, g);
  cache.set(payload, out);
  return out;
}

/** The leaf record the details panel shows for "p:<name>" (no node exists: it is not in the graph). */
export function paramNode(payload: GraphPayload, id: string): GraphNode | undefined {
  if (!isParamId(id)) return undefined;
  const name = id.slice(PARAM_PREFIX.length);
  const ghost = unreachedParams(payload).get(name);
  if (!ghost) return undefined;
  return {
    id, kind: "leaf", op: "", label: name, module: name.includes(".") ? name.slice(0, name.lastIndexOf(".")) : "",
    call: ghost.call, names: [name], shape: null, dtype: "", requires_grad: true, saved: [], value: null, grad: null,
  };
}

/** One line on why it is outside the graph: where its path to the loss was cut. */
export function unreachedText(g: GhostTensor): string {
  const at = g.line ? ` at ${g.line}` : "";
  return `not in the loss's graph: its path was cut by ${g.label || "detach()"} in ${g.where || "(top level)"}${at}`;
}

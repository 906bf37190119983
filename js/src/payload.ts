// The data contract between Python (gradviz_nb/widgets/payload.py) and the page.
// Everything here is plain JSON carried in the widget's synced traits, so a saved notebook
// or an exported page can rebuild the view with no kernel running.

/** One autograd node (an op's backward function), a leaf tensor, or a root tensor. */
export interface GraphNode {
  id: string;
  kind: "op" | "leaf" | "root";
  /** grad_fn class name, e.g. "AddmmBackward0"; "AccumulateGrad" for leaves; "" for roots. */
  op: string;
  /** Short display text (plain text, never HTML). */
  label: string;
  /** Dotted module path the node belongs to ("" = top level). */
  module: string;
  /** Module *call* id the node belongs to ("" = top level, not a box). See GraphPayload.calls. */
  call: string;
  /** Leaves: every name of the tensor (a tied weight has several). Empty for ops. */
  names: string[];
  /** Shape of the (first) tensor the node produced, or null when unknown. */
  shape: number[] | null;
  dtype: string;
  requires_grad: boolean;
  /** Saved-for-backward tensors where known (name, shape, dtype), without unpacking them. */
  saved: { name: string; shape: number[] | null; dtype: string }[];
}

/** A tensor flowing forward from `source` (its output `output_nr`) into `target` (input `input_nr`). */
export interface GraphEdge {
  source: string;
  target: string;
  output_nr: number;
  input_nr: number;
  shape: number[] | null;
}

/** One call of an nn.Module during the captured forward: a collapsible box. */
export interface ModuleCall {
  /** Unique id, e.g. "blocks.0" or "blocks.0 (call 2)" for the second call of the same module. */
  id: string;
  /** Dotted module path, e.g. "blocks.0.attn". */
  path: string;
  /** Module class name, e.g. "MultiheadAttention". */
  type: string;
  /** Id of the enclosing call; "" when the enclosing call is the top level. */
  parent: string;
  /** 1 for the first call of this module, 2 for the second, ... */
  index: number;
  /** Number of graph nodes inside (recursively), for collapsed-box labels. */
  size: number;
}

export interface GraphMeta {
  torch_version: string;
  /** True when module calls were captured (gv.capture / gv.watch). */
  captured: boolean;
  /** Plain-text notes for the user, e.g. how to get module boxes, or "compiled graph is one node". */
  notes: string[];
  num_nodes: number;
  num_edges: number;
}

export interface GraphPayload {
  version: 1;
  nodes: GraphNode[];
  edges: GraphEdge[];
  /** Parents always appear before their children. */
  calls: ModuleCall[];
  meta: GraphMeta;
}

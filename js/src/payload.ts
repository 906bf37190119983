// The data contract between Python (gradviz_nb/widgets/page: contract.py types every interface here,
// tests/unit/test_page_contract.py compares them through the compiler) and the page.
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
  /** Forward value (flattened) of small tensors (<= 64 elements) where known, else null. */
  value: number[] | null;
  /** Leaves over 64 elements: their first values and statistics, read when traced (absent: unknown). */
  stats?: TensorSummary | null;
  /** Leaves: their `.grad` when traced (null: it was None; absent: unknown, e.g. an op). */
  grad?: TensorSummary | null;
}

/** A tensor in a few numbers (gradviz_nb/tracing/summary.py). Statistics are over the finite elements
 *  (`nonfinite` counts the others); null with `skipped` saying why when not computed (too big). */
export interface TensorSummary {
  numel: number;
  /** First values, row-major: all of them up to 64 elements, else the first 8 ("NaN" / "Infinity" as strings). */
  head: (number | string)[];
  norm: number | null;
  mean: number | null;
  std: number | null;
  min: number | null;
  max: number | null;
  nonfinite: number | null;
  skipped: string;
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
  /** The dotted prefix ("base_model.model.") every module path shares, drawn without it in box headers,
   *  leaf and ghost names (full names in the details panel); "" or absent: none. */
  prefix?: string;
}

export interface GraphPayload {
  version: 1;
  nodes: GraphNode[];
  edges: GraphEdge[];
  /** Parents always appear before their children. */
  calls: ModuleCall[];
  /** Detached / frozen tensors seen in the forward pass but absent from the backward graph. */
  ghosts: GhostTensor[];
  meta: GraphMeta;
  /** Lazy mode (big graphs): present when `nodes` holds full records only for the calls in
   *  `loaded` and `edges` is empty; the page rebuilds the whole graph from this compact wiring, with
   *  placeholder records for nodes not loaded yet, and asks for a call's records (`LoadRequest`)
   *  before it draws that call open. Absent: `nodes` and `edges` are complete (eager mode). */
  wiring?: Wiring;
  /** Lazy mode: call ids whose direct member nodes are in `nodes` ("" = the top level). */
  loaded?: string[];
  /** Lazy mode: shapes of the edge slots touching the loaded calls' nodes, as in `Chunk.edge_shapes`. */
  edge_shapes?: [number, number[] | null][];
  /** Runs of consecutive sibling calls with identical structure, drawn folded as one stacked box
   *  ("48 × Block") until unfolded. Optional (older payloads have none). */
  folds?: FoldGroup[];
}

/**
 * The whole graph's topology in compact arrays (lazy mode): enough for the visible quotient graph,
 * what-if and search over every node, at a few tens of bytes per node instead of ~480.
 */
export interface Wiring {
  /** Node ids, in the order of the eager payload's `nodes`. */
  ids: string[];
  /** One character per node: "o" op, "l" leaf, "r" root. */
  kinds: string;
  /** Per node: index into `GraphPayload.calls` of its call, -1 for the top level. */
  calls: number[];
  /** Distinct op names (GraphNode.op); `op[i]` indexes this table. */
  ops: string[];
  op: number[];
  /** Per node: GraphNode.label. */
  labels: string[];
  /** Leaves only: node index (as a string key) -> GraphNode.names. */
  names: Record<string, string[]>;
  /** Every edge slot of the eager payload's `edges`, in order, flat: source index, target index,
   *  output_nr, input_nr (4 numbers per slot). Shapes come with the chunks. */
  edges: number[];
}

/** Page -> Python, one envelope for every request: `id` (unique per widget) comes back in the reply.
 *  "load" (lazy mode): send me the records of these calls' direct member nodes; "verify": re-run
 *  the model with a question's marks applied (`VerifyBody`; the result arrives in that question's trait:
 *  `verified` for "whatif", `checkpoint_verified` for "checkpoint"); "values": the selected leaf's value and
 *  .grad summaries, read now (the trace computes none); "why": why that leaf's gradient is what it is
 *  (gradviz_nb.doctor.why), body `ValuesBody` too. */
export interface PageRequest {
  id: number;
  kind: "load" | "verify" | "values" | "why";
  body: LoadBody | ValuesBody | VerifyBody | Record<string, never>;
}

/** Which predict-and-verify question to verify (gradviz_nb/widgets/questions.py): "whatif", "checkpoint". */
export interface VerifyBody {
  question: string;
}

export interface ValuesBody {
  /** A leaf's node id. */
  node: string;
}

export interface LoadBody {
  calls: string[];
}

/** Python -> page: the answer to the request with the same `id` (`error` set when `ok` is false). */
export interface PageReply {
  id: number;
  kind: "reply";
  ok: boolean;
  body?: LoadReplyBody | ValuesReplyBody | WhyReplyBody | Record<string, never>;
  error?: string;
}

/** The body of a reply to "why" (gradviz_nb/widgets/page/why.py): `answer` is `Why.to_dict()` for the
 *  leaf `node`, or null with `missing` saying why there is none (not available, not saved in this export). */
export interface WhyReplyBody {
  node: string;
  answer: WhyAnswer | null;
  missing: string;
}

/** Why one parameter's gradient is what it is: `status` "ok" | "none" | "zero" | "tiny" | "scaled"; the
 *  first cause with its evidence and fix; `node` the graph node it points at ("" for none). */
export interface WhyAnswer {
  name: string;
  status: string;
  kind: string;
  cause: string;
  evidence: string;
  fix: string;
  node: string;
}

/** The body of a reply to "load": one chunk per asked call, in the order asked. */
export interface LoadReplyBody {
  chunks: Chunk[];
}

/** The body of a reply to "values": the leaf's tensor and its .grad as they are now (gradviz_nb/widgets/
 *  page/values.py). `grad` null: .grad is None. `missing` (else ""): why nothing was read (the tensor is
 *  gone, cannot be read here, or was not saved in this export); then both are null. */
export interface ValuesReplyBody {
  node: string;
  value: TensorSummary | null;
  grad: TensorSummary | null;
  missing: string;
}

/** The full records of one call's direct member nodes, and the shapes of the edge slots that touch
 *  them (slot index into `Wiring.edges` / 4). */
export interface Chunk {
  call: string;
  nodes: GraphNode[];
  edge_shapes: [number, number[] | null][];
}

/** Consecutive calls under one parent whose structure is identical (same module type, same nested
 *  calls, same ops): `blocks.0` ... `blocks.47`. */
export interface FoldGroup {
  /** "fold:<first call id>". */
  id: string;
  /** The calls folded together, in order (at least FOLD_MIN of Python's payload.py). */
  calls: string[];
  /** Their common parent call id ("" = top level) and module type. */
  parent: string;
  type: string;
}

/**
 * Tensors seen in the forward pass that are NOT in the backward graph because they never required
 * grad there: the result of a `.detach()` (or `.data`) call, or a frozen parameter. Drawn greyed, with
 * dashed edges, so a user sees where a gradient path was cut. Only present when traced with capture.
 * They take no part in what-if reasoning.
 */
export interface GhostTensor {
  id: string;
  kind: "detached" | "frozen";
  /** e.g. "detach()" or the frozen parameter's name. Plain text. */
  label: string;
  /** Frozen parameters: every name of the tensor. */
  names: string[];
  shape: number[] | null;
  /** Node whose output was detached, with which output; null for frozen parameters. */
  source: string | null;
  output_nr: number;
  /** Graph nodes that consumed the ghost in the forward pass (may be empty). */
  targets: string[];
  /** Module call it belongs to ("" = top level), like GraphNode.call. */
  call: string;
  /** Module path whose forward made it ("" = top level), before it is drawn beside its consumers. */
  where: string;
  /** "file:line" of the user code that made it, or "" when unknown. */
  line: string;
  /** Detached: parameters upstream of the detached tensor, whose gradient path ends at this cut. */
  cut: string[];
}

/**
 * The user's what-if toggles (synced trait `toggles`). Items are strings:
 * - detach: "<node id>:<output_nr>" (one tensor), "<node id>" (every output of a node),
 *           "call:<call id>" (every tensor leaving that module call's box);
 * - freeze: "<leaf node id>" or "call:<call id>" (every leaf whose name is under that call's path).
 */
export interface Toggles {
  detach: string[];
  freeze: string[];
}

/** The answer to a set of toggles; computed in the page and by Python's `what_if` alike. */
export interface WhatIfAnswer {
  /** Leaf node ids that would get no gradient (ids, not names: every `lost` field elsewhere holds leaf
   *  names; Python's WhatIf has both, `lost` and `lost_ids`). */
  lost_ids: string[];
  /** Op and leaf node ids backward would no longer run. */
  pruned: string[];
  /** Ops + leaves that still run, and their total (roots excluded). */
  runs: number;
  total: number;
}

/** Result of a verified re-run (GraphWidget.from_fn), synced trait `verified` ({} when none). */
export interface Verification {
  /** The toggles this verification ran with (it is stale if they changed since). */
  toggles: Toggles;
  /** Leaf names predicted to lose gradient with every toggle (the headline's prediction). */
  predicted_lost: string[];
  /** The prediction for the toggles the re-run could apply, over the leaves it can read: what
   *  `actual_lost` is compared with (absent in older results: the same as `predicted_lost`). */
  checked_lost?: string[];
  /** Leaf names whose .grad really was None after the re-run. */
  actual_lost: string[];
  /** `checked_lost` equals `actual_lost` (and every replayed detach was reached). */
  agree: boolean;
  /** Every toggle was replayed and every leaf read: the whole prediction was checked. */
  complete?: boolean;
  /** What was not checked, and why, in the user's names (one sentence each: e.g. a detach of a
   *  tensor made inside a fused op, a leaf the re-run cannot reach). */
  unverifiable: string[];
  error: string;
}

/**
 * A per-node overlay drawn over the graph (synced trait `overlay`; `{}` for none). Used by the
 * gradient-flow view (gradient norm per node / leaf), the memory view (bytes saved for backward) and
 * the backward stepper. Keys are node ids, or "call:<call id>" for a collapsed module box (when a
 * box has no key, the page shows the largest value of its visible members).
 */
export interface Overlay {
  /** Legend title, e.g. "gradient L2 norm" or "saved for backward". Plain text. */
  title: string;
  values: Record<string, number>;
  scale: "log" | "linear";
  /** "color": fill on a sequential palette (with a legend); "size": node size grows with the value. */
  encoding: "color" | "size";
  /** Extra marks per node id: "no-grad" (leaf that got no gradient), "nan" (NaN/Inf), "flag" (flagged). */
  marks: Record<string, "no-grad" | "nan" | "flag">;
  /** Unit for tooltips and legend, e.g. "B", "" . */
  unit: string;
  /** Rows per element (node id or "call:<id>"): [label, text], e.g. a module box's parameters and their
   *  norms; shown in the tooltip (the first few) and the details panel (all). */
  detail?: Record<string, [string, string][]>;
}

/** Statistics of one recorded gradient tensor; `value` (flattened) only for small ones (<= 64). */
export interface RecordedGrad {
  shape: number[];
  norm: number;
  mean: number;
  max_abs: number;
  nonfinite: boolean;
  value: number[] | null;
}

/** One node run by PyTorch's engine, in the engine's real order. */
export interface RecordedStep {
  node: string;
  op: string;
  /** Which recorded backward pass (0, 1, ...) this step belongs to. */
  pass: number;
  /** Gradient the node received, per output of its forward op (its input buffer, already summed). */
  received: (RecordedGrad | null)[];
  /** Gradient it sent, per input of its forward op (null where the input needs no grad). */
  sent: (RecordedGrad | null)[];
  /** [target node id, output_nr, input_nr]: sent[input_nr] went into target's buffer at output_nr. */
  deliveries: [string, number, number][];
  /** Leaves (AccumulateGrad): `.grad` before and after this pass accumulated into it. */
  leaf_before: RecordedGrad | null;
  leaf_after: RecordedGrad | null;
  /** Teaching lines: the op's local derivative rule with PyTorch's numbers, e.g.
   *  "grad_a = grad_out * b = 0.5 * 3.0 = 1.5". Empty for ops without a known rule. */
  explain: string[];
}

/** A recorded backward pass (synced trait `recording`; `{}` for none). Trait `step` (int) is the
 *  stepper cursor: -1 before the first step, else an index into `steps` (Python can read and set it). */
export interface Recording {
  passes: number;
  steps: RecordedStep[];
  /** Forward values of small tensors by node id (leaves, roots, ops seen by capture or saved). */
  values: Record<string, number[]>;
  /** The loss was already NaN/Inf: where the forward pass made it, in words (Python's `rec.forward_text`);
   *  absent when the loss was finite. Run to "nonfinite" says it. */
  forward?: string;
}

/** How a node of the diff view compares: only in "after", only in "before", in both but different, or equal. */
export type DiffStatus = "added" | "removed" | "changed" | "same";

/**
 * The diff view (synced trait `diff`; `{}` for none), from Python's `page.diff(gv.diff(before, after))`
 * (what `GraphWidget(d)` sets).
 * The widget then draws `GraphDiff.merged()` (trait `graph_data`): the "after" graph plus the removed
 * nodes of "before" under ids "was:<before id>" (with their edges and any module calls only "before" had).
 * Suggested colours: added green, removed red (dashed), changed amber, same as usual.
 * Memory uses the `Overlay` contract (title "saved for backward", unit "B") instead, in trait `overlay`.
 */
export interface GraphDiff {
  /** Status of every drawn node id. */
  status: Record<string, DiffStatus>;
  /** Why a "changed" node changed (plain text, e.g. "shape [4, 8] -> [4, 16]; inputs now from ..."). */
  why: Record<string, string>;
  /** Leaf names only in "after" / only in "before" (a wrapped module's renamed weights are matched). */
  added_leaves: string[];
  removed_leaves: string[];
  /** Leaf names that gained / lost a gradient path (present and connected to a root). */
  gained: string[];
  lost: string[];
  /** Leaves gone behind an opaque reentrant checkpoint node: they still get gradients, unseen. */
  hidden: string[];
  /** Node id -> [bytes saved for backward before, after], only where it differs. */
  memory: Record<string, [number, number]>;
  /** Total activation bytes saved for backward, [before, after]. */
  memory_total: [number, number];
  /** Plain-text summary, several lines. */
  summary: string;
}

/** One finding of gv.doctor (synced trait `findings`); `node` is where it sits on the graph ("" for none). */
export interface DoctorFinding {
  kind: string;
  target: string;
  message: string;
  evidence: string;
  fix: string;
  step: number;
  node: string;
  /** Where a finding of this kind applies when it has no node ("the optimizer step"); "" for its target
   * (gradviz_nb/kinds.py, KindInfo.scope: the page keeps no list of kinds). */
  scope: string;
}

/** Every synced trait of the widget (Python's GraphWidget traits; a test compares the two). */
export type CheckpointMode = "non_reentrant" | "reentrant";

/** One op node as the checkpointing what-if reads it (gradviz_nb/analysis/checkpointing.py). */
export interface CheckpointOp {
  id: string;
  call: string;
  seq: number;
  flops: number;
  /** Activation storages it saved (indices into CheckpointTable.storages; parameters left out). */
  saved: number[];
  /** Saved anything at all (a checkpoint hook would pack it). */
  packs: boolean;
  saves_output: boolean;
}

/** The tensors a call's ops receive from ops outside it. */
export interface CheckpointInput {
  call: string;
  storages: number[];
  /** Nodes outside the call making them: an input requires grad exactly when one of them exists. */
  producers: string[];
}

export interface CheckpointTable {
  /** Bytes of the CPU RNG state a checkpoint keeps. */
  rng_bytes: number;
  /** Bytes of each storage. */
  storages: number[];
  ops: CheckpointOp[];
  inputs: CheckpointInput[];
}

/** A checkpointed re-run against the prediction (gradviz_nb/probes/rerun/checkpoint.py). */
export interface CheckpointVerification {
  marks: Record<string, CheckpointMode>;
  predicted_bytes: number;
  measured_bytes: number;
  predicted_before: number;
  measured_before: number;
  rng_bytes: number;
  frames: number;
  predicted_recomputed: number;
  measured_recomputed: number;
  predicted_recomputed_flops: number;
  measured_recomputed_flops: number;
  predicted_lost: string[];
  actual_lost: string[];
  agree: boolean;
  checked: string[];
  unchecked: string[];
  error: string;
}

export interface Traits {
  graph_data: GraphPayload;
  expanded: string[];
  /** Fold group ids the user unfolded (repeated-block stacks drawn as their single calls). */
  unfolded: string[];
  selected: string;
  height: number;
  /** What-if toggles (Python can read and set them). */
  toggles: Toggles;
  /** Last verified re-run ({} when none). */
  verified: Partial<Verification>;
  /** True when the widget can re-run the model (GraphWidget.from_fn). */
  can_verify: boolean;
  /** Per-node values and marks drawn over the graph ({} when none). */
  overlay: Partial<Overlay>;
  /** A recorded backward pass for the stepper ({} when none). */
  recording: Partial<Recording>;
  /** Stepper cursor: -1 before the first step, else an index into recording.steps. */
  step: number;
  /** Diff view: status per node of the merged before/after graph ({} when none). */
  diff: Partial<GraphDiff>;
  /** gv.doctor's findings listed beside the graph ([] when none). */
  findings: DoctorFinding[];
  /** Checkpointing what-if marks: module call id -> mode (Python can read and set them). */
  checkpoints: Record<string, CheckpointMode>;
  /** What the checkpointing what-if reads of the graph ({} when the graph has no module calls). */
  checkpoint_table: Partial<CheckpointTable>;
  /** Last checkpointed re-run against the prediction ({} when none). */
  checkpoint_verified: Partial<CheckpointVerification>;
}

// Where a doctor finding lives on the page: its node or box (Python writes a box as "call:<id>"), or,
// for a finding about the training loop rather than a tensor, the words for where it applies. Pure.
import type { DoctorFinding } from "../../payload";

/** The node or call id `reveal` takes for a finding's `node` ("" when it has none). */
export function findingTarget(node: string): string {
  return node.startsWith("call:") ? node.slice("call:".length) : node;
}

/** Kinds about the loop, not a tensor: what they apply to. */
const APPLIES: [readonly string[], string][] = [
  [["stale-grad", "zero-grad-before-step", "two-optimizers", "not-in-optimizer", "frozen", "update-size", "clipping"], "the optimizer step"],
  [["double-backward", "unscaled-accumulation"], "the step's backward calls"],
  [["mode"], "the model's train/eval mode"],
  [["recreated-parameter", "not-a-parameter"], "the module's registered parameters"],
  [["replica-mismatch", "unused-on-rank"], "the ranks of the distributed run"],
];

/** For a finding with no node: "not on the graph: applies to the optimizer step". */
export function appliesText(f: Pick<DoctorFinding, "kind" | "target" | "node">): string {
  if (f.node) return "";
  const scope = APPLIES.find(([kinds]) => kinds.includes(f.kind))?.[1];
  return `not on the graph: applies to ${scope ?? f.target}`;
}

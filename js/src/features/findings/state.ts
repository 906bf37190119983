// Where a doctor finding lives on the page: its node or box (Python writes a box as "call:<id>"), or,
// for a finding about the training loop rather than a tensor, the words for where it applies (the finding
// record's `scope`, from Python's registry of kinds: the page keeps no list of kinds). Pure.
import type { DoctorFinding } from "../../payload";

/** The node or call id `reveal` takes for a finding's `node` ("" when it has none). */
export function findingTarget(node: string): string {
  return node.startsWith("call:") ? node.slice("call:".length) : node;
}

/** For a finding with no node: "not on the graph: applies to the optimizer step" (its scope), or to its
 * target when its kind is about a tensor (an empty scope). */
export function appliesText(f: Pick<DoctorFinding, "scope" | "target" | "node">): string {
  if (f.node) return "";
  return `not on the graph: applies to ${f.scope || f.target}`;
}

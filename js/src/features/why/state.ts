// What the details panel shows for "Why?" on a leaf: a button until asked, "asking…" while the kernel
// works, then the doctor's answer (status, cause, evidence, fix) or why there is none. Pure: node tests
// check these rows.
import type { DetailRow, RowAction } from "../../panels/details";
import type { WhyAnswer, WhyReplyBody } from "../../payload";

export const ASKING = "asking…";
export const WHY_LABEL = "why";

/** A leaf's answer: the reply body, an error text (the request failed), or undefined while waiting. */
export type WhyState = WhyReplyBody | string | undefined;

const STATUS: Record<string, string> = {
  ok: "its gradient is fine",
  none: "no gradient (.grad is None)",
  zero: "its gradient is exactly zero",
  tiny: "its gradient is tiny",
  scaled: "its gradient is scaled",
};

/** The status in words, with the kind of cause when there is one: "no gradient (.grad is None) · detached". */
export function statusText(a: WhyAnswer): string {
  const words = STATUS[a.status] ?? a.status;
  return a.kind && a.status !== "ok" ? `${words} · ${a.kind}` : words;
}

/** Rows for a leaf: the "Why?" button (`ask`) until asked; then the answer's rows, each field that has
 *  text (the cause and the fix before the evidence: they are what a narrow panel must show), and a button
 *  to show the node the cause points at (`show`, when the answer names one), named by `place` (its op and
 *  module, never its id). */
export function whyRows(
  asked: boolean,
  state: WhyState,
  ask: () => void,
  show?: (node: string) => void,
  place: (node: string) => string = () => "the node the cause points at",
): DetailRow[] {
  if (!asked) {
    const button: RowAction = { label: "Why?", title: "Ask why this parameter's gradient is what it is (gv.why)", testid: "gradviz-why", run: ask };
    return [[WHY_LABEL, "", button]];
  }
  if (state === undefined) return [[WHY_LABEL, ASKING]];
  if (typeof state === "string") return [[WHY_LABEL, state]];
  const a = state.answer;
  if (!a) return [[WHY_LABEL, state.missing || "no answer"]];
  const rows: DetailRow[] = [[WHY_LABEL, statusText(a)]];
  for (const [label, text] of [["  cause", a.cause], ["  fix", a.fix], ["  evidence", a.evidence]] as const) if (text) rows.push([label, text]);
  if (a.node && show) {
    const node = a.node;
    rows.push(["  at", place(node), { label: "show", title: "Select the node the cause points at", testid: "gradviz-why-show", run: () => show(node) }]);
  }
  return rows;
}

/** The reply's body when it is a why answer for `node`, else the error text the panel shows. */
export function readReply(node: string, ok: boolean, body: unknown, error: string | undefined): WhyReplyBody | string {
  if (!ok) return `not answered: ${error ?? "no answer"}`;
  const b = body as Partial<WhyReplyBody> | undefined;
  if (!b || typeof b !== "object" || b.node !== node || !("answer" in b)) return "not answered: the reply was not a why answer";
  return { node, answer: b.answer ?? null, missing: typeof b.missing === "string" ? b.missing : "" };
}

// What-if's words for the shared mode controls (panels/mode.ts) and its verification banner:
// what PyTorch confirmed, contradicted, and could not check. Text only.
import type { Toggles, Verification } from "../../payload";
import type { Banner, ModeSpec } from "../../panels/mode";
import { sameToggles } from "./state";

export const HINT =
  "Click a tensor (edge) or an op: detach · a leaf: freeze (requires_grad=False) · " +
  "a closed box: detach its outputs, shift-click: freeze its parameters";

export const WHATIF_MODE: ModeSpec = {
  question: "whatif",
  button: {
    label: "✂ What-if",
    title: "What-if mode: click tensors, ops, leaves and boxes to detach / freeze them and see which leaves lose gradient",
    testid: "gradviz-whatif-toggle",
    className: "gradviz-whatif-toggle",
  },
  hint: { text: HINT, testid: "gradviz-whatif-hint" },
  summary: { className: "gradviz-wi-summary", testid: "gradviz-whatif-summary" },
  clear: { label: "Reset", title: "Clear every detach and freeze", testid: "gradviz-whatif-reset" },
  verify: { title: "Re-run the model's forward and backward in PyTorch with these toggles", testid: "gradviz-verify" },
  banner: { testid: "gradviz-verified", stale: "Stale: the toggles changed since this re-run." },
  panel: { className: "gradviz-whatif", testid: "gradviz-whatif" },
};

/** The banner for the `verified` trait (null when there is none), stale when `current` differs from the
 *  toggles it ran with. */
export function whatIfBanner(v: Partial<Verification> | null | undefined, current: Toggles): Banner | null {
  if (!v || !v.toggles) return null;
  return { lines: verificationLines(v), level: verificationLevel(v), stale: !sameToggles(normalize(v.toggles), current) };
}

/** ok (green): everything predicted was checked and PyTorch agrees; partial (amber): what was checked
 *  agrees, but some toggle or leaf could not be checked; bad (red): PyTorch disagrees, or the re-run failed. */
export function verificationLevel(v: Partial<Verification>): "ok" | "partial" | "bad" {
  if (v.error || !v.agree) return "bad";
  return isComplete(v) ? "ok" : "partial";
}

function isComplete(v: Partial<Verification>): boolean {
  const unchecked = (v.predicted_lost ?? []).filter((x) => !(v.checked_lost ?? v.predicted_lost ?? []).includes(x));
  return (v.complete ?? true) && !(v.unverifiable ?? []).length && !unchecked.length;
}

/** The banner's lines ([class, text]): what PyTorch confirmed, what it contradicted, and what was not
 *  checked and why (the Python side names every toggle by module, op and tensor). */
export function verificationLines(v: Partial<Verification>): [string, string][] {
  if (v.error) return [["", `Verification failed: ${v.error}`]];
  const predicted = v.predicted_lost ?? [];
  const checked = v.checked_lost ?? predicted;
  const actual = new Set(v.actual_lost ?? []);
  const lines: [string, string][] = [];
  const leaves = (n: number): string => (n === 1 ? "1 leaf loses" : `${n} leaves lose`);
  if (!v.agree) {
    const onlyPredicted = checked.filter((x) => !actual.has(x));
    const onlyActual = [...actual].filter((x) => !checked.includes(x));
    lines.push(["", "Prediction and PyTorch disagree: " + [
      onlyPredicted.length ? `predicted to lose gradient but got one: ${onlyPredicted.join(", ")}` : "",
      onlyActual.length ? `got no gradient though predicted to: ${onlyActual.join(", ")}` : "",
    ].filter(Boolean).join("; ") + "."]);
  } else if (isComplete(v)) {
    lines.push(["", `Verified by re-running PyTorch: ${leaves(predicted.length)} gradient, as predicted${predicted.length ? ` (${list(predicted)})` : ""}.`]);
  } else {
    lines.push(["", `Partly verified by re-running PyTorch: ` + (checked.length
      ? `${list(checked)} ${checked.length === 1 ? "loses" : "lose"} gradient, as predicted (${checked.length} of ${predicted.length} predicted leaves checked).`
      : `with the toggles it could replay, no leaf loses gradient, as predicted (0 of ${predicted.length} predicted ${predicted.length === 1 ? "leaf" : "leaves"} checked).`)]);
  }
  const unchecked = predicted.filter((x) => !checked.includes(x));
  const reasons = v.unverifiable ?? [];
  if (unchecked.length) lines.push(["", `Not checked: ${list(unchecked)} (predicted to lose gradient)${reasons.length ? ", because:" : "."}`]);
  else if (reasons.length) lines.push(["", "Not checked:"]);
  for (const why of reasons) lines.push(["gradviz-verified-why", `• ${why}.`]);
  // Verify re-runs backward and compares `.grad is None`: a wrong backward rule still "agrees".
  lines.push(["gradviz-verified-note", "Verify checks which leaves get a gradient, not the gradients' values (gv.gradcheck checks those)."]);
  return lines;
}

/** "a, b, c and 4 more" (a banner, not a report: the full list is in Python's `verified`). */
function list(names: string[], max = 6): string {
  return names.length > max ? `${names.slice(0, max).join(", ")} and ${names.length - max} more` : names.join(", ");
}

function normalize(t: Partial<Toggles>): Toggles {
  return { detach: Array.isArray(t.detach) ? t.detach : [], freeze: Array.isArray(t.freeze) ? t.freeze : [] };
}

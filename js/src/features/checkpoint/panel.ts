// Checkpointing's words for the shared mode controls (panels/mode.ts) and its re-run banner. Text only.
import type { CheckpointVerification } from "../../payload";
import type { Banner, ModeSpec } from "../../panels/mode";
import { formatBytes, sameMarks, type Marks } from "./state";

export const CHECKPOINT_HINT =
  "Click a module box (or shift-click it in any mode): checkpoint non-reentrant → reentrant → off";

/** The mode button pressed (teal: the non-reentrant border colour). */
export const CHECKPOINT_CSS = `
.gradviz-toolbar button.gradviz-checkpoint-toggle[aria-pressed="true"] {
  background: #00796b; color: #fff; border-color: #00796b; font-weight: 600;
}
`;

export const CHECKPOINT_MODE: ModeSpec = {
  question: "checkpoint",
  button: {
    label: "⟲ Checkpoint",
    title: "Checkpoint mode: click module boxes to checkpoint them and see memory saved, compute paid and lost gradients",
    testid: "gradviz-checkpoint-toggle",
    className: "gradviz-checkpoint-toggle",
  },
  hint: { text: CHECKPOINT_HINT, testid: "gradviz-checkpoint-hint" },
  summary: { className: "gradviz-ck-summary", testid: "gradviz-checkpoint-summary" },
  clear: { label: "Clear", title: "Unmark every box", testid: "gradviz-checkpoint-clear" },
  verify: { title: "Re-run forward and backward with these calls really checkpointed", testid: "gradviz-checkpoint-verify" },
  banner: { testid: "gradviz-checkpoint-verified", stale: "Stale: the marks changed since this re-run." },
  panel: { className: "gradviz-whatif gradviz-checkpoint", testid: "gradviz-checkpoint" },
};

/** The banner for the `checkpoint_verified` trait (null when there is none), stale when the marks changed. */
export function checkpointBanner(v: Partial<CheckpointVerification> | null | undefined, current: Marks): Banner | null {
  if (!v || !v.marks) return null;
  const level = v.error || !v.agree ? "bad" : (v.unchecked ?? []).length ? "partial" : "ok";
  return { lines: checkpointLines(v), level, stale: !sameMarks(v.marks, current) };
}

/** The banner's lines ([class, text]): what the re-run measured against what was predicted. */
export function checkpointLines(v: Partial<CheckpointVerification>): [string, string][] {
  if (v.error) return [["", `Checkpointed re-run failed: ${v.error}`]];
  const lines: [string, string][] = [];
  const predicted = v.predicted_bytes ?? 0;
  const measured = v.measured_bytes ?? 0;
  const off = measured ? (100 * (predicted - measured)) / measured : 0;
  lines.push([
    "",
    (v.agree ? "Verified by a checkpointed re-run in PyTorch: " : "Prediction and PyTorch disagree: ") +
      `saved for backward ${formatBytes(predicted)} predicted, ${formatBytes(measured)} measured (${off >= 0 ? "+" : ""}${off.toFixed(1)}%); ` +
      `recomputed FLOPs ${(v.predicted_recomputed_flops ?? 0).toLocaleString("en")} predicted, ${(v.measured_recomputed_flops ?? 0).toLocaleString("en")} measured; ` +
      `leaves losing .grad: ${(v.predicted_lost ?? []).length} predicted, ${(v.actual_lost ?? []).length} in PyTorch.`,
  ]);
  for (const c of v.checked ?? []) lines.push(["gradviz-verified-why", `• checked: ${c}.`]);
  for (const u of v.unchecked ?? []) lines.push(["gradviz-verified-why", `• not checked: ${u}.`]);
  return lines;
}

// The checkpoint bar (summary, hint, Clear, Verify) and the re-run banner. Text only.
import type { CheckpointVerification } from "../../payload";
import { h, setText } from "../../panels/dom";
import { formatBytes, sameMarks, type Marks } from "./state";

export const CHECKPOINT_HINT =
  "Click a module box (or shift-click it in any mode): checkpoint non-reentrant → reentrant → off";

/** The mode button pressed (teal: the non-reentrant border colour). */
export const CHECKPOINT_CSS = `
.gradviz-toolbar button.gradviz-checkpoint-toggle[aria-pressed="true"] {
  background: #00796b; color: #fff; border-color: #00796b; font-weight: 600;
}
`;

export interface CheckpointPanel {
  element: HTMLElement;
  update(opts: { visible: boolean; mode: boolean; summary: string; bad: boolean; marked: boolean; canVerify: boolean }): void;
  showVerification(v: Partial<CheckpointVerification> | null | undefined, current: Marks): void;
}

export function createCheckpointPanel(actions: { clear(): void; verify(): void }): CheckpointPanel {
  const summary = h("span", { class: "gradviz-ck-summary", "data-testid": "gradviz-checkpoint-summary", role: "status" });
  const hint = h("span", { class: "gradviz-wi-hint", "data-testid": "gradviz-checkpoint-hint" }, CHECKPOINT_HINT);
  const clear = h("button", { type: "button", "data-testid": "gradviz-checkpoint-clear", title: "Unmark every box" }, "Clear");
  clear.addEventListener("click", actions.clear);
  const verify = h(
    "button",
    { type: "button", "data-testid": "gradviz-checkpoint-verify", title: "Re-run forward and backward with these calls really checkpointed" },
    "Verify (re-run)",
  );
  verify.addEventListener("click", actions.verify);
  const bar = h("div", { class: "gradviz-wi-bar" }, summary, hint, h("span", { class: "gradviz-wi-buttons" }, verify, clear));
  const banner = h("div", { class: "gradviz-verified", "data-testid": "gradviz-checkpoint-verified", role: "status" });
  banner.hidden = true;
  const element = h("div", { class: "gradviz-whatif gradviz-checkpoint", "data-testid": "gradviz-checkpoint" }, bar, banner);
  element.hidden = true;
  let barVisible = false;
  const refresh = (): void => {
    element.hidden = !barVisible && banner.hidden;
    bar.hidden = !barVisible;
  };
  return {
    element,
    update({ visible, mode, summary: text, bad, marked, canVerify }) {
      barVisible = visible;
      setText(summary, text);
      summary.classList.toggle("gradviz-wi-bad", bad);
      hint.hidden = !mode || marked;
      clear.disabled = !marked;
      verify.hidden = !canVerify || !marked;
      refresh();
    },
    showVerification(v, current) {
      banner.replaceChildren();
      banner.className = "gradviz-verified";
      if (!v || !v.marks) {
        banner.hidden = true;
        refresh();
        return;
      }
      banner.append(...checkpointLines(v).map(([cls, l]) => h("div", cls ? { class: cls } : {}, l)));
      banner.classList.add(`gradviz-verified-${v.error || !v.agree ? "bad" : (v.unchecked ?? []).length ? "partial" : "ok"}`);
      if (!sameMarks(v.marks, current)) {
        banner.classList.add("gradviz-verified-stale");
        banner.append(h("div", {}, "Stale: the marks changed since this re-run."));
      }
      banner.hidden = false;
      refresh();
    },
  };
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

/** The toolbar's checkpoint mode toggle (`aria-pressed` says the mode). */
export function createCheckpointButton(onClick: () => void): HTMLButtonElement {
  const button = h(
    "button",
    {
      type: "button",
      class: "gradviz-checkpoint-toggle",
      "data-testid": "gradviz-checkpoint-toggle",
      "aria-pressed": "false",
      title: "Checkpoint mode: click module boxes to checkpoint them and see memory saved, compute paid and lost gradients",
    },
    "⟲ Checkpoint",
  );
  button.addEventListener("click", onClick);
  return button;
}

// The what-if bar (summary line, hint, Reset, Verify) and the verification banner. Text only.
import type { Toggles, Verification } from "../../payload";
import { sameToggles } from "./state";
import { h, setText } from "../../panels/dom";

export interface WhatIfActions {
  reset(): void;
  verify(): void;
}

export interface WhatIfPanel {
  element: HTMLElement;
  /** `visible`: what-if mode is on or something is toggled. */
  update(opts: { visible: boolean; mode: boolean; summary: string; toggled: boolean; canVerify: boolean }): void;
  showVerification(v: Partial<Verification> | null | undefined, current: Toggles): void;
}

/** The amber "partly verified" banner (green and red are in styles.css). Translucent amber on the
 *  theme's own text colour, so it reads on light and dark backgrounds alike. */
export const BANNER_CSS = `
.gradviz-root .gradviz-verified-partial {
  background: rgba(255, 179, 0, 0.2); color: var(--gv-fg); border-left: 4px solid #f9a825;
}
.gradviz-root .gradviz-verified-partial > div:first-child { font-weight: 600; }
.gradviz-root .gradviz-verified-why { padding-left: 1.1em; text-indent: -0.7em; }
.gradviz-root .gradviz-verified-note { color: inherit; opacity: 0.75; font-size: 12px; font-weight: 400; }
`;

export const HINT =
  "Click a tensor (edge) or an op: detach · a leaf: freeze (requires_grad=False) · " +
  "a closed box: detach its outputs, shift-click: freeze its parameters";

export function createWhatIfPanel(actions: WhatIfActions): WhatIfPanel {
  const summary = h("span", { class: "gradviz-wi-summary", "data-testid": "gradviz-whatif-summary", role: "status" });
  const hint = h("span", { class: "gradviz-wi-hint", "data-testid": "gradviz-whatif-hint" }, HINT);
  const reset = h("button", { type: "button", "data-testid": "gradviz-whatif-reset", title: "Clear every detach and freeze" }, "Reset");
  reset.addEventListener("click", actions.reset);
  const verify = h(
    "button",
    { type: "button", "data-testid": "gradviz-verify", title: "Re-run the model's forward and backward in PyTorch with these toggles" },
    "Verify (re-run)",
  );
  verify.addEventListener("click", actions.verify);
  const bar = h("div", { class: "gradviz-wi-bar" }, summary, hint, h("span", { class: "gradviz-wi-buttons" }, verify, reset));
  const banner = h("div", { class: "gradviz-verified", "data-testid": "gradviz-verified", role: "status" });
  banner.hidden = true;
  const element = h("div", { class: "gradviz-whatif", "data-testid": "gradviz-whatif" }, bar, banner);
  element.hidden = true;
  let barVisible = false;
  const refresh = (): void => {
    element.hidden = !barVisible && banner.hidden;
    bar.hidden = !barVisible;
  };
  return {
    element,
    update({ visible, mode, summary: text, toggled, canVerify }) {
      barVisible = visible;
      setText(summary, text);
      summary.classList.toggle("gradviz-wi-bad", /^[1-9]/.test(text));
      hint.hidden = !mode || toggled;
      reset.disabled = !toggled;
      verify.hidden = !canVerify;
      refresh();
    },
    showVerification(v, current) {
      banner.replaceChildren();
      banner.className = "gradviz-verified";
      if (!v || !v.toggles) {
        banner.hidden = true;
        refresh();
        return;
      }
      const stale = !sameToggles(normalize(v.toggles), current);
      banner.append(...verificationLines(v).map(([cls, l]) => h("div", cls ? { class: cls } : {}, l)));
      banner.classList.add(`gradviz-verified-${verificationLevel(v)}`);
      if (stale) {
        banner.classList.add("gradviz-verified-stale");
        banner.append(h("div", {}, "Stale: the toggles changed since this re-run."));
      }
      banner.hidden = false;
      refresh();
    },
  };
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

/** The toolbar's what-if mode toggle (`aria-pressed` says the mode). */
export function createModeButton(onClick: () => void): HTMLButtonElement {
  const button = h(
    "button",
    {
      type: "button",
      class: "gradviz-whatif-toggle",
      "data-testid": "gradviz-whatif-toggle",
      "aria-pressed": "false",
      title: "What-if mode: click tensors, ops, leaves and boxes to detach / freeze them and see which leaves lose gradient",
    },
    "✂ What-if",
  );
  button.addEventListener("click", onClick);
  return button;
}

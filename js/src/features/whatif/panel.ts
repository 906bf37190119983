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
      const lines: string[] = [];
      if (v.error) {
        banner.classList.add("gradviz-verified-bad");
        lines.push(`Verification failed: ${v.error}`);
      } else if (v.agree) {
        banner.classList.add("gradviz-verified-ok");
        const n = (v.actual_lost ?? []).length;
        lines.push(`Verified by re-running PyTorch: ${n} ${n === 1 ? "leaf loses" : "leaves lose"} gradient, as predicted.`);
      } else {
        banner.classList.add("gradviz-verified-bad");
        const predicted = new Set(v.predicted_lost ?? []);
        const actual = new Set(v.actual_lost ?? []);
        const onlyPredicted = [...predicted].filter((x) => !actual.has(x));
        const onlyActual = [...actual].filter((x) => !predicted.has(x));
        lines.push("Prediction and PyTorch disagree: " + [
          onlyPredicted.length ? `predicted to lose gradient but got one: ${onlyPredicted.join(", ")}` : "",
          onlyActual.length ? `got no gradient though predicted to: ${onlyActual.join(", ")}` : "",
        ].filter(Boolean).join("; ") + ".");
      }
      if (v.unverifiable && v.unverifiable.length) lines.push(`Could not apply in the re-run: ${v.unverifiable.join(", ")}.`);
      // Verify re-runs backward and compares `.grad is None`: a wrong backward rule still "agrees".
      if (!v.error) lines.push("Checked: which leaves get a gradient, not the gradients' values (gv.gradcheck checks those).");
      if (stale) {
        banner.classList.add("gradviz-verified-stale");
        lines.push("Stale: the toggles changed since this re-run.");
      }
      banner.append(...lines.map((l) => h("div", {}, l)));
      banner.hidden = false;
      refresh();
    },
  };
}

function normalize(t: Partial<Toggles>): Toggles {
  return { detach: Array.isArray(t.detach) ? t.detach : [], freeze: Array.isArray(t.freeze) ? t.freeze : [] };
}

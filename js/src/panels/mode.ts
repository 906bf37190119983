// One predict-and-verify mode's controls, shared by every question (what-if, checkpointing, ...): the
// toolbar's mode button, the bar (summary, hint, Verify, Clear) and the verification banner. A question
// gives its words and test ids (`ModeSpec`) and, for the banner, its lines and level; the verify request
// names the question (Python's gradviz_nb/widgets/questions.py dispatches it); core/mode.ts runs it. Text only.
import { h, setText } from "./dom";

/** The words and test ids of one question's controls. */
export interface ModeSpec {
  /** The question's name, as the verify request sends it ({ question }). */
  question: string;
  button: { label: string; title: string; testid: string; className: string };
  hint: { text: string; testid: string };
  summary: { className: string; testid: string };
  clear: { label: string; title: string; testid: string };
  verify: { title: string; testid: string };
  banner: { testid: string; stale: string };
  /** The panel's own classes and test id. */
  panel: { className: string; testid: string };
}

/** A banner line: [class ("" for none), text]. */
export type BannerLine = [string, string];

/** What the verification banner shows: ok (green), partial (amber), bad (red); stale when the marks changed
 *  since the re-run. */
export interface Banner {
  lines: BannerLine[];
  level: "ok" | "partial" | "bad";
  stale: boolean;
}

export interface ModeState {
  /** The bar shows (the mode is on, or something is marked). */
  visible: boolean;
  mode: boolean;
  summary: string;
  /** The verdict a user came for ("12 leaves lose gradient"), shown before the summary in the bad colour;
   *  "" or absent when there is none. */
  verdict?: string;
  /** The summary is a warning (something loses its gradient). */
  bad: boolean;
  marked: boolean;
  canVerify: boolean;
}

export interface ModePanel {
  /** The bar and the banner (for the status line). */
  element: HTMLElement;
  /** The toolbar's mode toggle (`aria-pressed` says the mode). */
  button: HTMLButtonElement;
  setMode(on: boolean): void;
  update(state: ModeState): void;
  /** null: no verification to show. */
  showBanner(banner: Banner | null): void;
}

export interface ModeActions {
  toggle(): void;
  clear(): void;
  verify(): void;
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

export function createModePanel(spec: ModeSpec, actions: ModeActions): ModePanel {
  const button = h(
    "button",
    { type: "button", class: spec.button.className, "data-testid": spec.button.testid, "aria-pressed": "false", title: spec.button.title },
    spec.button.label,
  );
  button.addEventListener("click", actions.toggle);
  const verdict = h("span", { class: "gradviz-wi-verdict gradviz-wi-bad", "data-testid": `${spec.summary.testid}-verdict` });
  verdict.hidden = true;
  const summary = h("span", { class: spec.summary.className, "data-testid": spec.summary.testid, role: "status" }, verdict);
  const summaryText = h("span", {});
  summary.append(summaryText);
  const hint = h("span", { class: "gradviz-wi-hint", "data-testid": spec.hint.testid }, spec.hint.text);
  const clear = h("button", { type: "button", "data-testid": spec.clear.testid, title: spec.clear.title }, spec.clear.label);
  clear.addEventListener("click", actions.clear);
  const verify = h("button", { type: "button", "data-testid": spec.verify.testid, title: spec.verify.title }, "Verify (re-run)");
  verify.addEventListener("click", actions.verify);
  const bar = h("div", { class: "gradviz-wi-bar" }, summary, hint, h("span", { class: "gradviz-wi-buttons" }, verify, clear));
  const banner = h("div", { class: "gradviz-verified", "data-testid": spec.banner.testid, role: "status" });
  banner.hidden = true;
  const element = h("div", { class: spec.panel.className, "data-testid": spec.panel.testid }, bar, banner);
  element.hidden = true;
  let barVisible = false;
  const refresh = (): void => {
    element.hidden = !barVisible && banner.hidden;
    bar.hidden = !barVisible;
  };
  return {
    element,
    button,
    setMode(on) {
      button.setAttribute("aria-pressed", String(on));
    },
    update({ visible, mode, summary: text, verdict: lead, bad, marked, canVerify }) {
      barVisible = visible;
      setText(verdict, lead ?? "");
      verdict.hidden = !lead;
      setText(summaryText, lead && text ? ` · ${text}` : text);
      summary.classList.toggle("gradviz-wi-bad", bad);
      hint.hidden = !mode || marked;
      clear.disabled = !marked;
      verify.hidden = !canVerify;
      refresh();
    },
    showBanner(b) {
      banner.replaceChildren();
      banner.className = "gradviz-verified";
      banner.hidden = !b;
      if (b) {
        // A re-run of earlier marks says so first, greyed, without its verdict's colour: its "disagree" is
        // about marks that are no longer there, and must not read as the answer for the current ones.
        if (b.stale) banner.append(h("div", { class: "gradviz-verified-stale-note" }, spec.banner.stale));
        banner.append(...b.lines.map(([cls, l]) => h("div", cls ? { class: cls } : {}, l)));
        banner.classList.add(b.stale ? "gradviz-verified-stale" : `gradviz-verified-${b.level}`);
        banner.setAttribute("data-level", b.level);
      }
      refresh();
    },
  };
}

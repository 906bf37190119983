// The backward stepper's controls (step, back, play/pause, speed, scrubber, pass, by-module), its
// position line, and the details of the current step. Text only, never HTML.
import type { StepDetails } from "./state";
import type { RunRule } from "./breakpoints";
import { h, setText } from "../../panels/dom";

export interface StepperActions {
  /** Go to cursor (absolute). */
  seek(cursor: number): void;
  step(dir: 1 | -1): void;
  togglePlay(): void;
  setSpeed(stepsPerSecond: number): void;
  setPass(pass: number): void;
  setByModule(on: boolean): void;
  /** Go to the first step that sent a NaN/Inf gradient. */
  firstNonfinite(): void;
  /** "Run to": go where a breakpoint rule stops ("above" with its threshold). */
  runTo(rule: RunRule, threshold: number): void;
}

export interface StepperState {
  cursor: number;
  total: number;
  passes: number;
  pass: number;
  playing: boolean;
  position: string;
  pending: string[];
  boxes: boolean;
  /** Global index of the first NaN/Inf step (-1: every gradient finite; the button hides). */
  firstNonfinite: number;
  /** The last "Run to" stop's rule text with its numbers ("" before any). */
  runText: string;
  /** What the box and leaf rules of "Run to" would run to, by name ("": nothing applicable chosen). */
  targets: { box: string; leaf: string };
}

export interface StepperPanel {
  element: HTMLElement;
  details: HTMLElement;
  update(s: StepperState): void;
  showDetails(d: StepDetails | null): void;
  setVisible(on: boolean): void;
}

export const SPEEDS = [0.5, 1, 2, 4, 8];

/** The "Run to" menu: rule -> label (the box and leaf rules name what the user chose last, see
 *  `runOptionText`). */
export const RUN_LABELS: [RunRule, string][] = [
  ["nonfinite", "first NaN/Inf (where born)"],
  ["zero", "first exact zero sent"],
  ["above", "first norm above…"],
  ["jump", "largest jump in norm"],
  ["module", "first step in a box"],
  ["leaf", "first delivery into a leaf"],
];

/** The menu's text for the box and leaf rules: what they will run to, or how to choose it (then the
 *  option is disabled). */
export function runOptionText(rule: "module" | "leaf", target: string): { text: string; disabled: boolean } {
  if (rule === "module") return target ? { text: `first step in box ${target}`, disabled: false } : { text: "first step in a box (click a box first)", disabled: true };
  return target ? { text: `first delivery into ${target}`, disabled: false } : { text: "first delivery into a leaf (click a leaf first)", disabled: true };
}

// Inline SVG icons: the font of a stock headless Chromium (and some machines) lacks ⏸ and ⇤, which
// then show as "▯"; a path needs no font. 16x16 view box, drawn in the button's text colour.
const ICONS = {
  start: "M3 3h2v10H3zM14 3v10L6 8z",
  back: "M12 3v10L4 8z",
  play: "M4 3v10l8-5z",
  pause: "M4 3h3v10H4zM9 3h3v10H9z",
  forward: "M3 3v10l8-5zM11 3h2v10h-2z",
} as const;
export type IconName = keyof typeof ICONS;

const SVG = "http://www.w3.org/2000/svg";

/** A small inline SVG icon (aria-hidden: the button's title / text names the action). */
export function icon(name: IconName): SVGSVGElement {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("width", "12");
  svg.setAttribute("height", "12");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "gradviz-icon");
  svg.dataset.icon = name;
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("d", ICONS[name]);
  path.setAttribute("fill", "currentColor");
  svg.append(path);
  return svg;
}

/** Put an icon and an optional word into a button. */
function setIcon(b: HTMLButtonElement, name: IconName, word: string): void {
  b.replaceChildren(icon(name), ...(word ? [h("span", {}, word)] : []));
}

/** The "Run to" menu and the threshold box the "above" rule reads (shown only for it). */
function runToControls(actions: StepperActions): [HTMLSelectElement, HTMLInputElement] {
  const menu = h("select", { "data-testid": "gradviz-step-runto", title: "Run to: jump to where a breakpoint rule stops" });
  menu.append(h("option", { value: "" }, "Run to…"), ...RUN_LABELS.map(([r, label]) => h("option", { value: r }, label)));
  const threshold = h("input", { type: "number", value: "1", step: "any", min: "0", "data-testid": "gradviz-step-threshold", title: "Gradient norm to stop above", "aria-label": "Norm threshold" });
  threshold.style.width = "6em";
  threshold.hidden = true;
  const run = (): void => {
    const rule = menu.value as RunRule | "";
    threshold.hidden = rule !== "above";
    if (rule) actions.runTo(rule, Number(threshold.value));
    // Back to "Run to…" (the line under the bar says where it went): choosing the same rule again, after a
    // new click, runs again. "above" stays chosen while its threshold box is out.
    if (rule !== "above") menu.value = "";
  };
  menu.addEventListener("change", run);
  threshold.addEventListener("change", run);
  return [menu, threshold];
}

export function createStepper(actions: StepperActions): StepperPanel {
  const button = (label: string, testid: string, title: string, onClick: () => void): HTMLButtonElement => {
    const b = h("button", { type: "button", "data-testid": testid, title, "aria-label": title }, label);
    b.addEventListener("click", onClick);
    return b;
  };
  const iconButton = (name: IconName, word: string, testid: string, title: string, onClick: () => void): HTMLButtonElement => {
    const b = button("", testid, title, onClick);
    b.classList.add("gradviz-icon-button");
    // Inline, not in styles.css: icon and word side by side, centred.
    Object.assign(b.style, { display: "inline-flex", alignItems: "center", gap: "4px" });
    setIcon(b, name, word);
    return b;
  };
  const start = iconButton("start", "", "gradviz-step-start", "Back to before the backward pass", () => actions.seek(-1));
  const back = iconButton("back", "", "gradviz-step-back", "Step back (←)", () => actions.step(-1));
  const play = iconButton("play", "Play", "gradviz-step-play", "Play / pause (Space)", () => actions.togglePlay());
  const fwd = iconButton("forward", "Step", "gradviz-step-forward", "Step: run the next node (→)", () => actions.step(1));
  const speed = h("select", { "data-testid": "gradviz-step-speed", title: "Playback speed (steps per second)" });
  for (const s of SPEEDS) speed.append(h("option", { value: String(s) }, `${s}/s`));
  speed.value = "2";
  speed.addEventListener("change", () => actions.setSpeed(Number(speed.value)));
  const scrubber = h("input", {
    type: "range",
    min: "-1",
    max: "0",
    step: "1",
    value: "-1",
    class: "gradviz-step-scrubber",
    "data-testid": "gradviz-step-scrubber",
    "aria-label": "Backward step",
  });
  scrubber.addEventListener("input", () => actions.seek(Number(scrubber.value)));
  const pass = h("select", { "data-testid": "gradviz-step-pass", title: "Backward pass (recorded passes accumulate into .grad)" });
  pass.addEventListener("change", () => actions.setPass(Number(pass.value)));
  const byModule = h("input", { type: "checkbox", "data-testid": "gradviz-step-bymodule" });
  byModule.addEventListener("change", () => actions.setByModule(byModule.checked));
  const byModuleLabel = h("label", { class: "gradviz-step-check", title: "Step from one module box (or node) on screen to the next" }, byModule, " by module");
  const position = h("span", { class: "gradviz-step-position", "data-testid": "gradviz-step-position", role: "status" });
  const pending = h("span", { class: "gradviz-step-pending", "data-testid": "gradviz-step-pending" });
  const nanJump = button("⚠ first NaN/Inf", "gradviz-step-nonfinite", "Go to the first node that sent a NaN or Inf gradient", () => actions.firstNonfinite());
  nanJump.classList.add("gradviz-step-nonfinite");
  nanJump.hidden = true;
  const [runMenu, threshold] = runToControls(actions);
  const runText = h("div", { class: "gradviz-step-runtext", "data-testid": "gradviz-step-runtext", role: "status" });
  const controls = h("div", { class: "gradviz-step-controls" }, start, back, play, fwd, speed, scrubber, pass, byModuleLabel, nanJump, runMenu, threshold);
  const info = h("div", { class: "gradviz-step-info" }, position, pending, runText);
  const element = h("div", { class: "gradviz-stepper", "data-testid": "gradviz-stepper" }, controls, info);
  element.hidden = true;

  const title = h("h3", { "data-testid": "gradviz-step-title" });
  const subtitle = h("div", { class: "gradviz-step-sub", "data-testid": "gradviz-step-subtitle" });
  const explain = h("div", { class: "gradviz-explain", "data-testid": "gradviz-step-explain" });
  const body = h("div", { class: "gradviz-step-sections" });
  const details = h("aside", { class: "gradviz-step-details", "data-testid": "gradviz-step-details" }, title, subtitle, explain, body);
  details.hidden = true;

  let passes = -1;
  return {
    element,
    details,
    update(s) {
      scrubber.max = String(Math.max(-1, s.total - 1));
      scrubber.value = String(s.cursor);
      back.disabled = s.cursor < 0;
      start.disabled = s.cursor < 0;
      fwd.disabled = s.cursor >= s.total - 1;
      if (play.dataset.playing !== String(s.playing)) {
        play.dataset.playing = String(s.playing);
        setIcon(play, s.playing ? "pause" : "play", s.playing ? "Pause" : "Play");
      }
      play.setAttribute("aria-pressed", String(s.playing));
      if (passes !== s.passes) {
        passes = s.passes;
        pass.replaceChildren(...Array.from({ length: s.passes }, (_, i) => h("option", { value: String(i) }, `pass ${i + 1} of ${s.passes}`)));
      }
      pass.hidden = s.passes <= 1;
      pass.value = String(s.pass);
      byModuleLabel.hidden = !s.boxes;
      nanJump.hidden = s.firstNonfinite < 0;
      nanJump.disabled = s.cursor === s.firstNonfinite;
      setText(position, s.position);
      setText(pending, s.pending.join(" · "));
      setText(runText, s.runText);
      runText.hidden = !s.runText;
      for (const rule of ["module", "leaf"] as const) {
        const option = runMenu.querySelector<HTMLOptionElement>(`option[value="${rule}"]`);
        if (!option) continue;
        const o = runOptionText(rule, rule === "module" ? s.targets.box : s.targets.leaf);
        setText(option, o.text);
        option.disabled = o.disabled;
      }
    },
    showDetails(d) {
      if (!d) {
        details.hidden = true;
        return;
      }
      setText(title, d.title);
      setText(subtitle, d.subtitle);
      explain.replaceChildren(...d.explain.map((line) => h("div", {}, line)));
      explain.hidden = d.explain.length === 0;
      body.replaceChildren(
        ...d.sections.map((sec) =>
          h(
            "section",
            { class: sec.warn ? "gradviz-warn" : "" },
            h("h4", {}, sec.heading),
            h("dl", {}, ...sec.rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
          ),
        ),
      );
      details.hidden = false;
    },
    setVisible(on) {
      element.hidden = !on;
      if (!on) details.hidden = true;
    },
  };
}

// A predict-and-verify mode on the page, shared by every question: the mode's on/off state (its toolbar
// button, `data-<question>-mode` on the root), the timing of a user's edit (click to styles applied,
// `data-<question>-ms`), the controls (panels/mode.ts) placed in the toolbar and the status line, and the one
// verify request, which names the question. A question's feature keeps its marks, prediction and drawing.
import type { Core } from "./context";
import type { Slots } from "./feature";
import { RANK } from "../panels/status";
import { createModePanel, type Banner, type ModeSpec, type ModeState } from "../panels/mode";

export interface Mode {
  /** Whether the mode is on (clicks mark). */
  readonly on: boolean;
  set(on: boolean): void;
  /** Run a user's edit (a click, Clear) and time it, click to styles applied. */
  edit(change: () => void): void;
  /** Milliseconds of the last timed edit. */
  readonly lastMs: number;
  /** Show the bar and the banner for the current marks. */
  show(state: Omit<ModeState, "mode">, banner: Banner | null): void;
  /** Hide the mode's button (the graph cannot answer the question). */
  hidden(hide: boolean): void;
}

export interface ModeHandlers {
  /** Clear every mark (a user edit: it is timed). */
  clear(): void;
  /** The mode was switched (repaint, and whatever else the question does). */
  switched(on: boolean): void;
}

/** Ask Python to verify a question by a sandboxed re-run; the result arrives in the question's trait. */
export function requestVerify(core: Core, question: string): void {
  core.messenger.request("verify", { question });
}

export function createMode(core: Core, slots: Slots, spec: ModeSpec, handlers: ModeHandlers): Mode {
  let on = false;
  let lastMs = 0;
  const mode: Mode = {
    get on() {
      return on;
    },
    get lastMs() {
      return lastMs;
    },
    set(next) {
      on = next;
      core.root.dataset[`${spec.question}Mode`] = String(next);
      panel.setMode(next);
      handlers.switched(next);
    },
    edit(change) {
      const started = performance.now();
      change();
      lastMs = performance.now() - started;
      core.root.dataset[`${spec.question}Ms`] = lastMs.toFixed(1);
    },
    show(state, banner) {
      panel.update({ ...state, mode: on });
      panel.showBanner(banner);
    },
    hidden(hide) {
      panel.button.hidden = hide;
    },
  };
  const panel = createModePanel(spec, {
    toggle: () => mode.set(!on),
    clear: () => mode.edit(handlers.clear),
    verify: () => requestVerify(core, spec.question),
  });
  core.toolbar.status.add(panel.element, RANK.headline); // its bar and banner share the status line
  slots.tools.append(panel.button);
  return mode;
}

// What-if mode: a toggle recomputes the answer (lost leaves, pruned nodes, runs), then restyles what
// is drawn (no re-layout). The toggles live in the `toggles` trait so Python can read and set them;
// Verify asks Python to re-run the model (`verified`, `can_verify`).
import type { StylesheetJson } from "cytoscape";
import type { Toggles, WhatIfAnswer } from "../../payload";
import { nodeKey } from "../../state/quotient";
import { readable, type Theme } from "../../view/theme";
import type { Core, FeatureFactory } from "../../core/context";
import type { Feature } from "../../core/feature";
import { repaint } from "../../core/paint";
import { setSelected } from "../../core/selection";
import { decorate, type Decorations } from "./decorate";
import { BANNER_CSS, createModeButton, createWhatIfPanel } from "./panel";
import { RANK } from "../../panels/status";
import {
  answerCopy,
  clickToggles,
  EMPTY_TOGGLES,
  evaluate,
  normalizeToggles,
  sameToggles,
  summaryText,
  tensorsOfEdges,
  toggleTensors,
  type WhatIfState,
} from "./state";

export interface WhatIfHooks {
  /** The current what-if answer (for the current `toggles`). */
  whatIf(): WhatIfAnswer;
  whatIfMode(): boolean;
  setWhatIfMode(on: boolean): void;
  /** Milliseconds from the last user toggle to its styles applied (what-if recomputed + restyled). */
  lastWhatIfMs(): number;
}

export const whatIf: FeatureFactory<WhatIfHooks> = (core: Core, slots): Feature<WhatIfHooks> => {
  const wi = {
    toggles: EMPTY_TOGGLES,
    /** The answer for `toggles` (null: recompute before use). */
    state: null as WhatIfState | null,
    mode: false,
    lastMs: 0,
    /** Classes and labels for what is drawn (null: recompute at the next paint). */
    deco: null as Decorations | null,
  };
  const panel = createWhatIfPanel({
    reset: () => userToggle({ detach: [], freeze: [] }),
    verify: () => void core.messenger.request("verify", {}),
  });
  core.toolbar.status.add(panel.element, RANK.headline); // its bar and banner share the status line
  const button = createModeButton(() => setMode(!wi.mode));
  slots.tools.append(button);

  function recompute(): void {
    const state = (wi.state = evaluate(core.payload, wi.toggles));
    wi.deco = null;
    core.root.dataset.whatifLost = String(state.answer.lost.length);
    core.root.dataset.whatifRuns = String(state.answer.runs);
  }

  /** Repaint, then the bar and the verification banner. */
  function apply(): void {
    if (!wi.state) recompute();
    repaint(core);
  }

  function updatePanel(): void {
    const state = wi.state ?? evaluate(core.payload, wi.toggles);
    const toggled = !state.empty;
    panel.update({
      visible: wi.mode || toggled,
      mode: wi.mode,
      summary: summaryText(core.payload, state),
      toggled,
      canVerify: !!core.model.get("can_verify"),
    });
    panel.showVerification(core.model.get("verified"), wi.toggles);
  }

  /** A user toggle (click, reset): saved to the trait, then drawn; times click to styles applied. */
  function userToggle(next: Toggles): void {
    const started = performance.now();
    wi.toggles = next;
    core.model.set("toggles", { detach: [...next.detach], freeze: [...next.freeze] });
    core.model.save_changes();
    recompute();
    apply();
    wi.lastMs = performance.now() - started;
    core.root.dataset.whatifMs = wi.lastMs.toFixed(1);
  }

  function setMode(on: boolean): void {
    wi.mode = on;
    core.root.dataset.whatifMode = String(on);
    button.setAttribute("aria-pressed", String(on));
    core.view.setTapEdges(on);
    if (on) setSelected(core, "");
    apply();
  }

  return {
    name: "whatif",
    css: BANNER_CSS,
    styles: whatIfStyles,
    traits: {
      toggles() {
        const incoming = normalizeToggles(core.model.get("toggles"));
        if (sameToggles(incoming, wi.toggles)) return;
        wi.toggles = incoming;
        recompute();
        apply();
      },
      verified: apply,
      can_verify: apply,
    },
    loaded() {
      wi.toggles = normalizeToggles(core.model.get("toggles"));
      recompute();
    },
    laidOut() {
      wi.deco = null;
    },
    decorate(shown) {
      wi.deco ??= decorate(core.payload, shown, wi.state ?? evaluate(core.payload, wi.toggles), wi.toggles);
      return { classes: wi.deco.classes, labels: wi.deco.labels };
    },
    painted: updatePanel,
    /** The lost leaves, then the cuts (detached outputs, frozen leaves); nothing while nothing is cut. */
    subject() {
      const state = wi.state ?? evaluate(core.payload, wi.toggles);
      if (state.empty) return null;
      const cuts = [...wi.toggles.detach.map((ref) => ref.slice(0, ref.lastIndexOf(":"))), ...wi.toggles.freeze];
      return { keys: [...state.answer.lost, ...cuts].map(nodeKey), withLoss: true, name: "the lost leaves and the cut" };
    },
    click(key, kind, shift) {
      const next = wi.mode ? clickToggles(wi.toggles, key, kind, shift) : null;
      if (next) userToggle(next);
      return next !== null;
    },
    tapEdge(key) {
      // A click on an edge detaches (or restores) the tensors it carries.
      const edge = core.view.shown?.edges.find((e) => e.key === key);
      if (!wi.mode || !edge || edge.ghost) return false;
      userToggle(toggleTensors(wi.toggles, tensorsOfEdges(core.payload, edge.edges)));
      return true;
    },
    hooks: {
      whatIf: () => answerCopy(wi.state ?? evaluate(core.payload, wi.toggles)),
      whatIfMode: () => wi.mode,
      setWhatIfMode: setMode,
      lastWhatIfMs: () => wi.lastMs,
    },
  };
};

/** Cut edges red and dashed, lost leaves red, frozen leaves blue-grey, pruned nodes faded.
 *  Order matters: later rules win. */
function whatIfStyles(t: Theme): StylesheetJson {
  return [
    { selector: ".wi-pruned", style: { opacity: 0.3 } },
    {
      selector: "node.wi-lost",
      style: { "background-color": t.dangerFill, "border-color": t.danger, "border-width": 3.5, "border-style": "solid", opacity: 1 },
    },
    {
      selector: "node.wi-frozen",
      style: { "background-color": t.frozenFill, "border-color": t.frozen, "border-style": "dashed", "border-width": 2.5 },
    },
    { selector: "node.wi-frozen.wi-lost", style: { "border-color": t.danger, "border-width": 3.5 } },
    {
      selector: 'node.wi-detached[kind = "op"]',
      style: { "border-color": t.danger, "border-width": 2.5, "border-style": "dashed", opacity: 1, color: readable(t.danger, t.panelAlt) },
    },
    {
      selector: 'node.wi-haslost[kind = "collapsed"], node.wi-haslost[kind = "folded"]',
      style: { "border-color": t.danger, "border-width": 3, "border-style": "solid", color: readable(t.danger, t.boxFill), opacity: 1 },
    },
    { selector: 'node.wi-haslost[kind = "expanded"]', style: { "border-color": t.danger, "border-width": 2, "border-opacity": 1, color: readable(t.danger, t.background) } },
    {
      selector: "edge.wi-partcut",
      style: { "line-color": t.danger, "target-arrow-color": t.danger, "line-style": "dashed", "line-dash-pattern": [2, 4] },
    },
    {
      selector: "edge.wi-cut",
      style: {
        "line-color": t.danger,
        "target-arrow-color": t.danger,
        "target-arrow-shape": "tee",
        "line-style": "dashed",
        "line-dash-pattern": [6, 4],
        width: 2.5,
        label: "data(cutLabel)",
        color: readable(t.danger, t.background),
        "font-size": 13,
        "font-weight": "bold",
        "text-background-opacity": 1,
        "min-zoomed-font-size": 4,
        opacity: 1,
      },
    },
  ];
}

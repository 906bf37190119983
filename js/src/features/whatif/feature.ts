// What-if mode: a toggle recomputes the answer (lost leaves, pruned nodes, runs), then restyles what
// is drawn (no re-layout). The toggles live in the `toggles` trait so Python can read and set them;
// the shared mode (core/mode.ts, panels/mode.ts) holds the button, bar and banner, and Verify asks Python to re-run the
// model (question "whatif": `verified`, `can_verify`).
import type { StylesheetJson } from "cytoscape";
import type { Toggles, WhatIfAnswer } from "../../payload";
import { nodeKey } from "../../state/quotient";
import { readable, type Theme } from "../../view/theme";
import type { Core, FeatureFactory } from "../../core/context";
import type { Feature } from "../../core/feature";
import { repaint } from "../../core/paint";
import { setSelected } from "../../core/selection";
import { decorate, type Decorations } from "./decorate";
import { WHATIF_MODE, whatIfBanner } from "./panel";
import { createMode } from "../../core/mode";
import { BANNER_CSS } from "../../panels/mode";
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
    /** Classes and labels for what is drawn (null: recompute at the next paint). */
    deco: null as Decorations | null,
  };
  const mode = createMode(core, slots, WHATIF_MODE, {
    clear: () => setToggles({ detach: [], freeze: [] }),
    switched(on) {
      core.view.setTapEdges(on);
      if (on) setSelected(core, "");
      apply();
    },
  });

  function recompute(): void {
    const state = (wi.state = evaluate(core.payload, wi.toggles));
    wi.deco = null;
    core.root.dataset.whatifLost = String(state.answer.lost_ids.length);
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
    const summary = summaryText(core.payload, state);
    mode.show(
      { visible: mode.on || toggled, summary, bad: /^[1-9]/.test(summary), marked: toggled, canVerify: !!core.model.get("can_verify") },
      whatIfBanner(core.model.get("verified"), wi.toggles),
    );
  }

  /** Toggles set by the user: saved to the trait, then drawn. */
  function setToggles(next: Toggles): void {
    wi.toggles = next;
    core.model.set("toggles", { detach: [...next.detach], freeze: [...next.freeze] });
    core.model.save_changes();
    recompute();
    apply();
  }

  /** A user toggle (a click): timed, click to styles applied. */
  function userToggle(next: Toggles): void {
    mode.edit(() => setToggles(next));
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
      return { keys: [...state.answer.lost_ids, ...cuts].map(nodeKey), withLoss: true, name: "the lost leaves and the cut" };
    },
    click(key, kind, shift) {
      const next = mode.on ? clickToggles(wi.toggles, key, kind, shift) : null;
      if (next) userToggle(next);
      return next !== null;
    },
    tapEdge(key) {
      // A click on an edge detaches (or restores) the tensors it carries.
      const edge = core.view.shown?.edges.find((e) => e.key === key);
      if (!mode.on || !edge || edge.ghost) return false;
      userToggle(toggleTensors(wi.toggles, tensorsOfEdges(core.payload, edge.edges)));
      return true;
    },
    hooks: {
      whatIf: () => answerCopy(wi.state ?? evaluate(core.payload, wi.toggles)),
      whatIfMode: () => mode.on,
      setWhatIfMode: (on) => mode.set(on),
      lastWhatIfMs: () => mode.lastMs,
    },
  };
};

/** How far a pruned node (no longer on any path to the loss) fades, per theme. */
export const PRUNED_OPACITY = { light: 0.4, dark: 0.55 } as const;

/** Cut edges red and dashed, lost leaves red, frozen leaves blue-grey, pruned nodes faded.
 *  Order matters: later rules win. */
function whatIfStyles(t: Theme): StylesheetJson {
  return [
    // Faded, still legible: text at 0.3 on a dark canvas read as grey on grey (light text fades to the
    // dark background much faster than dark text to a light one).
    { selector: ".wi-pruned", style: { opacity: t.dark ? PRUNED_OPACITY.dark : PRUNED_OPACITY.light } },
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

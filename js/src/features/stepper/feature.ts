// The backward stepper: a cursor over a recorded backward pass (the `recording` and `step` traits),
// play / pause, stepping node by node or by module box, the keys that drive it while the widget has
// focus, and the gradient colours, edge labels and "data | grad" lines it draws.
import type { StylesheetJson } from "cytoscape";
import { nodeKey, representative } from "../../state/quotient";
import { MARK } from "../../view/style";
import type { Core, FeatureFactory } from "../../core/context";
import { relayout } from "../../core/drawing";
import type { Feature, Slots } from "../../core/feature";
import { repaint } from "../../core/paint";
import {
  atEnd,
  clickPick,
  clickTarget,
  cursorFrom,
  initialStepper,
  keyAction,
  panelFacts,
  pickOf,
  runToStop,
  stepInfo,
  stepperDecoration,
  stepperLegend,
  stepTarget,
  stepTooltip,
} from "./control";
import { createStepper } from "./panel";
import type { RunRule } from "./breakpoints";
import css from "./stepper.css";
import { clampCursor, firstNonfinite, indexRecording, INTRO, normalizeRecording, passCursor, reserveLines, stepDetails, stepView } from "./state";

export interface StepperHooks {
  /** Stepper: move the cursor (-1 = before the start; clamped), as a user would (sets `step`). */
  stepTo(cursor: number): void;
  /** Stepper cursor (-1 when before the start or no recording). */
  currentStep(): number;
  /** Stepper facts: cursor, pass, running node id, element keys of edges carrying gradient now,
   *  playing, by-module stepping. */
  stepInfo(): { cursor: number; pass: number; node: string | null; flowEdges: string[]; playing: boolean; byModule: boolean };
  /** Stepper: step by module box (what is on screen) instead of node by node. */
  setByModule(on: boolean): void;
  /** Milliseconds from the last stepper move to its styles applied. */
  lastStepMs(): number;
}

/** The stepper's moving parts: the model (`control.ts`), its panel, the play timer, and the moves that
 *  keep the three and the `step` trait in step. */
class StepperRun {
  readonly st = initialStepper();
  private timer: ReturnType<typeof setInterval> | null = null;
  private readonly panel: ReturnType<typeof createStepper>;

  constructor(
    private readonly core: Core,
    slots: Slots,
  ) {
    const st = this.st;
    this.panel = createStepper({
      seek: (c) => this.seek(c, true),
      step: (dir) => this.userStep(dir),
      togglePlay: () => this.setPlaying(!st.playing),
      setSpeed: (v) => {
        st.speed = v;
        if (st.playing) this.setPlaying(true);
      },
      setPass: (p) => st.rix && this.seek(passCursor(st.rix, p), true),
      setByModule: (on) => this.setByModule(on),
      firstNonfinite: () => st.rix && this.seek(firstNonfinite(st.rix.steps), true),
      runTo: (rule, threshold) => this.runTo(rule, threshold),
    });
    slots.top.append(this.panel.element);
    slots.body.append(this.panel.details);
  }

  /** The element drawn for a node now (itself, or the closed box or stack that hides it). */
  readonly repOf = (nodeId: string): string => {
    const n = this.st.rix?.nodes.get(nodeId);
    return n ? representative(n, this.core.index, this.core.expanded, this.core.folded) : nodeKey(nodeId);
  };

  updatePanel(): void {
    const { st, core, panel } = this;
    panel.setVisible(!!st.rix);
    if (core.body.classList.contains("gradviz-with-side") !== !!st.rix) {
      core.body.classList.toggle("gradviz-with-side", !!st.rix);
      core.view.resize();
    }
    core.root.dataset.step = String(st.cursor);
    core.root.dataset.stepNode = st.sv?.step ? st.sv.step.node : "";
    const facts = panelFacts(st, core.index.order.length > 0);
    if (!facts || !st.rix || !st.sv) return;
    panel.update(facts);
    panel.showDetails(stepDetails(st.rix, st.sv) ?? INTRO);
    core.details.hide();
  }

  /** Move the cursor and repaint (styles only); `save` when the user moved it. */
  seek(c: number, save: boolean): void {
    const { st, core } = this;
    if (!st.rix) return;
    const started = performance.now();
    const next = clampCursor(st.rix, c);
    const changed = next !== st.cursor;
    st.cursor = next;
    if (save && Number(core.model.get("step")) !== st.cursor) {
      core.model.set("step", st.cursor);
      core.model.save_changes();
    }
    if (changed || save) repaint(core);
    if (changed && st.sv?.step) core.view.ensureVisible(this.repOf(st.sv.step.node), 30);
    st.lastMs = performance.now() - started;
    core.root.dataset.stepMs = st.lastMs.toFixed(1);
  }

  /** "Run to": seek the rule's stop (a stop that never hits leaves the cursor and says so). */
  runTo(rule: RunRule, threshold: number): void {
    const started = performance.now();
    const stop = runToStop(this.st, rule, this.core.payload.calls, threshold);
    this.core.root.dataset.runRuleMs = (performance.now() - started).toFixed(1);
    if (stop && stop.index >= 0) this.seek(stop.index, true);
    this.updatePanel();
    // The whole "Run to" (the rule over every step, the seek, the repaint) is what the page budget measures.
    this.st.lastMs = performance.now() - started;
    this.core.root.dataset.stepMs = this.st.lastMs.toFixed(1);
  }

  userStep(dir: 1 | -1): void {
    const to = stepTarget(this.st, dir, this.repOf);
    if (to !== null) this.seek(to, true);
  }

  setPlaying(on: boolean): void {
    const st = this.st;
    this.stop();
    st.playing = on && !!st.rix;
    if (st.playing) {
      if (atEnd(st)) this.seek(-1, true);
      this.timer = setInterval(() => {
        if (!atEnd(st)) this.userStep(1);
        if (atEnd(st)) this.setPlaying(false);
      }, 1000 / st.speed);
    }
    this.core.root.dataset.playing = String(st.playing);
    this.updatePanel();
  }

  setByModule(on: boolean): void {
    this.st.byModule = on;
    this.updatePanel();
  }

  /** Index the `recording` trait against the payload (stops playing; the cursor comes from `step`). */
  loadRecording(): void {
    const { st, core } = this;
    const rec = normalizeRecording(core.model.get("recording"));
    this.setPlaying(false);
    st.rix = rec ? indexRecording(rec, core.payload) : null;
    st.runStop = null;
    this.follow();
    st.cursor = cursorFrom(st, core.model.get("step"));
    core.body.classList.toggle("gradviz-with-side", !!st.rix);
    core.view.resize();
  }

  /** The `selected` trait (Python, a search pick) is the user's latest choice. */
  follow(): void {
    const st = this.st;
    const id = String(this.core.model.get("selected") || "");
    if (st.rix && id) st.pick = pickOf(id, st.rix.nodes, new Set(this.core.index.calls.keys()));
  }

  /** A click on the canvas: what it chose is what "Run to" a box / leaf reads from now on. */
  picked(key: string, kind: string): void {
    const st = this.st;
    const p = st.rix ? clickPick(key, kind, st.rix.nodes, new Set(this.core.index.calls.keys())) : null;
    if (p) st.pick = p;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}

export const stepper: FeatureFactory<StepperHooks> = (core: Core, slots): Feature<StepperHooks> => {
  const run = new StepperRun(core, slots);
  const st = run.st;
  return {
    name: "stepper",
    styles: stepperStyles,
    css,
    traits: {
      recording() {
        run.loadRecording();
        void relayout(core, {}); // node sizes depend on the recording's "data | grad" lines
      },
      step() {
        const c = cursorFrom(st, core.model.get("step"));
        if (st.rix && c !== st.cursor) run.seek(c, false);
      },
      selected() {
        run.follow();
        run.updatePanel();
      },
    },
    loaded: () => run.loadRecording(),
    decorate: (shown) => stepperDecoration(st, (st.sv = st.rix ? stepView(st.rix, st.cursor) : null), shown, run.repOf),
    painted: () => run.updatePanel(),
    subject: () => (st.sv?.step ? { keys: [run.repOf(st.sv.step.node)], withLoss: true, name: "the running node" } : null),
    legend: () => (st.rix ? { spec: stepperLegend(st.rix), fallback: st.cursor < 0 } : null),
    tooltip: (key) => stepTooltip(st, key),
    click(key, kind) {
      run.picked(key, kind); // a box click still opens or closes it (the core's), and is the box chosen
      const at = clickTarget(st, key, kind);
      if (at !== null) run.seek(at, true);
      return at !== null;
    },
    key(e) {
      const target = e.target as HTMLInputElement | null;
      const action = keyAction(st, { key: e.key, altKey: e.altKey, ctrlKey: e.ctrlKey, metaKey: e.metaKey, tag: target?.tagName ?? "", inputType: target?.type });
      if (action === "play") run.setPlaying(!st.playing);
      else if (action) run.userStep(action === "forward" ? 1 : -1);
      return action !== null;
    },
    /** Room each node needs for its recorded "data | grad" lines. */
    reserve: () => {
      const rix = st.rix;
      return rix ? (key) => (key.startsWith("n:") ? reserveLines(rix, key.slice(2)) : null) : null;
    },
    hooks: {
      stepTo: (c) => run.seek(c, true),
      currentStep: () => st.cursor,
      stepInfo: () => stepInfo(st),
      setByModule: (on) => run.setByModule(on),
      lastStepMs: () => st.lastMs,
    },
    dispose: () => run.stop(),
  };
};

/** The running node, the boxes around it, the edges carrying gradient now (the arrow turned round:
 *  gradient flows from the consumer back to the producer). Colours are the core's heat classes. */
function stepperStyles(): StylesheetJson {
  return [
    { selector: "node.st-bad", style: { "background-color": MARK.nan, color: "#ffffff", "border-color": MARK.nan, "border-width": 3 } },
    {
      selector: "node.st-run",
      style: {
        "border-color": MARK.run,
        "border-width": 5,
        "border-style": "solid",
        "border-opacity": 1,
        "underlay-color": MARK.run,
        "underlay-padding": 7,
        "underlay-opacity": 0.28,
        // Not bold: the label's text changes in the same paint as this class, and Cytoscape kept the regular
        // weight's text box for the bold text, cutting its first and last letters ("lata 6 | grad 4.77e-").
      } as Record<string, unknown>,
    },
    { selector: "node.st-runbox", style: { "border-color": MARK.run, "border-width": 3, "border-opacity": 1, "border-style": "solid", color: MARK.run } },
    {
      selector: "edge.st-flow",
      style: {
        "line-color": MARK.flow,
        "source-arrow-color": MARK.flow,
        "source-arrow-shape": "triangle",
        "target-arrow-shape": "none",
        "arrow-scale": 1.3,
        width: 4,
        "line-style": "solid",
        label: "data(flowLabel)",
        color: MARK.run,
        "font-size": 12,
        "font-weight": "bold",
        "text-background-opacity": 1,
        "text-background-padding": "2px",
        "min-zoomed-font-size": 4,
        "z-index": 60,
      },
    },
  ];
}

// The backward stepper: a cursor over a recorded backward pass (the `recording` and `step` traits),
// play / pause, stepping node by node or by module box, the keys that drive it while the widget has
// focus, and the gradient colours, edge labels and "data | grad" lines it draws.
import type { StylesheetJson } from "cytoscape";
import { splitFill } from "../../state/classes";
import { fmt } from "../../state/numbers";
import { nodeKey, representative } from "../../state/quotient";
import { HEAT_ZERO, MARK } from "../../view/style";
import type { Core, FeatureFactory } from "../../core/context";
import { relayout } from "../../core/drawing";
import type { Feature, LegendSpec } from "../../core/feature";
import { repaint } from "../../core/paint";
import { createStepper } from "./panel";
import {
  clampCursor,
  firstNonfinite,
  indexRecording,
  INTRO,
  nextCursor,
  normalizeRecording,
  passCursor,
  pendingLeaves,
  positionText,
  reserveLines,
  stepDecorations,
  stepDetails,
  stepForNode,
  stepView,
  type RecordingIndex,
  type StepView,
} from "./state";

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

export const stepper: FeatureFactory<StepperHooks> = (core: Core, slots): Feature<StepperHooks> => {
  const st = {
    rix: null as RecordingIndex | null,
    cursor: -1,
    sv: null as StepView | null,
    playing: false,
    timer: null as ReturnType<typeof setInterval> | null,
    speed: 2,
    byModule: false,
    lastMs: 0,
    flowEdges: [] as string[],
  };
  const panel = createStepper({
    seek: (c) => seek(c, true),
    step: (dir) => userStep(dir),
    togglePlay: () => setPlaying(!st.playing),
    setSpeed(v) {
      st.speed = v;
      if (st.playing) setPlaying(true);
    },
    setPass: (p) => st.rix && seek(passCursor(st.rix, p), true),
    setByModule: (on) => setByModule(on),
    firstNonfinite: () => st.rix && seek(firstNonfinite(st.rix.steps), true),
  });
  slots.top.append(panel.element);
  slots.body.append(panel.details);

  /** The element drawn for a node now (itself, or the closed box or stack that hides it). */
  const repOf = (nodeId: string): string => {
    const n = st.rix?.nodes.get(nodeId);
    return n ? representative(n, core.index, core.expanded, core.folded) : nodeKey(nodeId);
  };
  const colouring = (): boolean => !!st.rix && st.cursor >= 0;

  function updatePanel(): void {
    const { root, body, view } = core;
    const { rix, sv, cursor } = st;
    panel.setVisible(!!rix);
    if (body.classList.contains("gradviz-with-side") !== !!rix) {
      body.classList.toggle("gradviz-with-side", !!rix);
      view.resize();
    }
    root.dataset.step = String(cursor);
    if (!rix || !sv) {
      root.dataset.stepNode = "";
      return;
    }
    root.dataset.stepNode = sv.step ? sv.step.node : "";
    panel.update({
      cursor,
      total: rix.steps.length,
      passes: rix.passes,
      pass: sv.pass,
      playing: st.playing,
      position: positionText(rix, sv),
      pending: pendingLeaves(rix, sv),
      boxes: core.index.order.length > 0,
      firstNonfinite: firstNonfinite(rix.steps),
    });
    panel.showDetails(stepDetails(rix, sv) ?? INTRO);
    core.details.hide();
  }

  /** Move the cursor and repaint (styles only); `save` when the user moved it. */
  function seek(c: number, save: boolean): void {
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
    if (changed && st.sv?.step) core.view.ensureVisible(repOf(st.sv.step.node), { side: 30, top: 30, bottom: 110 });
    st.lastMs = performance.now() - started;
    core.root.dataset.stepMs = st.lastMs.toFixed(1);
  }

  function userStep(dir: 1 | -1): void {
    if (!st.rix) return;
    seek(nextCursor(st.rix, st.cursor, dir, st.byModule ? repOf : undefined), true);
  }

  function setPlaying(on: boolean): void {
    if (st.timer) clearInterval(st.timer);
    st.timer = null;
    st.playing = on && !!st.rix;
    if (st.playing && st.rix) {
      if (st.cursor >= st.rix.steps.length - 1) seek(-1, true);
      st.timer = setInterval(() => {
        if (!st.rix || st.cursor >= st.rix.steps.length - 1) {
          setPlaying(false);
          return;
        }
        userStep(1);
        if (st.rix && st.cursor >= st.rix.steps.length - 1) setPlaying(false);
      }, 1000 / st.speed);
    }
    core.root.dataset.playing = String(st.playing);
    updatePanel();
  }

  function setByModule(on: boolean): void {
    st.byModule = on;
    updatePanel();
  }

  /** Index the `recording` trait against the payload (stops playing; the cursor comes from `step`). */
  function loadRecording(): void {
    const rec = normalizeRecording(core.model.get("recording"));
    setPlaying(false);
    st.rix = rec ? indexRecording(rec, core.payload) : null;
    st.cursor = st.rix ? clampCursor(st.rix, Number(core.model.get("step") ?? -1)) : -1;
    core.body.classList.toggle("gradviz-with-side", !!st.rix);
    core.view.resize();
  }

  function legendSpec(): LegendSpec {
    const sc = st.rix?.scale;
    return {
      title: "gradient each node received (‖·‖, log scale)",
      scaleText: "",
      min: sc ? fmt(sc.min) : "—",
      max: sc ? fmt(sc.max) : "—",
      ramp: true,
      items: [
        { kind: "run", text: "running now", border: MARK.run },
        { kind: "flow", text: "gradient sent now", fill: MARK.flow },
        { kind: "neutral", text: "not run yet" },
        { kind: "zero", text: "zero", fill: HEAT_ZERO },
      ],
    };
  }

  return {
    name: "stepper",
    styles: stepperStyles,
    traits: {
      recording() {
        loadRecording();
        void relayout(core, {}); // node sizes depend on the recording's "data | grad" lines
      },
      step() {
        if (!st.rix) return;
        const c = clampCursor(st.rix, Number(core.model.get("step")));
        if (c !== st.cursor) seek(c, false);
      },
    },
    loaded: loadRecording,
    decorate(shown) {
      const sv = (st.sv = st.rix ? stepView(st.rix, st.cursor) : null);
      if (!st.rix || !sv) {
        st.flowEdges = [];
        return null;
      }
      const d = stepDecorations(st.rix, sv, shown, repOf);
      st.flowEdges = [...d.edgeLabels.keys()];
      const { fill, rest } = splitFill(d.classes);
      // While it colours the graph the stepper owns the fill and the sizes (an overlay's wait).
      return colouring() ? { classes: rest, fill, sizes: new Map(), lines: d.lines, edgeLabels: d.edgeLabels } : { classes: rest, lines: d.lines, edgeLabels: d.edgeLabels };
    },
    painted: updatePanel,
    legend: () => (st.rix ? { spec: legendSpec(), fallback: !colouring() } : null),
    tooltip(key) {
      if (!st.rix || !st.sv || !key.startsWith("n:")) return "";
      const r = st.sv.ran.get(key.slice(2));
      return r ? `gradient received: ‖·‖ ${r.nonfinite ? "NaN/Inf" : fmt(r.norm)}` : "";
    },
    click(_key, kind) {
      if (!st.rix || (kind !== "op" && kind !== "leaf")) return false;
      const at = stepForNode(st.rix, st.cursor, _key.slice(2));
      if (at === null) return false;
      seek(at, true);
      return true;
    },
    key(e) {
      // → / ← step, Space plays or pauses; keys meant for a focused control are left alone.
      if (!st.rix || e.altKey || e.ctrlKey || e.metaKey) return false;
      const target = e.target as HTMLElement | null;
      const tag = target?.tagName ?? "";
      const isRange = tag === "INPUT" && (target as HTMLInputElement).type === "range";
      if ((e.key === "ArrowRight" || e.key === "ArrowLeft") && !isRange && tag !== "SELECT") userStep(e.key === "ArrowRight" ? 1 : -1);
      else if ((e.key === " " || e.key === "Spacebar") && !["BUTTON", "INPUT", "SELECT", "TEXTAREA"].includes(tag)) setPlaying(!st.playing);
      else return false;
      return true;
    },
    /** Room each node needs for its recorded "data | grad" lines. */
    reserve: () => {
      const rix = st.rix;
      return rix ? (key) => (key.startsWith("n:") ? reserveLines(rix, key.slice(2)) : null) : null;
    },
    hooks: {
      stepTo: (c) => seek(c, true),
      currentStep: () => st.cursor,
      stepInfo: () => ({
        cursor: st.cursor,
        pass: st.rix ? (st.sv?.pass ?? 0) : 0,
        node: st.sv?.step ? st.sv.step.node : null,
        flowEdges: [...st.flowEdges],
        playing: st.playing,
        byModule: st.byModule,
      }),
      setByModule,
      lastStepMs: () => st.lastMs,
    },
    dispose() {
      if (st.timer) clearInterval(st.timer);
    },
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
        "font-weight": "bold",
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

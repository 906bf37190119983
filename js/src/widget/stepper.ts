// The stepper: a cursor over a recorded backward pass (the `step` trait), play / pause, stepping node
// by node or by module box, and the keys that drive it while the widget has focus.
import {
  clampCursor,
  firstNonfinite,
  indexRecording,
  INTRO,
  nextCursor,
  normalizeRecording,
  pendingLeaves,
  positionText,
  reserveLines,
  stepDetails,
  type RecordingIndex,
} from "../state/stepper";
import { nodeKey, representative } from "../state/quotient";
import type { WidgetContext } from "./context";
import { repaint } from "./paint";

/** The element drawn for a node now (itself, or the closed box or stack that hides it). */
export function repOf(ctx: WidgetContext, nodeId: string): string {
  const n = ctx.step.rix?.nodes.get(nodeId);
  return n ? representative(n, ctx.index, ctx.expanded, ctx.folded) : nodeKey(nodeId);
}

/** Room each node needs for its recorded "data | grad" lines. */
export function reserveFor(ix: RecordingIndex): (key: string) => string[][] | null {
  return (key) => (key.startsWith("n:") ? reserveLines(ix, key.slice(2)) : null);
}

export function updateStepperPanel(ctx: WidgetContext): void {
  const { root, body, stepper, view, step } = ctx;
  const { rix, sv, cursor } = step;
  stepper.setVisible(!!rix);
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
  stepper.update({
    cursor,
    total: rix.steps.length,
    passes: rix.passes,
    pass: sv.pass,
    playing: step.playing,
    position: positionText(rix, sv),
    pending: pendingLeaves(rix, sv),
    boxes: ctx.index.order.length > 0,
    firstNonfinite: firstNonfinite(rix.steps),
  });
  stepper.showDetails(stepDetails(rix, sv) ?? INTRO);
  ctx.details.hide();
}

/** Move the cursor and repaint (styles only); `save` when the user moved it. */
export function seek(ctx: WidgetContext, c: number, save: boolean): void {
  const { step, model } = ctx;
  if (!step.rix) return;
  const started = performance.now();
  const next = clampCursor(step.rix, c);
  const changed = next !== step.cursor;
  step.cursor = next;
  if (save && Number(model.get("step")) !== step.cursor) {
    model.set("step", step.cursor);
    model.save_changes();
  }
  if (changed || save) repaint(ctx);
  if (changed && step.sv?.step) ctx.view.ensureVisible(repOf(ctx, step.sv.step.node), { side: 30, top: 30, bottom: 110 });
  step.lastMs = performance.now() - started;
  ctx.root.dataset.stepMs = step.lastMs.toFixed(1);
}

export function userSeek(ctx: WidgetContext, c: number): void {
  seek(ctx, c, true);
}

export function userStep(ctx: WidgetContext, dir: 1 | -1): void {
  const { rix, cursor, byModule } = ctx.step;
  if (!rix) return;
  userSeek(ctx, nextCursor(rix, cursor, dir, byModule ? (id) => repOf(ctx, id) : undefined));
}

export function setPlaying(ctx: WidgetContext, on: boolean): void {
  const { step } = ctx;
  if (step.timer) clearInterval(step.timer);
  step.timer = null;
  step.playing = on && !!step.rix;
  if (step.playing && step.rix) {
    if (step.cursor >= step.rix.steps.length - 1) userSeek(ctx, -1);
    step.timer = setInterval(() => {
      if (!step.rix || step.cursor >= step.rix.steps.length - 1) {
        setPlaying(ctx, false);
        return;
      }
      userStep(ctx, 1);
      if (step.rix && step.cursor >= step.rix.steps.length - 1) setPlaying(ctx, false);
    }, 1000 / step.speed);
  }
  ctx.root.dataset.playing = String(step.playing);
  updateStepperPanel(ctx);
}

export function setByModule(ctx: WidgetContext, on: boolean): void {
  ctx.step.byModule = on;
  updateStepperPanel(ctx);
}

export function setSpeed(ctx: WidgetContext, v: number): void {
  ctx.step.speed = v;
  if (ctx.step.playing) setPlaying(ctx, true);
}

/** Index the `recording` trait against the payload (stops playing; the cursor comes from `step`). */
export function loadRecording(ctx: WidgetContext): void {
  const { step, model } = ctx;
  const rec = normalizeRecording(model.get("recording"));
  setPlaying(ctx, false);
  step.rix = rec ? indexRecording(rec, ctx.payload) : null;
  step.cursor = step.rix ? clampCursor(step.rix, Number(model.get("step") ?? -1)) : -1;
  ctx.body.classList.toggle("gradviz-with-side", !!step.rix);
  ctx.view.resize();
}

/** Python set `step`. */
export function takeStep(ctx: WidgetContext): void {
  const { rix, cursor } = ctx.step;
  if (!rix) return;
  const c = clampCursor(rix, Number(ctx.model.get("step")));
  if (c !== cursor) seek(ctx, c, false);
}

/** → / ← step, Space plays or pauses; keys meant for a focused control are left alone. */
export function stepperKey(ctx: WidgetContext, e: KeyboardEvent): void {
  if (!ctx.step.rix || e.altKey || e.ctrlKey || e.metaKey) return;
  const target = e.target as HTMLElement | null;
  const tag = target?.tagName ?? "";
  const isRange = tag === "INPUT" && (target as HTMLInputElement).type === "range";
  if ((e.key === "ArrowRight" || e.key === "ArrowLeft") && !isRange && tag !== "SELECT") {
    userStep(ctx, e.key === "ArrowRight" ? 1 : -1);
  } else if ((e.key === " " || e.key === "Spacebar") && !["BUTTON", "INPUT", "SELECT", "TEXTAREA"].includes(tag)) {
    setPlaying(ctx, !ctx.step.playing);
  } else return;
  e.preventDefault();
  e.stopPropagation();
}

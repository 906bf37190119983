// What-if mode: a toggle recomputes the answer (lost leaves, pruned nodes, runs), then restyles what
// is drawn (no re-layout). The toggles live in the `toggles` trait so Python can read and set them.
import type { Toggles } from "../payload";
import { evaluate, normalizeToggles, sameToggles, summaryText } from "../state/whatif";
import type { WidgetContext } from "./context";
import { repaint } from "./paint";
import { setSelected } from "./selection";

export function recomputeWhatIf(ctx: WidgetContext): void {
  const state = (ctx.wi.state = evaluate(ctx.payload, ctx.wi.toggles));
  ctx.root.dataset.whatifLost = String(state.answer.lost.length);
  ctx.root.dataset.whatifRuns = String(state.answer.runs);
}

export function applyWhatIf(ctx: WidgetContext): void {
  const { wi, model } = ctx;
  if (!wi.state) recomputeWhatIf(ctx);
  const state = wi.state!;
  repaint(ctx);
  const toggled = !state.empty;
  ctx.whatIfPanel.update({
    visible: wi.mode || toggled,
    mode: wi.mode,
    summary: summaryText(ctx.payload, state),
    toggled,
    canVerify: !!model.get("can_verify"),
  });
  ctx.whatIfPanel.showVerification(model.get("verified"), wi.toggles);
}

/** A user toggle (click, reset): saved to the trait, then drawn; times click to styles applied. */
export function userToggle(ctx: WidgetContext, next: Toggles): void {
  const started = performance.now();
  ctx.wi.toggles = next;
  ctx.model.set("toggles", { detach: [...next.detach], freeze: [...next.freeze] });
  ctx.model.save_changes();
  redrawWhatIf(ctx);
  ctx.wi.lastMs = performance.now() - started;
  ctx.root.dataset.whatifMs = ctx.wi.lastMs.toFixed(1);
}

/** Python set `toggles`. */
export function takeToggles(ctx: WidgetContext): void {
  const incoming = normalizeToggles(ctx.model.get("toggles"));
  if (sameToggles(incoming, ctx.wi.toggles)) return;
  ctx.wi.toggles = incoming;
  redrawWhatIf(ctx);
}

function redrawWhatIf(ctx: WidgetContext): void {
  recomputeWhatIf(ctx);
  ctx.wi.deco = null;
  applyWhatIf(ctx);
}

export function setWhatIfMode(ctx: WidgetContext, on: boolean): void {
  ctx.wi.mode = on;
  ctx.root.dataset.whatifMode = String(on);
  ctx.toolbar.setWhatIfMode(on);
  ctx.view.setWhatIfMode(on);
  if (on) setSelected(ctx, "");
  applyWhatIf(ctx);
}

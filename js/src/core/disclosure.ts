// What is open (expanded calls, unfolded stacks) and how it changes: each change is checked against
// the view cap on the would-be counts (no layout), waits for any contents it needs (lazy mode), then
// is laid out, one change after another. Python sees the result in the `expanded` / `unfolded` traits.
import { drawnItems, refusalText, viewCap } from "../state/cap";
import { canonical, collapse, expand, expandAll, sameSet } from "../state/expansion";
import { canonicalUnfolded, foldedCalls, foldKey, unfoldForExpanded } from "../state/fold";
import { missingCalls } from "../state/lazy";
import { callKey, visibleGraph } from "../state/quotient";
import type { Anchor } from "../view/graphview";
import type { Disclosure, Core } from "./context";
import { currentGraph, relayout, setSpinner } from "./drawing";

export interface ChangeOptions {
  /** Says what the change does, for a refusal ("Opening blocks.3"). */
  action: string;
  /** Keep this element's top-centre where it is on screen. */
  anchor?: () => Anchor | undefined;
  fit?: boolean;
  /** One user expand / collapse / unfold: only the changed region is laid out again. */
  incremental?: boolean;
  /** The change came from a trait Python set: on refusal, set the traits back. */
  fromTrait?: boolean;
  /** First view of a payload: drawn even if nothing changed; the initial cap applies. */
  initial?: boolean;
  /** Heavy on the main thread: the first frame after the click is left to paint the spinner before the
   *  work starts (default: a view over SLOW_VIEW items, an unfold, or several boxes opened at once). */
  slow?: boolean;
}

/** Items drawn above which a change yields a frame for the spinner before its work. */
const SLOW_VIEW = 300;
/** Changes queued and not finished, per core: the last one to finish takes the spinner down. */
const queued = new WeakMap<Core, number>();

/** Load the contents of `calls` (lazy mode), with the spinner up; false (and a message) on failure. */
export async function ensureLoaded(ctx: Core, calls: string[]): Promise<boolean> {
  if (!ctx.lazy || !calls.length) return true;
  const gen = ctx.payloadGen;
  ctx.root.dataset.loading = "true";
  setSpinner(ctx, "loading…");
  try {
    await ctx.loader.load(calls);
    return gen === ctx.payloadGen;
  } catch (err) {
    if (gen === ctx.payloadGen) ctx.toolbar.setMessage(err instanceof Error ? err.message : String(err));
    return false;
  } finally {
    ctx.root.dataset.loading = String(ctx.loader.busy);
    if (ctx.running === 0 && !ctx.loader.busy) setSpinner(ctx, null);
  }
}

/** Change what is open, in order with other changes: the cap is checked on the would-be counts
 *  (no layout), missing contents are loaded, then the view is laid out. Resolves true when drawn. */
export function change(ctx: Core, step: (cur: Disclosure) => Disclosure, options: ChangeOptions): Promise<boolean> {
  // What the change would do from here (step is pure): nothing, or how heavy. Under load even one open
  // took 150-400 ms on GPT-2 124M (benchmarks/bench_session.py), and a reveal 300-2400 ms: any change
  // says what it does from the click on (set before any work is scheduled, so the first frame shows it).
  const guess = step({ expanded: ctx.expanded, unfolded: ctx.unfolded });
  const changes = !sameSet(guess.expanded, ctx.expanded) || !sameSet(guess.unfolded, ctx.unfolded);
  const slow = options.slow ?? (drawnItems(ctx.counts) > SLOW_VIEW || guess.unfolded.size > ctx.unfolded.size || guess.expanded.size > ctx.expanded.size + 1);
  if (changes || options.initial) setSpinner(ctx, `${options.action}…`);
  queued.set(ctx, (queued.get(ctx) ?? 0) + 1);
  const job = ctx.changes
    .then(() => applyChange(ctx, step, options, slow))
    .catch((err: unknown) => {
      ctx.toolbar.setMessage(`Could not update the view: ${err instanceof Error ? err.message : String(err)}`);
      return false;
    })
    .finally(() => {
      const left = (queued.get(ctx) ?? 1) - 1;
      queued.set(ctx, left);
      if (left === 0 && ctx.running === 0 && !ctx.loader.busy) setSpinner(ctx, null);
    });
  ctx.changes = job;
  ctx.pending = Promise.all([ctx.pending, job]);
  return job;
}

async function applyChange(ctx: Core, step: (cur: Disclosure) => Disclosure, options: ChangeOptions, slow: boolean): Promise<boolean> {
  const gen = ctx.payloadGen;
  const next = step({ expanded: ctx.expanded, unfolded: ctx.unfolded });
  next.unfolded = unfoldForExpanded(next.unfolded, next.expanded, ctx.folds, ctx.index);
  const same = sameSet(next.expanded, ctx.expanded) && sameSet(next.unfolded, ctx.unfolded);
  if (same && !options.initial) return true;
  const nextFolded = foldedCalls(ctx.folds, next.expanded, next.unfolded);
  if (slow || next.unfolded.size > ctx.unfolded.size || next.expanded.size > ctx.expanded.size + 20) {
    // Unfolding a long stack (or opening many boxes) takes a moment: say what is happening, and let
    // the browser paint that before the work starts.
    setSpinner(ctx, `${options.action}…`);
    await new Promise<void>((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
    if (gen !== ctx.payloadGen) {
      if (ctx.running === 0) setSpinner(ctx, null);
      return false;
    }
  }
  let graph = visibleGraph(ctx.payload, next.expanded, ctx.index, nextFolded);
  const items = drawnItems(graph.counts);
  // Past the cap only changes that draw less go through; a first view past it shows search instead.
  let nextTooBig = false;
  if (options.initial) nextTooBig = items > viewCap();
  else if (items > viewCap() && (ctx.tooBig || items > drawnItems(ctx.counts))) {
    ctx.toolbar.setMessage(refusalText(options.action, items));
    if (options.fromTrait) saveDisclosure(ctx);
    if (ctx.running === 0) setSpinner(ctx, null);
    return false;
  }
  if (!nextTooBig && !(await ensureLoaded(ctx, missingCalls(ctx.lazy, next.expanded)))) {
    if (options.fromTrait && gen === ctx.payloadGen) saveDisclosure(ctx);
    // A first view that cannot load what the traits open still draws the top level.
    if (options.initial && gen === ctx.payloadGen && next.expanded.size) {
      void change(ctx, () => ({ expanded: new Set(), unfolded: next.unfolded }), options);
    }
    return false;
  }
  if (gen !== ctx.payloadGen) return false;
  const anchor = options.anchor?.();
  if (nextTooBig !== ctx.tooBig || options.initial) ctx.focus = null;
  ctx.tooBig = nextTooBig;
  ctx.expanded = next.expanded;
  ctx.unfolded = next.unfolded;
  ctx.folded = nextFolded;
  saveDisclosure(ctx);
  // Loaded records filled their placeholders in place, so `graph` stays valid; a too-big view shows
  // the search neighbourhood instead.
  if (ctx.tooBig) graph = currentGraph(ctx);
  await relayout(ctx, { anchor, fit: options.fit, incremental: options.incremental }, graph);
  return true;
}

/** Write `expanded` and `unfolded` back to the traits (canonical forms; no-op when unchanged). */
export function saveDisclosure(ctx: Core): void {
  const { model } = ctx;
  const e = canonical(ctx.expanded, ctx.index);
  const u = canonicalUnfolded(ctx.unfolded, ctx.folds);
  const had = model.get("expanded") || [];
  const hadU = model.get("unfolded") || [];
  if (JSON.stringify(e) === JSON.stringify(had) && JSON.stringify(u) === JSON.stringify(hadU)) return;
  model.set("expanded", e);
  model.set("unfolded", u);
  model.save_changes();
}

const keepAt = (ctx: Core, key: string) => (): Anchor | undefined => ctx.view.anchorOf(key);

export function openCall(ctx: Core, id: string): Promise<boolean> {
  return change(ctx, (cur) => ({ expanded: expand(cur.expanded, id, ctx.index), unfolded: cur.unfolded }), {
    action: `Opening ${id}`,
    anchor: keepAt(ctx, callKey(id)),
    incremental: true,
  });
}

export function closeCall(ctx: Core, id: string): Promise<boolean> {
  return change(ctx, (cur) => ({ expanded: collapse(cur.expanded, id, ctx.index), unfolded: cur.unfolded }), {
    action: `Closing ${id}`,
    anchor: keepAt(ctx, callKey(id)),
    incremental: true,
  });
}

/** Unfold a stack: its first call's box takes the stack's place on screen. */
export function unfoldGroup(ctx: Core, groupId: string): Promise<boolean> {
  const group = ctx.folds.groups.get(groupId);
  if (!group) return Promise.resolve(false);
  const type = ctx.index.calls.get(group.calls[0])?.type ?? "";
  return change(ctx, (cur) => ({ expanded: cur.expanded, unfolded: new Set([...cur.unfolded, groupId]) }), {
    action: `Unfolding ${group.calls.length} × ${type}`,
    slow: true,
    anchor() {
      const at = ctx.view.anchorOf(foldKey(groupId));
      return at ? { key: callKey(group.calls[0]), rendered: at.rendered } : undefined;
    },
    incremental: true,
  });
}

export function expandEverything(ctx: Core): Promise<boolean> {
  return change(ctx, () => ({ expanded: expandAll(ctx.index), unfolded: new Set(ctx.folds.groups.keys()) }), {
    action: "Expand all",
    fit: true,
    slow: true,
  });
}

/** Collapse all refolds every stack too. */
export function collapseEverything(ctx: Core): Promise<boolean> {
  return change(ctx, () => ({ expanded: new Set(), unfolded: new Set() }), { action: "Collapse all", fit: true, slow: true });
}

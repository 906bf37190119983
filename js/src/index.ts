// anywidget entry: wires the synced traits (graph_data, expanded, selected, height, toggles,
// verified, can_verify) to the view.
// Traits hold all state, so a saved notebook or exported page rebuilds the same view with no kernel.
import type { AnyWidget, RenderProps } from "@anywidget/types";
import css from "./styles.css";
import type { GraphPayload, Toggles, Verification, WhatIfAnswer } from "./payload";
import { canonical, collapse, expand, expandAll, sameSet } from "./state/expansion";
import { callDetails, nodeDetails, nodeTitle, plural } from "./state/labels";
import { callKey, indexCalls, nodeKey, visibleGraph, type CallIndex, type VisibleCounts } from "./state/quotient";
import {
  CALL_PREFIX,
  EMPTY_TOGGLES,
  evaluate,
  normalizeToggles,
  sameToggles,
  summaryText,
  tensorsOfEdges,
  toggleItem,
  toggleTensors,
  type WhatIfState,
} from "./state/whatif";
import { decorate } from "./state/whatifview";
import { GraphView, type Anchor } from "./view/graphview";
import { readTheme } from "./view/theme";
import { createDetails } from "./panels/details";
import { h } from "./panels/dom";
import { createToolbar } from "./panels/toolbar";
import { createWhatIfPanel } from "./panels/whatif";

interface Traits {
  graph_data: GraphPayload;
  expanded: string[];
  selected: string;
  height: number;
  /** What-if toggles (Python can read and set them). */
  toggles: Toggles;
  /** Last verified re-run ({} when none). */
  verified: Partial<Verification>;
  /** True when the widget can re-run the model (GraphWidget.from_fn). */
  can_verify: boolean;
}

/** Above this many visible elements, say that the graph is big (it still renders). */
export const BIG_GRAPH = 2500;
/** Expand-all refuses when it would draw more nodes than this. */
export const EXPAND_ALL_LIMIT = 3000;

const EMPTY: GraphPayload = {
  version: 1,
  nodes: [],
  edges: [],
  calls: [],
  ghosts: [],
  meta: { torch_version: "", captured: false, notes: [], num_nodes: 0, num_edges: 0 },
};

/** What tests (and the JupyterLab end-to-end test) reach through `root.__gradviz`. */
export interface DebugHook {
  cy: GraphView["cy"];
  visibleCounts(): VisibleCounts;
  expand(callId: string): Promise<void>;
  collapse(callId: string): Promise<void>;
  /** Resolves once the current layout (if any) has been drawn. */
  idle(): Promise<void>;
  /** Client coordinates to click: a collapsed box's centre, an expanded box's top edge. */
  boxPoint(callId: string): { x: number; y: number } | null;
  nodePoint(nodeId: string): { x: number; y: number } | null;
  lastLayoutMs(): number;
  /** The current what-if answer (for the current `toggles`). */
  whatIf(): WhatIfAnswer;
  whatIfMode(): boolean;
  setWhatIfMode(on: boolean): void;
  /** Client coordinates of an edge's midpoint; `edgeBetween` finds a drawn edge by its end keys. */
  edgePoint(edgeKey: string): { x: number; y: number } | null;
  edgeBetween(sourceKey: string, targetKey: string): string | null;
  /** Milliseconds from the last user toggle to its styles applied (what-if recomputed + restyled). */
  lastWhatIfMs(): number;
}

function render({ model, el }: Pick<RenderProps<Traits>, "model" | "el">): () => void {
  const root = h("div", { class: "gradviz-root", "data-testid": "gradviz-root" });
  const style = document.createElement("style");
  style.textContent = css;
  const canvas = h("div", { class: "gradviz-canvas", "data-testid": "gradviz-canvas" });
  const spinner = h("div", { class: "gradviz-spinner", "data-testid": "gradviz-spinner", role: "status" }, "laying out…");
  spinner.hidden = true;
  const body = h("div", { class: "gradviz-body" }, canvas, spinner);
  root.append(style);
  el.append(root);

  const theme = readTheme(root);
  let payload: GraphPayload = EMPTY;
  let index: CallIndex = indexCalls(EMPTY);
  let expanded = new Set<string>();
  let counts: VisibleCounts = { nodes: 0, collapsed: 0, expanded: 0, edges: 0 };
  let pending: Promise<unknown> = Promise.resolve();
  let running = 0;
  let toggles: Toggles = EMPTY_TOGGLES;
  let wiState: WhatIfState | null = null;
  let whatIfMode = false;
  let lastWhatIfMs = 0;

  const view = new GraphView(canvas, theme, {
    // A click on a box means open / close (it does not select: a panel popping up on every open
    // would cover the graph). Python can still select a call by setting `selected`.
    tap(key, kind, shift) {
      const id = key.slice(2);
      if (whatIfMode && kind !== "root" && kind !== "ghost") {
        if (kind === "leaf") userToggle(toggleItem(toggles, "freeze", id));
        else if (kind === "op") userToggle(toggleItem(toggles, "detach", id));
        else if (shift) userToggle(toggleItem(toggles, "freeze", CALL_PREFIX + id));
        else userToggle(toggleItem(toggles, "detach", CALL_PREFIX + id));
        return;
      }
      if (kind === "collapsed") changeExpanded(expand(expanded, id, index), key);
      else if (kind === "expanded") changeExpanded(collapse(expanded, id, index), key);
      else setSelected(id);
    },
    tapEdge(key) {
      const edge = view.shown?.edges.find((e) => e.key === key);
      if (!whatIfMode || !edge || edge.ghost) return;
      userToggle(toggleTensors(toggles, tensorsOfEdges(payload, edge.edges)));
    },
    background: () => setSelected(""),
  });
  const toolbar = createToolbar({
    fit: () => view.fit(),
    zoomReset: () => view.zoomReset(),
    expandAll() {
      if (payload.nodes.length > EXPAND_ALL_LIMIT) {
        toolbar.setMessage(
          `Expand all would draw ${payload.nodes.length} nodes (limit ${EXPAND_ALL_LIMIT}): open module boxes one at a time instead.`,
        );
        return;
      }
      changeExpanded(expandAll(index), null, true);
    },
    collapseAll: () => changeExpanded(new Set(), null, true),
    whatIf: () => setWhatIfMode(!whatIfMode),
  });
  const whatIfPanel = createWhatIfPanel({
    reset: () => userToggle({ detach: [], freeze: [] }),
    verify: () => model.send({ kind: "verify" }),
  });
  const details = createDetails(() => setSelected(""));
  body.append(details.element);
  root.append(toolbar.element, whatIfPanel.element, toolbar.info, toolbar.message, body);

  const setHeight = (): void => {
    body.style.height = `${Math.max(120, Number(model.get("height")) || 600)}px`;
    view.resize();
  };

  function relayout(options: { anchor?: Anchor; fit?: boolean }): void {
    const graph = visibleGraph(payload, expanded, index);
    counts = graph.counts;
    const shown = counts.nodes + counts.collapsed;
    toolbar.setCounts(
      `${plural(counts.nodes, "node")}` +
        (index.order.length ? ` · ${plural(counts.collapsed, "closed box")} · ${plural(counts.expanded, "open box")}` : ""),
    );
    toolbar.setMessage(
      shown > BIG_GRAPH
        ? `Large graph: ${shown} nodes on screen. Layout runs in the background; ` +
            (index.order.length ? "collapse module boxes to see less." : "capture modules (gv.capture) to get collapsible boxes.")
        : "",
    );
    root.dataset.visibleNodes = String(counts.nodes);
    root.dataset.visibleBoxes = String(counts.collapsed);
    root.dataset.expandedBoxes = String(counts.expanded);
    root.dataset.layout = "running";
    spinner.hidden = false;
    running++;
    const job = view
      .show(graph, options)
      .then((applied) => {
        if (applied) {
          root.dataset.layoutMs = String(Math.round(view.lastLayoutMs));
          showSelection();
          applyWhatIf();
        }
      })
      .catch((err: unknown) => {
        root.dataset.layout = "error";
        toolbar.setMessage(`Layout failed: ${err instanceof Error ? err.message : String(err)}`);
      })
      .finally(() => {
        if (--running === 0) {
          spinner.hidden = true;
          if (root.dataset.layout === "running") root.dataset.layout = "idle";
        }
      });
    pending = Promise.all([pending, job]);
  }

  function changeExpanded(next: Set<string>, anchorKey: string | null, fit = false): void {
    if (sameSet(next, expanded)) return;
    const anchor = anchorKey ? view.anchorOf(anchorKey) : undefined;
    expanded = next;
    model.set("expanded", canonical(expanded, index));
    model.save_changes();
    relayout({ anchor, fit });
  }

  function setSelected(id: string): void {
    if (model.get("selected") !== id) {
      model.set("selected", id);
      model.save_changes();
    }
    showSelection();
  }

  function showSelection(): void {
    const id = model.get("selected") || "";
    const node = id ? payload.nodes.find((n) => n.id === id) : undefined;
    const call = !node && id ? index.calls.get(id) : undefined;
    if (node) {
      details.show(nodeTitle(node), nodeDetails(node));
      view.select(nodeKey(node.id));
    } else if (call) {
      details.show(`${call.id} · ${call.type}`, callDetails(call, call.size || index.size.get(call.id) || 0));
      view.select(callKey(call.id));
    } else {
      details.hide();
      view.select(null);
    }
  }

  // --- What-if: recompute the answer, then restyle what is drawn (no re-layout). ---
  function recomputeWhatIf(): void {
    wiState = evaluate(payload, toggles);
    root.dataset.whatifLost = String(wiState.answer.lost.length);
    root.dataset.whatifRuns = String(wiState.answer.runs);
  }

  function applyWhatIf(): void {
    if (!wiState) recomputeWhatIf();
    const state = wiState!;
    if (view.shown) view.decorate(decorate(payload, view.shown, state, toggles));
    const toggled = !state.empty;
    whatIfPanel.update({
      visible: whatIfMode || toggled,
      mode: whatIfMode,
      summary: summaryText(payload, state),
      toggled,
      canVerify: !!model.get("can_verify"),
    });
    whatIfPanel.showVerification(model.get("verified"), toggles);
  }

  function userToggle(next: Toggles): void {
    const started = performance.now();
    toggles = next;
    model.set("toggles", { detach: [...next.detach], freeze: [...next.freeze] });
    model.save_changes();
    recomputeWhatIf();
    applyWhatIf();
    lastWhatIfMs = performance.now() - started;
    root.dataset.whatifMs = lastWhatIfMs.toFixed(1);
  }

  function setWhatIfMode(on: boolean): void {
    whatIfMode = on;
    root.dataset.whatifMode = String(on);
    toolbar.setWhatIfMode(on);
    view.setWhatIfMode(on);
    if (on) setSelected("");
    applyWhatIf();
  }

  const onToggles = (): void => {
    const incoming = normalizeToggles(model.get("toggles"));
    if (sameToggles(incoming, toggles)) return;
    toggles = incoming;
    recomputeWhatIf();
    applyWhatIf();
  };
  const onVerified = (): void => applyWhatIf();

  function loadPayload(): void {
    payload = model.get("graph_data") || EMPTY;
    index = indexCalls(payload);
    toggles = normalizeToggles(model.get("toggles"));
    recomputeWhatIf();
    expanded = new Set(canonical(model.get("expanded") || [], index));
    toolbar.setNotes(payload.meta?.notes ?? []);
    toolbar.setBoxesAvailable(index.order.length > 0);
    relayout({ fit: true });
  }

  const onExpanded = (): void => {
    const incoming = new Set(canonical(model.get("expanded") || [], index));
    if (sameSet(incoming, expanded)) return;
    expanded = incoming;
    relayout({ fit: true });
  };
  model.on("change:graph_data", loadPayload);
  model.on("change:expanded", onExpanded);
  model.on("change:selected", showSelection);
  model.on("change:height", setHeight);
  model.on("change:toggles", onToggles);
  model.on("change:verified", onVerified);
  model.on("change:can_verify", onVerified);
  const resizeObserver = new ResizeObserver(() => view.resize());
  resizeObserver.observe(body);

  const hook: DebugHook = {
    cy: view.cy,
    visibleCounts: () => ({ ...counts }),
    async expand(callId) {
      changeExpanded(expand(expanded, callId, index), callKey(callId));
      await pending;
    },
    async collapse(callId) {
      changeExpanded(collapse(expanded, callId, index), callKey(callId));
      await pending;
    },
    idle: () => pending.then(() => undefined),
    boxPoint: (callId) => view.clientPoint(callKey(callId)),
    nodePoint: (nodeId) => view.clientPoint(nodeKey(nodeId)),
    lastLayoutMs: () => view.lastLayoutMs,
    whatIf: () => {
      const a = (wiState ?? evaluate(payload, toggles)).answer;
      return { lost: [...a.lost], pruned: [...a.pruned], runs: a.runs, total: a.total };
    },
    whatIfMode: () => whatIfMode,
    setWhatIfMode,
    edgePoint: (key) => view.edgePoint(key),
    edgeBetween(s, t) {
      const e = view.shown?.edges.find((x) => x.source === s && x.target === t && !x.ghost);
      return e ? e.key : null;
    },
    lastWhatIfMs: () => lastWhatIfMs,
  };
  (root as HTMLElement & { __gradviz?: DebugHook }).__gradviz = hook;

  setHeight();
  loadPayload();

  return () => {
    model.off("change:graph_data", loadPayload);
    model.off("change:expanded", onExpanded);
    model.off("change:selected", showSelection);
    model.off("change:height", setHeight);
    model.off("change:toggles", onToggles);
    model.off("change:verified", onVerified);
    model.off("change:can_verify", onVerified);
    resizeObserver.disconnect();
    view.destroy();
    root.remove();
  };
}

export default { render } satisfies AnyWidget<Traits>;

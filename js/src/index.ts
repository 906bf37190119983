// anywidget entry: wires the synced traits (graph_data, expanded, unfolded, selected, height, toggles,
// verified, can_verify, overlay, recording, step, diff) to the view, and (lazy mode) asks Python for
// the contents of module calls before it draws them open.
// Traits hold all state, so a saved notebook or exported page rebuilds the same view with no kernel.
import type { AnyWidget, RenderProps } from "@anywidget/types";
import css from "./styles.css";
import type { GraphDiff, GraphNode, GraphPayload, Overlay, Recording, Toggles, Verification, WhatIfAnswer } from "./payload";
import { badgeText, diffDecorations, diffText, normalizeDiff, type DiffDecorations } from "./state/diff";
import { canonical, collapse, expand, expandAll, sameSet } from "./state/expansion";
import { callDetails, foldedText, nodeDetails, nodeTitle, plural } from "./state/labels";
import {
  callKey,
  callShown,
  indexCalls,
  nodeKey,
  representative,
  visibleGraph,
  type CallIndex,
  type VisibleCounts,
  type VisibleGraph,
} from "./state/quotient";
import { drawnItems, INITIAL_CAP, neighbourhood, refusalText, tooBigText, VIEW_CAP } from "./state/cap";
import {
  canonicalUnfolded,
  foldedCalls,
  foldedGroups,
  foldKey,
  groupsAround,
  indexFolds,
  NO_FOLDS,
  unfoldForExpanded,
  type FoldedCalls,
  type FoldIndex,
} from "./state/fold";
import { applyChunks, inflate, missingCalls, TOP, type LazyState } from "./state/lazy";
import { ChunkLoader } from "./state/loader";
import { search, type SearchHit } from "./state/search";
import { fmt } from "./state/numbers";
import { MARK_TEXT, normalizeOverlay, overlayDecorations, overlayText, type OverlayDecorations } from "./state/overlay";
import {
  clampCursor,
  indexRecording,
  nextCursor,
  normalizeRecording,
  passCursor,
  pendingLeaves,
  positionText,
  reserveLines,
  stepDecorations,
  stepDetails,
  stepForNode,
  INTRO,
  stepView,
  type RecordingIndex,
  type StepView,
} from "./state/stepper";
import { withUnit } from "./state/numbers";
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
  whatIfIndex,
  type WhatIfState,
} from "./state/whatif";
import { decorate, type Decorations } from "./state/whatifview";
import { GraphView, type Anchor, type Paint } from "./view/graphview";
import { readTheme } from "./view/theme";
import { createDetails } from "./panels/details";
import { h } from "./panels/dom";
import { createToolbar } from "./panels/toolbar";
import { createWhatIfPanel } from "./panels/whatif";
import { createLegend, createTooltip, type LegendSpec, type LegendSwatch } from "./panels/legend";
import { createStepper } from "./panels/stepper";
import { createDiffPanel } from "./panels/diff";
import { createSearch } from "./panels/search";

interface Traits {
  graph_data: GraphPayload;
  expanded: string[];
  /** Fold group ids the user unfolded (repeated-block stacks drawn as their single calls). */
  unfolded: string[];
  selected: string;
  height: number;
  /** What-if toggles (Python can read and set them). */
  toggles: Toggles;
  /** Last verified re-run ({} when none). */
  verified: Partial<Verification>;
  /** True when the widget can re-run the model (GraphWidget.from_fn). */
  can_verify: boolean;
  /** Per-node values and marks drawn over the graph ({} when none). */
  overlay: Partial<Overlay>;
  /** A recorded backward pass for the stepper ({} when none). */
  recording: Partial<Recording>;
  /** Stepper cursor: -1 before the first step, else an index into recording.steps. */
  step: number;
  /** Diff view: status per node of the merged before/after graph ({} when none). */
  diff: Partial<GraphDiff>;
}

/** Above this many visible elements, say that the graph is big (it still renders). */
export const BIG_GRAPH = 2500;
/** Expand-all (like any expand or unfold) refuses when it would draw more items than this. */
export const EXPAND_ALL_LIMIT = VIEW_CAP;

const EMPTY: GraphPayload = {
  version: 1,
  nodes: [],
  edges: [],
  calls: [],
  ghosts: [],
  meta: { torch_version: "", captured: false, notes: [], num_nodes: 0, num_edges: 0 },
};
const NOTHING: VisibleGraph = { items: [], edges: [], counts: { nodes: 0, collapsed: 0, expanded: 0, folded: 0, edges: 0 } };

/** What is open: expanded calls and unfolded fold groups. */
interface Disclosure {
  expanded: Set<string>;
  unfolded: Set<string>;
}

interface ChangeOptions {
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
}

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
  /** Overlay value and mark shown for an element key ("n:<id>", "c:<call id>"). */
  overlayOf(key: string): { value: number | null; mark: string | null; text: string };
  /** Diff view: an element's status ("n:<id>") or its box badge ("c:<call id>"), and tooltip text. */
  diffOf(key: string): { status: string | null; badge: string; text: string };
  /** The whole graph as an SVG document (the toolbar's SVG button saves the same). */
  toSVG(): string;
  /** The whole graph as a PNG data URL at `scale` (default 2). */
  toPNG(scale?: number): string;
  /** Lazy mode: call ids whose node records are loaded ("" = top level); [] when eager. */
  loaded(): string[];
  /** The search box's ranked hits for `q` (at most 50). */
  search(q: string): { key: string; label: string }[];
  /** Open, load and unfold what hides a node or call id, select it and centre on it. */
  reveal(id: string): Promise<void>;
  /** Unfold a fold group (as a click on its stacked box), resolves after the layout. */
  unfold(groupId: string): Promise<void>;
  /** Fold group ids currently drawn folded. */
  folded(): string[];
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
  let counts: VisibleCounts = { ...NOTHING.counts };
  // Folding: groups from the payload, the ones the user opened, and who is drawn folded now.
  let folds: FoldIndex = indexFolds(EMPTY, index);
  let unfolded = new Set<string>();
  let folded: FoldedCalls = NO_FOLDS;
  // Lazy mode (null when the payload is eager) and the requests for call contents.
  let lazy: LazyState | null = null;
  let loader = newLoader();
  let payloadGen = 0;
  // A first view too big to draw: nothing is drawn but the neighbourhood of a search pick (`focus`).
  let tooBig = false;
  let focus: string | null = null;
  // Disclosure changes run one after another (each may wait for a load).
  let changes: Promise<unknown> = Promise.resolve();
  let pending: Promise<unknown> = Promise.resolve();
  let running = 0;
  let toggles: Toggles = EMPTY_TOGGLES;
  let wiState: WhatIfState | null = null;
  let whatIfMode = false;
  let lastWhatIfMs = 0;
  let wiDeco: Decorations | null = null;
  // Stepper.
  let rix: RecordingIndex | null = null;
  let cursor = -1;
  let sv: StepView | null = null;
  let playing = false;
  let timer: ReturnType<typeof setInterval> | null = null;
  let speed = 2;
  let byModule = false;
  let lastStepMs = 0;
  let flowEdges: string[] = [];
  // Overlay.
  let overlay: Overlay | null = null;
  let ovDeco: OverlayDecorations | null = null;
  // Diff view.
  let diff: GraphDiff | null = null;
  let dfDeco: DiffDecorations | null = null;

  const view = new GraphView(canvas, theme, {
    // A click on a box means open / close (it does not select: a panel popping up on every open
    // would cover the graph). Python can still select a call by setting `selected`.
    tap(key, kind, shift) {
      const id = key.slice(2);
      // A folded stack is not a toggle target, even in what-if mode: a click unfolds it.
      if (kind === "folded") {
        void unfoldGroup(id);
        return;
      }
      if (whatIfMode && kind !== "root" && kind !== "ghost") {
        if (kind === "leaf") userToggle(toggleItem(toggles, "freeze", id));
        else if (kind === "op") userToggle(toggleItem(toggles, "detach", id));
        else if (shift) userToggle(toggleItem(toggles, "freeze", CALL_PREFIX + id));
        else userToggle(toggleItem(toggles, "detach", CALL_PREFIX + id));
        return;
      }
      if (rix && (kind === "op" || kind === "leaf")) {
        const at = stepForNode(rix, cursor, id);
        if (at !== null) {
          userSeek(at);
          return;
        }
      }
      if (kind === "collapsed") void openCall(id);
      else if (kind === "expanded") void closeCall(id);
      else setSelected(id);
    },
    tapEdge(key) {
      const edge = view.shown?.edges.find((e) => e.key === key);
      if (!whatIfMode || !edge || edge.ghost) return;
      userToggle(toggleTensors(toggles, tensorsOfEdges(payload, edge.edges)));
    },
    background: () => setSelected(""),
    hover(key, client) {
      if (!key) {
        tooltip.hide();
        return;
      }
      tooltip.show(tooltipText(key), client, body);
    },
  });
  const searchBox = createSearch({
    query(q) {
      const { hits, total } = search(payload, q);
      searchBox.show(hits, total);
    },
    pick: (hit) => void reveal(hit.id, hit),
    clear() {
      if (focus === null) return;
      focus = null;
      relayout({ fit: true });
    },
  });
  const toolbar = createToolbar(
    {
      fit: () => view.fit(),
      zoomReset: () => view.zoomReset(),
      relayout: () => relayout({}),
      expandAll: () =>
        void change(() => ({ expanded: expandAll(index), unfolded: new Set(folds.groups.keys()) }), { action: "Expand all", fit: true }),
      // Collapse all refolds every stack too.
      collapseAll: () => void change(() => ({ expanded: new Set(), unfolded: new Set() }), { action: "Collapse all", fit: true }),
      whatIf: () => setWhatIfMode(!whatIfMode),
      savePNG: () => download(view.toPNGBlob(2), "gradviz.png"),
      saveSVG: () => download(new Blob([view.toSVG()], { type: "image/svg+xml" }), "gradviz.svg"),
    },
    [searchBox.input],
  );
  const diffPanel = createDiffPanel();
  const whatIfPanel = createWhatIfPanel({
    reset: () => userToggle({ detach: [], freeze: [] }),
    verify: () => model.send({ kind: "verify" }),
  });
  const details = createDetails(() => setSelected(""));
  const stepper = createStepper({
    seek: (c) => userSeek(c),
    step: (dir) => userStep(dir),
    togglePlay: () => setPlaying(!playing),
    setSpeed(v) {
      speed = v;
      if (playing) setPlaying(true);
    },
    setPass: (p) => rix && userSeek(passCursor(rix, p)),
    setByModule: (on) => setByModule(on),
  });
  const legend = createLegend(() => {
    // Fits keep the legend's corner free of nodes.
    view.setBottomReserve(legend.element.hidden ? 0 : legend.element.offsetHeight + 8);
  });
  const tooltip = createTooltip();
  body.append(details.element, stepper.details, legend.element, tooltip.element, searchBox.results);
  root.append(toolbar.element, diffPanel.element, whatIfPanel.element, stepper.element, toolbar.info, toolbar.message, body);
  root.tabIndex = 0;
  // JupyterLab must not take the keys we handle while the widget has focus.
  root.setAttribute("data-lm-suppress-shortcuts", "true");

  const setHeight = (): void => {
    body.style.height = `${Math.max(120, Number(model.get("height")) || 600)}px`;
    view.resize();
  };

  /** What is drawn for the current state: the quotient graph, or (a first view too big to draw)
   *  nothing but the neighbourhood of the search pick. */
  function currentGraph(): VisibleGraph {
    if (!tooBig) return visibleGraph(payload, expanded, index, folded);
    return focus !== null ? neighbourhood(payload, focus) : NOTHING;
  }

  function viewMessage(shown: number): string {
    if (tooBig && focus === null) return tooBigText(drawnItems(visibleGraph(payload, expanded, index, folded).counts), index.order.length > 0);
    if (focus !== null) return `Showing the neighbourhood of ${focusName(focus)}; clear the search to go back.`;
    if (shown <= BIG_GRAPH) return "";
    return (
      `Large graph: ${shown} nodes on screen. Layout runs in the background; ` +
      (index.order.length ? "collapse module boxes to see less." : "capture modules (gv.capture) to get collapsible boxes.")
    );
  }

  /** Lay out and draw (`graph` when the caller already computed it); resolves once drawn. */
  function relayout(options: { anchor?: Anchor; fit?: boolean; incremental?: boolean }, graph = currentGraph()): Promise<void> {
    counts = graph.counts;
    const shown = counts.nodes + counts.collapsed;
    toolbar.setCounts(
      `${plural(counts.nodes, "node")}` +
        (index.order.length && !tooBig ? ` · ${plural(counts.collapsed, "closed box")} · ${plural(counts.expanded, "open box")}` : "") +
        (counts.folded ? ` · ${plural(counts.folded, "folded stack")}` : ""),
    );
    toolbar.setMessage(viewMessage(shown));
    root.dataset.visibleNodes = String(counts.nodes);
    root.dataset.visibleBoxes = String(counts.collapsed);
    root.dataset.expandedBoxes = String(counts.expanded);
    root.dataset.foldedBoxes = String(counts.folded);
    root.dataset.layout = "running";
    setSpinner("laying out…");
    view.setReserve(rix ? reserveFor(rix) : null);
    running++;
    const job = view
      .show(graph, options)
      .then((applied) => {
        if (applied) {
          root.dataset.layoutMs = String(Math.round(view.lastLayoutMs));
          root.dataset.simpleLayout = String(view.simpleLayout);
          root.dataset.layoutIncremental = String(view.lastLayoutIncremental);
          if (view.simpleLayout) {
            toolbar.setMessage(
              `Large graph: ${shown} items on screen, drawn with a plain layered layout (straight edges; open ` +
                "boxes may overlap). " +
                (index.order.length ? "Collapse module boxes for the full layout." : "Capture modules (gv.capture) to get collapsible boxes."),
            );
          }
          wiDeco = null;
          showSelection();
          applyWhatIf();
          // The legend appeared (or changed size) with this paint: fit again around it.
          if (options.fit && !options.anchor) view.fitReadable();
        }
      })
      .catch((err: unknown) => {
        root.dataset.layout = "error";
        toolbar.setMessage(`Layout failed: ${err instanceof Error ? err.message : String(err)}`);
      })
      .finally(() => {
        if (--running === 0) {
          setSpinner(null);
          if (root.dataset.layout === "running") root.dataset.layout = "idle";
        }
      });
    pending = Promise.all([pending, job]);
    return job;
  }

  function setSpinner(text: string | null): void {
    if (text !== null) spinner.textContent = text;
    spinner.hidden = text === null;
  }

  function newLoader(): ChunkLoader {
    return new ChunkLoader({
      send: (msg) => model.send(msg),
      apply(chunks) {
        if (lazy) applyChunks(payload, lazy, chunks);
      },
      isLoaded: (call) => !lazy || lazy.loaded.has(call),
    });
  }

  /** Load the contents of `calls` (lazy mode), with the spinner up; false (and a message) on failure. */
  async function ensureLoaded(calls: string[]): Promise<boolean> {
    if (!lazy || !calls.length) return true;
    const gen = payloadGen;
    root.dataset.loading = "true";
    setSpinner("loading…");
    try {
      await loader.load(calls);
      return gen === payloadGen;
    } catch (err) {
      if (gen === payloadGen) toolbar.setMessage(err instanceof Error ? err.message : String(err));
      return false;
    } finally {
      root.dataset.loading = String(loader.busy);
      if (running === 0 && !loader.busy) setSpinner(null);
    }
  }

  /** Change what is open, in order with other changes: the cap is checked on the would-be counts
   *  (no layout), missing contents are loaded, then the view is laid out. Resolves true when drawn. */
  function change(step: (cur: Disclosure) => Disclosure, options: ChangeOptions): Promise<boolean> {
    const run = async (): Promise<boolean> => {
      const gen = payloadGen;
      const next = step({ expanded, unfolded });
      next.unfolded = unfoldForExpanded(next.unfolded, next.expanded, folds, index);
      const same = sameSet(next.expanded, expanded) && sameSet(next.unfolded, unfolded);
      if (same && !options.initial) return true;
      const nextFolded = foldedCalls(folds, next.expanded, next.unfolded);
      let graph = visibleGraph(payload, next.expanded, index, nextFolded);
      const items = drawnItems(graph.counts);
      // Past the cap only changes that draw less go through; a first view is drawn up to INITIAL_CAP.
      let nextTooBig = false;
      if (options.initial) nextTooBig = items > INITIAL_CAP;
      else if (items > VIEW_CAP && (tooBig || items > drawnItems(counts))) {
        toolbar.setMessage(refusalText(options.action, items));
        if (options.fromTrait) saveDisclosure();
        return false;
      }
      const loadedBefore = lazy?.loaded.size ?? 0;
      if (!nextTooBig && !(await ensureLoaded(missingCalls(lazy, next.expanded)))) {
        if (options.fromTrait && gen === payloadGen) saveDisclosure();
        // A first view that cannot load what the traits open still draws the top level.
        if (options.initial && gen === payloadGen && next.expanded.size) {
          void change(() => ({ expanded: new Set(), unfolded: next.unfolded }), options);
        }
        return false;
      }
      if (gen !== payloadGen) return false;
      const anchor = options.anchor?.();
      if (nextTooBig !== tooBig || options.initial) focus = null;
      tooBig = nextTooBig;
      expanded = next.expanded;
      unfolded = next.unfolded;
      folded = nextFolded;
      saveDisclosure();
      // Loaded records replaced placeholders: the items must point at the new ones.
      if ((lazy && lazy.loaded.size !== loadedBefore) || tooBig) graph = currentGraph();
      await relayout({ anchor, fit: options.fit, incremental: options.incremental }, graph);
      return true;
    };
    const job = changes.then(run).catch((err: unknown) => {
      toolbar.setMessage(`Could not update the view: ${err instanceof Error ? err.message : String(err)}`);
      return false;
    });
    changes = job;
    pending = Promise.all([pending, job]);
    return job;
  }

  /** Write `expanded` and `unfolded` back to the traits (canonical forms; no-op when unchanged). */
  function saveDisclosure(): void {
    const e = canonical(expanded, index);
    const u = canonicalUnfolded(unfolded, folds);
    const had = model.get("expanded") || [];
    const hadU = model.get("unfolded") || [];
    if (JSON.stringify(e) === JSON.stringify(had) && JSON.stringify(u) === JSON.stringify(hadU)) return;
    model.set("expanded", e);
    model.set("unfolded", u);
    model.save_changes();
  }

  const keepAt = (key: string) => (): Anchor | undefined => view.anchorOf(key);

  function openCall(id: string): Promise<boolean> {
    return change((cur) => ({ expanded: expand(cur.expanded, id, index), unfolded: cur.unfolded }), {
      action: `Opening ${id}`,
      anchor: keepAt(callKey(id)),
      incremental: true,
    });
  }

  function closeCall(id: string): Promise<boolean> {
    return change((cur) => ({ expanded: collapse(cur.expanded, id, index), unfolded: cur.unfolded }), {
      action: `Closing ${id}`,
      anchor: keepAt(callKey(id)),
      incremental: true,
    });
  }

  /** Unfold a stack: its first call's box takes the stack's place on screen. */
  function unfoldGroup(groupId: string): Promise<boolean> {
    const group = folds.groups.get(groupId);
    if (!group) return Promise.resolve(false);
    const type = index.calls.get(group.calls[0])?.type ?? "";
    return change((cur) => ({ expanded: cur.expanded, unfolded: new Set([...cur.unfolded, groupId]) }), {
      action: `Unfolding ${group.calls.length} × ${type}`,
      anchor() {
        const at = view.anchorOf(foldKey(groupId));
        return at ? { key: callKey(group.calls[0]), rendered: at.rendered } : undefined;
      },
      incremental: true,
    });
  }

  const nodeAt = (id: string): number | undefined => whatIfIndex(payload).pos.get(id);
  const nodeById = (id: string): GraphNode | undefined => {
    const i = nodeAt(id);
    return i === undefined ? undefined : payload.nodes[i];
  };
  function focusName(id: string): string {
    const n = nodeById(id);
    return n ? nodeTitle(n) : id;
  }

  /** Whether node or call `id` is drawn as itself now. */
  function isDrawn(id: string): boolean {
    const node = nodeById(id);
    if (tooBig) return focus !== null && !!node && neighbourhoodHas(id);
    if (node) return representative(node, index, expanded, folded) === nodeKey(id);
    return callShown(id, index, expanded, folded);
  }
  const neighbourhoodHas = (id: string): boolean => !!view.shown?.items.some((i) => i.key === nodeKey(id));

  /** Bring node or call `id` on screen: open (and load) the calls around it, unfold its stack,
   *  select it and centre on it at a readable zoom. */
  async function reveal(id: string, hit?: SearchHit): Promise<void> {
    const node = nodeById(id);
    const call = node ? node.call : index.calls.has(id) ? id : null;
    if (!node && call === null) return;
    if (tooBig) {
      // Nothing but neighbourhoods is drawn: show the match's (a box: its first node's).
      const target = node ?? payload.nodes.find((n) => n.call === id || (index.chain.get(n.call) ?? []).includes(id));
      if (!target) return;
      focus = target.id;
      const graph = neighbourhood(payload, target.id);
      const calls = new Set<string>(graph.items.map((i) => (i.type === "node" ? i.node.call : TOP)));
      if (!(await ensureLoaded(missingCalls(lazy, calls)))) return;
      await relayout({ fit: true });
      setSelected(target.id);
      centreOn(nodeKey(target.id));
      return;
    }
    const chain = call ? (index.chain.get(call) ?? []) : [];
    // A node needs every call around it open; a call needs its ancestors open (it stays a box).
    const open = node ? chain : chain.slice(0, -1);
    const label = hit?.label ?? id;
    const ok = await change(
      (cur) => ({ expanded: new Set([...cur.expanded, ...open]), unfolded: new Set([...cur.unfolded, ...(call ? groupsAround(call, folds, index) : [])]) }),
      { action: `Showing ${label}`, incremental: true },
    );
    if (!ok) return;
    setSelected(id);
    centreOn(node ? nodeKey(id) : callKey(id));
  }

  /** Centre the viewport on an element, zooming in to at least 1:1 so its label reads. */
  function centreOn(key: string): void {
    const ele = view.cy.getElementById(key);
    if (ele.empty()) return;
    view.cy.zoom(Math.max(view.cy.zoom(), 1));
    view.cy.center(ele);
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
    const node = id ? nodeById(id) : undefined;
    const call = !node && id ? index.calls.get(id) : undefined;
    if (node) {
      const rows = nodeDetails(node);
      const st = diff?.status[node.id];
      if (diff && st) {
        rows.push(["diff", st]);
        if (diff.why[node.id]) rows.push(["why", diff.why[node.id]]);
        const mem = diff.memory[node.id];
        if (mem) rows.push(["saved for backward", `${withUnit(mem[0], "B")} → ${withUnit(mem[1], "B")}`]);
      }
      details.show(nodeTitle(node), rows);
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
    repaint();
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

  /** Merge what-if, overlay and stepper decorations into one class string and label per element,
   *  and apply them (styles only). */
  function repaint(): void {
    const shown = view.shown;
    if (!shown) return;
    if (!wiDeco) wiDeco = decorate(payload, shown, wiState ?? evaluate(payload, toggles), toggles);
    ovDeco = overlay ? overlayDecorations(payload, shown, overlay, index) : null;
    dfDeco = diff ? diffDecorations(payload, shown, diff, index) : null;
    sv = rix ? stepView(rix, cursor) : null;
    const stepColours = !!rix && cursor >= 0;
    const st = rix && sv ? stepDecorations(rix, sv, shown, repOf) : null;
    const paint: Paint = { classes: new Map(), labels: new Map(), sizes: new Map(), edgeLabels: st?.edgeLabels ?? new Map(), suffixes: ovDeco?.suffix ?? new Map() };
    const addAll = (m: Map<string, string> | undefined, keep?: (cls: string) => boolean): void => {
      if (!m) return;
      for (const [k, v] of m) {
        const cls = keep ? v.split(" ").filter(keep).join(" ") : v;
        if (!cls) continue;
        const have = paint.classes.get(k);
        paint.classes.set(k, have ? have + " " + cls : cls);
      }
    };
    addAll(wiDeco.classes);
    addAll(dfDeco?.classes);
    addAll(ovDeco?.classes, stepColours ? (c) => !c.startsWith("heat-") : undefined);
    addAll(st?.classes);
    if (dfDeco) for (const [k, v] of dfDeco.labels) paint.labels.set(k, v);
    // What-if marks go inside the diff's ("+ ❄ name"): templates compose through "{base}".
    for (const [k, v] of wiDeco.labels) paint.labels.set(k, paint.labels.has(k) ? paint.labels.get(k)!.split("{base}").join(v) : v);
    if (st) for (const [k, lines] of st.lines) paint.labels.set(k, (paint.labels.get(k) ?? "{base}") + "\n" + lines.join("\n"));
    if (ovDeco && overlay?.encoding === "size" && !stepColours) for (const [k, f] of ovDeco.scale) paint.sizes.set(k, f);
    view.paint(paint);
    flowEdges = st ? [...st.edgeLabels.keys()] : [];
    legend.show(legendSpec(stepColours));
    updateStepperPanel();
  }

  function legendSpec(stepColours: boolean): LegendSpec | null {
    if (rix && (stepColours || !overlay)) {
      const sc = rix.scale;
      return {
        title: "gradient each node received (‖·‖, log scale)",
        scaleText: "",
        min: sc ? fmt(sc.min) : "—",
        max: sc ? fmt(sc.max) : "—",
        ramp: true,
        items: [
          ["run", "running now"],
          ["flow", "gradient sent now"],
          ["neutral", "not run yet"],
          ["zero", "zero"],
        ],
      };
    }
    if (!overlay) return diff ? diffLegend() : null;
    const r = ovDeco?.range ?? null;
    const items: [LegendSwatch, string][] = [];
    const present = new Set(Object.values(overlay.marks));
    for (const m of ["no-grad", "nan", "flag"] as const) if (present.has(m)) items.push([m, MARK_TEXT[m]]);
    return {
      title: overlay.title || "value",
      scaleText: overlay.encoding === "size" ? `node size grows with the value (${overlay.scale} scale)` : `${overlay.scale} scale`,
      min: r ? withUnit(r.min, overlay.unit) : "—",
      max: r ? withUnit(r.max, overlay.unit) : "—",
      ramp: overlay.encoding !== "size",
      items,
    };
  }

  function diffLegend(): LegendSpec {
    const items: [LegendSwatch, string][] = [
      ["added", "added (only after)"],
      ["removed", "removed (only before)"],
      ["changed", "changed"],
      ["neutral", "the same"],
    ];
    if (diff?.gained.length) items.push(["gained", "leaf gains a gradient path"]);
    if (diff?.lost.length) items.push(["lost", "leaf loses its gradient path"]);
    items.push(["box", "box with changes inside (Δ)"]);
    return { title: "diff: before → after", scaleText: "", min: "", max: "", ramp: false, items };
  }

  function showDiff(): void {
    if (!diff) {
      diffPanel.show("", null);
      return;
    }
    const counts = { added: 0, removed: 0, changed: 0 };
    for (const st of Object.values(diff.status)) if (st !== "same") counts[st]++;
    diffPanel.show(`Diff: ${counts.added} added · ${counts.removed} removed · ${counts.changed} changed`, diff.summary);
  }

  function tooltipText(key: string): string {
    const parts: string[] = [];
    if (key.startsWith("f:")) {
      const item = view.shown?.items.find((i) => i.key === key);
      if (item?.type === "folded") parts.push(foldedText(item.calls, item.size));
    }
    if (diff && dfDeco) {
      const t = diffText(diff, dfDeco, key);
      if (t) parts.push(t);
    }
    if (overlay && ovDeco) {
      const t = overlayText(overlay, ovDeco.values.get(key), ovDeco.marks.get(key));
      if (t) parts.push(t);
    }
    if (rix && sv && key.startsWith("n:")) {
      const r = sv.ran.get(key.slice(2));
      if (r) parts.push(`gradient received: ‖·‖ ${r.nonfinite ? "NaN/Inf" : fmt(r.norm)}`);
    }
    return parts.join(" · ");
  }

  // --- Stepper ---
  const repOf = (nodeId: string): string => {
    const n = rix?.nodes.get(nodeId);
    return n ? representative(n, index, expanded, folded) : nodeKey(nodeId);
  };

  function reserveFor(ix: RecordingIndex): (key: string) => string[][] | null {
    return (key) => (key.startsWith("n:") ? reserveLines(ix, key.slice(2)) : null);
  }

  function updateStepperPanel(): void {
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
      playing,
      position: positionText(rix, sv),
      pending: pendingLeaves(rix, sv),
      boxes: index.order.length > 0,
    });
    stepper.showDetails(stepDetails(rix, sv) ?? INTRO);
    details.hide();
  }

  /** Move the cursor and repaint (styles only); `save` when the user moved it. */
  function seek(c: number, save: boolean): void {
    if (!rix) return;
    const started = performance.now();
    const next = clampCursor(rix, c);
    const changed = next !== cursor;
    cursor = next;
    if (save && Number(model.get("step")) !== cursor) {
      model.set("step", cursor);
      model.save_changes();
    }
    if (changed || save) repaint();
    if (changed && sv?.step) view.ensureVisible(repOf(sv.step.node), { side: 30, top: 30, bottom: 110 });
    lastStepMs = performance.now() - started;
    root.dataset.stepMs = lastStepMs.toFixed(1);
  }

  function userSeek(c: number): void {
    seek(c, true);
  }

  function userStep(dir: 1 | -1): void {
    if (!rix) return;
    userSeek(nextCursor(rix, cursor, dir, byModule ? repOf : undefined));
  }

  function setPlaying(on: boolean): void {
    if (timer) clearInterval(timer);
    timer = null;
    playing = on && !!rix;
    if (playing && rix) {
      if (cursor >= rix.steps.length - 1) userSeek(-1);
      timer = setInterval(() => {
        if (!rix || cursor >= rix.steps.length - 1) {
          setPlaying(false);
          return;
        }
        userStep(1);
        if (rix && cursor >= rix.steps.length - 1) setPlaying(false);
      }, 1000 / speed);
    }
    root.dataset.playing = String(playing);
    updateStepperPanel();
  }

  function setByModule(on: boolean): void {
    byModule = on;
    updateStepperPanel();
  }

  function loadRecording(): void {
    const rec = normalizeRecording(model.get("recording"));
    setPlaying(false);
    rix = rec ? indexRecording(rec, payload) : null;
    cursor = rix ? clampCursor(rix, Number(model.get("step") ?? -1)) : -1;
    body.classList.toggle("gradviz-with-side", !!rix);
    view.resize();
  }

  const onRecording = (): void => {
    loadRecording();
    relayout({}); // node sizes depend on the recording's "data | grad" lines
  };
  const onStep = (): void => {
    if (!rix) return;
    const c = clampCursor(rix, Number(model.get("step")));
    if (c !== cursor) seek(c, false);
  };
  const onOverlay = (): void => {
    overlay = normalizeOverlay(model.get("overlay"));
    repaint();
  };
  const onDiff = (): void => {
    diff = normalizeDiff(model.get("diff"));
    showDiff();
    repaint();
    showSelection();
  };

  const onKey = (e: KeyboardEvent): void => {
    if (!rix || e.altKey || e.ctrlKey || e.metaKey) return;
    const target = e.target as HTMLElement | null;
    const tag = target?.tagName ?? "";
    const isRange = tag === "INPUT" && (target as HTMLInputElement).type === "range";
    if ((e.key === "ArrowRight" || e.key === "ArrowLeft") && !isRange && tag !== "SELECT") {
      userStep(e.key === "ArrowRight" ? 1 : -1);
    } else if ((e.key === " " || e.key === "Spacebar") && !["BUTTON", "INPUT", "SELECT", "TEXTAREA"].includes(tag)) {
      setPlaying(!playing);
    } else return;
    e.preventDefault();
    e.stopPropagation();
  };
  const onPointerDown = (e: Event): void => {
    const tag = (e.target as HTMLElement | null)?.tagName ?? "";
    if (!["BUTTON", "INPUT", "SELECT", "TEXTAREA", "OPTION"].includes(tag)) root.focus({ preventScroll: true });
  };
  root.addEventListener("keydown", onKey);
  // Cytoscape blurs the focused element on mousedown: take the focus when the button comes up.
  root.addEventListener("pointerup", onPointerDown, { capture: true });

  function userToggle(next: Toggles): void {
    const started = performance.now();
    toggles = next;
    model.set("toggles", { detach: [...next.detach], freeze: [...next.freeze] });
    model.save_changes();
    recomputeWhatIf();
    wiDeco = null;
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
    wiDeco = null;
    applyWhatIf();
  };
  const onVerified = (): void => applyWhatIf();

  function loadPayload(): void {
    // Requests for the old payload's contents are dropped (their replies, if any, are stale).
    payloadGen++;
    loader.dispose();
    loader = newLoader();
    ({ payload, lazy } = inflate(model.get("graph_data") || EMPTY));
    index = indexCalls(payload);
    folds = indexFolds(payload, index);
    toggles = normalizeToggles(model.get("toggles"));
    recomputeWhatIf();
    wiDeco = null;
    overlay = normalizeOverlay(model.get("overlay"));
    diff = normalizeDiff(model.get("diff"));
    showDiff();
    loadRecording();
    // Nothing is open until the first view is loaded and checked against the cap.
    expanded = new Set();
    unfolded = new Set();
    folded = foldedCalls(folds, expanded, unfolded);
    toolbar.setNotes(payload.meta?.notes ?? []);
    toolbar.setBoxesAvailable(index.order.length > 0);
    const wanted: Disclosure = {
      expanded: new Set(canonical(model.get("expanded") || [], index)),
      unfolded: new Set(model.get("unfolded") || []),
    };
    void change(() => wanted, { action: "Drawing the graph", fit: true, initial: true, fromTrait: true });
  }

  const onExpanded = (): void => {
    const incoming = new Set(canonical(model.get("expanded") || [], index));
    void change((cur) => ({ expanded: incoming, unfolded: cur.unfolded }), { action: "Opening the requested boxes", fit: true, fromTrait: true });
  };
  const onUnfolded = (): void => {
    const incoming = new Set<string>(model.get("unfolded") || []);
    void change((cur) => ({ expanded: cur.expanded, unfolded: incoming }), { action: "Unfolding the requested stacks", incremental: true, fromTrait: true });
  };
  /** Python (or a user click) chose an element: one hidden in a closed box or stack is revealed. */
  const onSelected = (): void => {
    const id = model.get("selected") || "";
    if (id && !isDrawn(id)) void reveal(id);
    else showSelection();
  };
  const onCustom = (msg: unknown): void => loader.receive(msg);
  model.on("change:graph_data", loadPayload);
  model.on("change:expanded", onExpanded);
  model.on("change:unfolded", onUnfolded);
  model.on("change:selected", onSelected);
  model.on("msg:custom", onCustom);
  model.on("change:height", setHeight);
  model.on("change:toggles", onToggles);
  model.on("change:verified", onVerified);
  model.on("change:can_verify", onVerified);
  model.on("change:overlay", onOverlay);
  model.on("change:recording", onRecording);
  model.on("change:step", onStep);
  model.on("change:diff", onDiff);
  const hideTooltip = (): void => tooltip.hide();
  canvas.addEventListener("mouseleave", hideTooltip);
  const resizeObserver = new ResizeObserver(() => view.resize());
  resizeObserver.observe(body);

  const hook: DebugHook = {
    cy: view.cy,
    visibleCounts: () => ({ ...counts }),
    async expand(callId) {
      await openCall(callId);
      await pending;
    },
    async collapse(callId) {
      await closeCall(callId);
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
    stepTo: (c) => userSeek(c),
    currentStep: () => cursor,
    stepInfo: () => ({
      cursor,
      pass: rix ? (sv?.pass ?? 0) : 0,
      node: sv?.step ? sv.step.node : null,
      flowEdges: [...flowEdges],
      playing,
      byModule,
    }),
    setByModule,
    lastStepMs: () => lastStepMs,
    overlayOf(key) {
      const value = ovDeco?.values.get(key);
      const mark = ovDeco?.marks.get(key);
      return {
        value: value ?? null,
        mark: mark ?? null,
        text: overlay ? overlayText(overlay, value, mark) : "",
      };
    },
    diffOf(key) {
      const status = key.startsWith("n:") ? (dfDeco?.status.get(key) ?? null) : null;
      const box = dfDeco?.boxes.get(key);
      return {
        status,
        badge: box ? badgeText(box) : "",
        text: diff && dfDeco ? diffText(diff, dfDeco, key) : "",
      };
    },
    toSVG: () => view.toSVG(),
    toPNG: (scale) => view.toPNG(scale ?? 2),
    loaded: () => (lazy ? [...lazy.loaded].sort() : []),
    search: (q) => search(payload, q).hits.map((h) => ({ key: h.key, label: h.label })),
    async reveal(id) {
      await reveal(id);
      await pending;
    },
    async unfold(groupId) {
      await unfoldGroup(groupId);
      await pending;
    },
    folded: () => foldedGroups(folded),
  };
  (root as HTMLElement & { __gradviz?: DebugHook }).__gradviz = hook;

  setHeight();
  loadPayload();

  return () => {
    model.off("change:graph_data", loadPayload);
    model.off("change:expanded", onExpanded);
    model.off("change:unfolded", onUnfolded);
    model.off("change:selected", onSelected);
    model.off("msg:custom", onCustom);
    loader.dispose();
    searchBox.dispose();
    model.off("change:height", setHeight);
    model.off("change:toggles", onToggles);
    model.off("change:verified", onVerified);
    model.off("change:can_verify", onVerified);
    model.off("change:overlay", onOverlay);
    model.off("change:recording", onRecording);
    model.off("change:step", onStep);
    model.off("change:diff", onDiff);
    if (timer) clearInterval(timer);
    root.removeEventListener("keydown", onKey);
    root.removeEventListener("pointerup", onPointerDown, { capture: true });
    canvas.removeEventListener("mouseleave", hideTooltip);
    resizeObserver.disconnect();
    view.destroy();
    root.remove();
  };
}

/** Save `blob` as a file through the browser's download (a temporary blob: link). */
function download(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  a.style.display = "none";
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export default { render } satisfies AnyWidget<Traits>;

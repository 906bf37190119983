// Toolbar (fit, zoom reset, re-layout, expand / collapse all, PNG / SVG download, the features' tools
// such as what-if and search, the zoom chip, counts) and the status line under it, which holds the
// view's message and the payload's notes beside the features' headlines.
import { h, setText } from "./dom";
import { createStatusLine, RANK, type StatusLine } from "./status";

/** The note Python adds to a graph traced without module capture (`tracing/trace.py`). */
export const NO_BOXES_NOTE = "No module boxes";
/** Below this many nodes, module boxes would not help reading the graph: that note is left out. */
export const BOXES_HELP_FROM = 25;

/** The notes worth a line for a graph of `nodes` nodes (the no-capture note only on a big one). */
export function notesToShow(notes: readonly string[], nodes: number): string[] {
  return notes.filter((n) => !(n.startsWith(NO_BOXES_NOTE) && nodes <= BOXES_HELP_FROM));
}

export interface ToolbarActions {
  fit(): void;
  zoomReset(): void;
  /** A full layout of what is drawn (incremental placement can get untidy), keeping the zoom. */
  relayout(): void;
  expandAll(): void;
  collapseAll(): void;
  /** Download the whole graph as PNG / SVG. */
  savePNG(): void;
  saveSVG(): void;
}

export interface ZoomState {
  percent: number;
  fits: boolean;
  outside: string;
}

export function zoomChipText(state: ZoomState): string {
  const pct = `${Math.round(state.percent)}%`;
  return state.fits ? `${pct} · whole graph` : `${pct} fits ⤢`;
}

export interface Toolbar {
  element: HTMLElement;
  /** The status line (message, notes and the features' headlines): one line, an expander for the rest. */
  status: StatusLine;
  info: HTMLElement;
  message: HTMLElement;
  setCounts(text: string): void;
  /** `nodes`: how many nodes the graph has (the no-capture note shows only above `BOXES_HELP_FROM`). */
  setNotes(notes: readonly string[], nodes?: number): void;
  setMessage(text: string): void;
  setBoxesAvailable(available: boolean): void;
  /** The zoom chip: `fits` false means the view shows part of the graph and the whole of it fits at
   *  `percent` ("76% fits ⤢"); `fits` true means the whole graph is in view at `percent`
   *  ("100% · whole graph"). `outside` (what the view leaves out) is its tooltip; a click fits. Null hides it. */
  setZoom(state: ZoomState | null): void;
  /** Where features put their own controls (what-if, search), before the counts. */
  tools: HTMLElement;
}

export function createToolbar(actions: ToolbarActions): Toolbar {
  const button = (label: string, testid: string, title: string, onClick: () => void): HTMLButtonElement => {
    const b = h("button", { type: "button", "data-testid": testid, title }, label);
    b.addEventListener("click", onClick);
    return b;
  };
  const expandAll = button("Expand all", "gradviz-expand-all", "Open every module box", actions.expandAll);
  const collapseAll = button("Collapse all", "gradviz-collapse-all", "Close every module box", actions.collapseAll);
  const tools = h("span", { class: "gradviz-tools" });
  const counts = h("span", { class: "gradviz-counts", "data-testid": "gradviz-counts" });
  const zoom = button("", "gradviz-zoom-chip", "", actions.fit);
  zoom.classList.add("gradviz-zoom-chip");
  zoom.hidden = true;
  const element = h(
    "div",
    { class: "gradviz-toolbar", "data-testid": "gradviz-toolbar" },
    button("Fit", "gradviz-fit", "Fit the whole graph in view", actions.fit),
    button("1:1", "gradviz-zoom-reset", "Reset zoom to 100%", actions.zoomReset),
    button("Re-layout", "gradviz-relayout", "Lay the whole view out again (keeps the zoom)", actions.relayout),
    expandAll,
    collapseAll,
    button("PNG", "gradviz-png", "Download the whole graph as a PNG image", actions.savePNG),
    button("SVG", "gradviz-svg", "Download the whole graph as an SVG image", actions.saveSVG),
    tools,
    counts,
    zoom,
  );
  const info = h("div", { class: "gradviz-info", "data-testid": "gradviz-notes" });
  info.hidden = true;
  const message = h("div", { class: "gradviz-message", "data-testid": "gradviz-message", role: "status" });
  message.hidden = true;
  const status = createStatusLine();
  status.add(message, RANK.message);
  status.add(info, RANK.notes);
  return {
    element,
    status,
    info,
    message,
    setCounts(text) {
      setText(counts, text);
      counts.title = text; // the line may cut it short
    },
    setNotes(notes, nodes = Infinity) {
      const shown = notesToShow(notes, nodes);
      info.replaceChildren(...shown.map((n) => h("p", {}, n)));
      info.hidden = shown.length === 0;
    },
    setMessage(text) {
      delete message.dataset.kind;
      setText(message, text);
      message.hidden = !text;
    },
    setBoxesAvailable(available) {
      expandAll.disabled = !available;
      collapseAll.disabled = !available;
      expandAll.hidden = !available;
      collapseAll.hidden = !available;
    },
    setZoom(state) {
      zoom.hidden = !state;
      if (!state) return;
      setText(zoom, zoomChipText(state));
      zoom.title = state.outside || (state.fits ? "The whole graph is in view" : "Fit the whole graph in view");
      zoom.dataset.fits = String(state.fits);
      zoom.dataset.percent = String(Math.round(state.percent));
    },
    tools,
  };
}

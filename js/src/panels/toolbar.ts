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
  /** The zoom chip: the whole graph, whatever the zoom it takes. */
  fitWhole(): void;
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
  /** Stop listening to the page (the menu's outside clicks). */
  dispose(): void;
}

/** The toolbar's one row, down to a ~900 px cell: Fit and 1:1, a "⋯" menu with the rarer actions
 *  (re-layout, expand / collapse all, downloads), the features' tools, the counts (cut short first) and
 *  the zoom chip (never cut). */
export function createToolbar(actions: ToolbarActions): Toolbar {
  const button = (label: string, testid: string, title: string, onClick: () => void): HTMLButtonElement => {
    const b = h("button", { type: "button", "data-testid": testid, title }, label);
    b.addEventListener("click", onClick);
    return b;
  };
  const menu = h("div", { class: "gradviz-menu", role: "menu", "data-testid": "gradviz-menu" });
  menu.hidden = true;
  const more = h("button", {
    type: "button", class: "gradviz-more", "data-testid": "gradviz-more", title: "More: re-layout, open or close every box, download",
    "aria-haspopup": "menu", "aria-expanded": "false", "aria-label": "More actions",
  }, "⋯");
  const setMenu = (open: boolean): void => {
    menu.hidden = !open;
    more.setAttribute("aria-expanded", String(open));
  };
  more.addEventListener("click", (e) => {
    e.stopPropagation();
    setMenu(menu.hidden);
  });
  const item = (label: string, testid: string, title: string, onClick: () => void): HTMLButtonElement =>
    button(label, testid, title, () => {
      setMenu(false);
      onClick();
    });
  const expandAll = item("Expand all boxes", "gradviz-expand-all", "Open every module box", actions.expandAll);
  const collapseAll = item("Collapse all boxes", "gradviz-collapse-all", "Close every module box", actions.collapseAll);
  for (const b of [expandAll, collapseAll]) b.setAttribute("role", "menuitem");
  menu.append(
    item("Re-layout", "gradviz-relayout", "Lay the whole view out again (keeps the zoom)", actions.relayout),
    expandAll,
    collapseAll,
    item("Download PNG", "gradviz-png", "Download the whole graph as a PNG image", actions.savePNG),
    item("Download SVG", "gradviz-svg", "Download the whole graph as an SVG image", actions.saveSVG),
  );
  for (const b of menu.querySelectorAll("button")) b.setAttribute("role", "menuitem");
  const moreWrap = h("span", { class: "gradviz-more-wrap" }, more, menu);
  // A click anywhere else, or Escape, closes the menu.
  const close = (e: Event): void => {
    if (!menu.hidden && !moreWrap.contains(e.target as Node)) setMenu(false);
  };
  document.addEventListener("pointerdown", close, true);
  menu.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      setMenu(false);
      more.focus();
    }
  });
  const tools = h("span", { class: "gradviz-tools" });
  const counts = h("span", { class: "gradviz-counts", "data-testid": "gradviz-counts" });
  const zoom = button("", "gradviz-zoom-chip", "", actions.fitWhole);
  zoom.classList.add("gradviz-zoom-chip");
  zoom.hidden = true;
  const element = h(
    "div",
    { class: "gradviz-toolbar", "data-testid": "gradviz-toolbar" },
    button("Fit", "gradviz-fit", "Fit the whole graph in view", actions.fit),
    button("1:1", "gradviz-zoom-reset", "Reset zoom to 100%", actions.zoomReset),
    moreWrap,
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
    dispose() {
      document.removeEventListener("pointerdown", close, true);
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

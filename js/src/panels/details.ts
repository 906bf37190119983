// Side panel with the selected node's or module call's facts. Text only, never HTML; names break only
// after "." and "_" (`breakable`).
import { breakable, h } from "./dom";

/** A button in a details row: pressing it runs `run` (e.g. asks Python a question). */
export interface RowAction {
  label: string;
  title: string;
  testid: string;
  run(): void;
}

/** One row: a label and its text, and optionally a button after the text. */
export type DetailRow = [string, string] | [string, string, RowAction];

/** Rows that come before the element's facts: an answer the user asked for ("Why?"). With `collapse`,
 *  the facts go under a closed disclosure after them, so the answer is what a narrow panel shows. */
export interface LeadRows {
  rows: readonly DetailRow[];
  collapse: boolean;
}

export interface DetailsPanel {
  element: HTMLElement;
  show(title: string, rows: readonly DetailRow[], lead?: LeadRows): void;
  hide(): void;
}

const rowsOf = (rows: readonly DetailRow[]): HTMLElement[] => rows.flatMap((row) => [h("dt", {}, ...breakable(row[0])), value(row)]);

function value(row: DetailRow): HTMLElement {
  const [, text, action] = row;
  if (!action) return h("dd", {}, ...breakable(text));
  const button = h("button", { type: "button", class: "gradviz-row-action", title: action.title, "data-testid": action.testid }, action.label);
  button.addEventListener("click", () => action.run());
  return h("dd", {}, ...(text ? [h("span", {}, ...breakable(text)), " "] : []), button);
}

/** `onShown(on)` runs when the panel appears or goes (the canvas makes room for it). */
export function createDetails(onClose: () => void, onShown: (on: boolean) => void = () => {}): DetailsPanel {
  const title = h("h3", { "data-testid": "gradviz-details-title" });
  const list = h("div", { class: "gradviz-details-rows" });
  const close = h("button", { type: "button", class: "gradviz-close", title: "Close", "aria-label": "Close details" }, "×");
  close.addEventListener("click", onClose);
  const element = h("aside", { class: "gradviz-details", "data-testid": "gradviz-details" }, close, title, list);
  element.hidden = true;
  return {
    element,
    show(text, rows, lead) {
      title.replaceChildren(...breakable(text));
      if (lead && lead.rows.length) {
        const facts = h("details", { class: "gradviz-details-facts", "data-testid": "gradviz-details-facts" },
          h("summary", {}, `facts (${rows.length})`), h("dl", {}, ...rowsOf(rows)));
        facts.open = !lead.collapse;
        list.replaceChildren(h("dl", { class: "gradviz-details-lead" }, ...rowsOf(lead.rows)), facts);
      } else list.replaceChildren(h("dl", {}, ...rowsOf(rows)));
      if (element.hidden) {
        element.hidden = false;
        onShown(true);
      }
    },
    hide() {
      if (!element.hidden) {
        element.hidden = true;
        onShown(false);
      }
      title.textContent = "";
      list.replaceChildren();
    },
  };
}

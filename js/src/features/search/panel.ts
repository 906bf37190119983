// The search box (in the toolbar) and its results list (over the canvas). Typing is debounced;
// Enter picks the first result, a click picks one, Escape clears. Results are text only.
import type { SearchHit } from "./state";
import { thousands } from "../../state/labels";
import { h, setText } from "../../panels/dom";

export const SEARCH_DEBOUNCE_MS = 150;

export interface SearchActions {
  /** The query changed (debounced); answer with `show`. */
  query(q: string): void;
  pick(hit: SearchHit): void;
  /** The box was cleared (Escape or emptied). */
  clear(): void;
}

export interface SearchBox {
  input: HTMLInputElement;
  results: HTMLElement;
  show(hits: readonly SearchHit[], total: number): void;
  hide(): void;
  dispose(): void;
}

export function createSearch(actions: SearchActions): SearchBox {
  const input = h("input", {
    type: "search",
    class: "gradviz-search",
    "data-testid": "gradviz-search",
    placeholder: "Search name or op…",
    "aria-label": "Search nodes and module boxes by name or op",
    spellcheck: "false",
  });
  const results = h("div", { class: "gradviz-search-results", "data-testid": "gradviz-search-results", role: "listbox" });
  results.hidden = true;
  let hits: readonly SearchHit[] = [];
  let timer: ReturnType<typeof setTimeout> | null = null;
  const flush = (): void => {
    if (timer) clearTimeout(timer);
    timer = null;
    const q = input.value.trim();
    if (q) actions.query(q);
    else {
      hide();
      actions.clear();
    }
  };
  const hide = (): void => {
    results.hidden = true;
    results.replaceChildren();
    hits = [];
  };
  const pick = (hit: SearchHit): void => {
    hide();
    actions.pick(hit);
  };
  input.addEventListener("input", () => {
    if (timer) clearTimeout(timer);
    timer = setTimeout(flush, SEARCH_DEBOUNCE_MS);
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      flush();
      if (hits.length) pick(hits[0]);
    } else if (e.key === "Escape") {
      input.value = "";
      flush();
    } else return;
    e.preventDefault();
    e.stopPropagation();
  });
  return {
    input,
    results,
    show(next, total) {
      hits = next;
      const rows: HTMLElement[] = next.map((hit) => {
        const row = h("button", { type: "button", class: "gradviz-search-hit", role: "option", "data-key": hit.key }, hit.label);
        row.addEventListener("click", () => pick(hit));
        return row;
      });
      if (!next.length) rows.push(h("div", { class: "gradviz-search-more" }, "no match"));
      else if (total > next.length) rows.push(h("div", { class: "gradviz-search-more" }, `and ${thousands(total - next.length)} more`));
      results.replaceChildren(...rows);
      results.hidden = false;
    },
    hide,
    dispose() {
      if (timer) clearTimeout(timer);
      setText(results, "");
    },
  };
}

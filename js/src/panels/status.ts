// The one status line under the toolbar: what-if / checkpoint headlines and their verification banners,
// the view's message (large graph, a refused change) and the payload's notes share ONE line, in rank
// order, each clipped to a line; an expander shows all of them in full. Entries are the features' own
// elements (their test ids, classes and colours stay); an entry is hidden with its `hidden` attribute
// and the line follows by itself (a MutationObserver), so a feature only says where its element goes.
import { h, setText } from "./dom";

export interface StatusLine {
  element: HTMLElement;
  /** Put `el` in the line; lower `rank` comes first (the first visible entry is the line's lead). */
  add(el: HTMLElement, rank: number): void;
  /** Open or close the expander; returns whether it is open. */
  setOpen(open: boolean): boolean;
  isOpen(): boolean;
  /** Show or hide the expander and the line now (the observer does it on the next microtask). */
  refresh(): void;
}

/** Where the entries go: 0-19 headlines (what-if, checkpoint), 20-29 verification, 30 the view's
 *  message, 40 notes. */
export const RANK = { headline: 10, verify: 20, message: 30, notes: 40 } as const;

export function createStatusLine(): StatusLine {
  const entries = h("div", { class: "gradviz-status-entries" });
  const more = h("button", {
    type: "button", class: "gradviz-status-more", "data-testid": "gradviz-status-more",
    "aria-expanded": "false", title: "Show every line in full",
  });
  more.hidden = true;
  const element = h("div", { class: "gradviz-status", "data-testid": "gradviz-status" }, entries, more);
  element.hidden = true;
  let open = false;
  const shown = (): HTMLElement[] => [...entries.children].filter((c): c is HTMLElement => c instanceof HTMLElement && !c.hidden);

  const refresh = (): void => {
    const visible = shown();
    element.hidden = visible.length === 0;
    // More than one entry, or one that holds more than its lead line: there is something to expand.
    const hidden = visible.length > 1 || visible.some((e) => lines(e) > 1 || clipped(e));
    more.hidden = !hidden && !open;
    setText(more, open ? "▴ less" : visible.length > 1 ? `▾ ${visible.length - 1} more` : "▾ more");
    element.classList.toggle("gradviz-status-open", open);
    more.setAttribute("aria-expanded", String(open));
    element.dataset.entries = String(visible.length);
  };
  more.addEventListener("click", () => {
    open = !open;
    refresh();
  });
  new MutationObserver(() => refresh()).observe(entries, {
    subtree: true, childList: true, characterData: true, attributes: true, attributeFilter: ["hidden", "class"],
  });
  // A narrower line cuts more short.
  new ResizeObserver(() => refresh()).observe(element);
  return {
    element,
    add(el, rank) {
      el.classList.add("gradviz-status-entry");
      el.dataset.rank = String(rank);
      const after = [...entries.children].find((c) => Number((c as HTMLElement).dataset.rank) > rank);
      entries.insertBefore(el, after ?? null);
      refresh();
    },
    setOpen(next) {
      open = next;
      refresh();
      return open;
    },
    isOpen: () => open,
    refresh,
  };
}

/** Whether the one-line layout cuts an entry, or a text in it (an ellipsis), short; measured, so only
 *  once it has been laid out. */
function clipped(e: HTMLElement): boolean {
  const cut = (x: Element): boolean => x.scrollHeight > x.clientHeight + 1 || x.scrollWidth > x.clientWidth + 1;
  return cut(e) || [...e.querySelectorAll("div, p, span, summary")].some((x) => x.clientWidth > 0 && cut(x));
}

const LINE_TAGS = new Set(["DIV", "P", "SUMMARY", "LI"]);
const HOLDERS = new Set(["DIV", "DETAILS", "UL", "OL"]);

/** Lines of text an entry holds (its innermost visible blocks with text): more than one means the
 *  entry has more than its lead line. */
function lines(el: HTMLElement): number {
  let n = 0;
  const walk = (e: Element): void => {
    for (const c of e.children) {
      if (!(c instanceof HTMLElement) || c.hidden) continue;
      const blocks = [...c.children].some((k) => LINE_TAGS.has(k.tagName) || HOLDERS.has(k.tagName));
      if (blocks && HOLDERS.has(c.tagName)) walk(c);
      else if (LINE_TAGS.has(c.tagName) && c.textContent) n++;
    }
  };
  walk(el);
  return n;
}

// The diff view's summary panel (under the toolbar): Python's plain-text summary, foldable.
import { h, setText } from "../../panels/dom";

export interface DiffPanel {
  element: HTMLElement;
  /** `summary` null hides the panel. */
  show(headline: string, summary: string | null): void;
}

export function createDiffPanel(): DiffPanel {
  const head = h("summary", { "data-testid": "gradviz-diff-title" });
  const text = h("div", { class: "gradviz-diff-summary", "data-testid": "gradviz-diff-summary" });
  const box = h("details", {}, head, text);
  box.open = true;
  const element = h("div", { class: "gradviz-diff", "data-testid": "gradviz-diff" }, box);
  element.hidden = true;
  return {
    element,
    show(headline, summary) {
      element.hidden = summary === null;
      setText(head, headline);
      setText(text, summary ?? "");
    },
  };
}

// Side panel with the selected node's or module call's facts. Text only, never HTML.
import { h } from "./dom";

export interface DetailsPanel {
  element: HTMLElement;
  show(title: string, rows: readonly [string, string][]): void;
  hide(): void;
}

/** `onShown(on)` runs when the panel appears or goes (the canvas makes room for it). */
export function createDetails(onClose: () => void, onShown: (on: boolean) => void = () => {}): DetailsPanel {
  const title = h("h3", { "data-testid": "gradviz-details-title" });
  const list = h("dl");
  const close = h("button", { type: "button", class: "gradviz-close", title: "Close", "aria-label": "Close details" }, "×");
  close.addEventListener("click", onClose);
  const element = h("aside", { class: "gradviz-details", "data-testid": "gradviz-details" }, close, title, list);
  element.hidden = true;
  return {
    element,
    show(text, rows) {
      title.textContent = text;
      list.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
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

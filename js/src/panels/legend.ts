// Colour legend (bottom left of the canvas; folds to its title line) and the hover tooltip. Text
// only, never HTML.
import { HEAT } from "../view/style";
import { h, setText } from "./dom";

/** One keyed legend entry: a swatch drawn with the given border / fill colour, and its text. */
export interface LegendItem {
  kind: string;
  text: string;
  border?: string;
  fill?: string;
}

export interface LegendSpec {
  title: string;
  /** "log scale" / "linear scale" / "size ∝ value". */
  scaleText: string;
  min: string;
  max: string;
  /** Draw the heat colour ramp. */
  ramp: boolean;
  items: LegendItem[];
}

export interface Legend {
  element: HTMLElement;
  show(spec: LegendSpec | null): void;
}

/** `onChange` runs after the legend appears, disappears, or folds (the canvas keeps room for it). */
export function createLegend(onChange: () => void = () => {}): Legend {
  const element = h("div", { class: "gradviz-legend", "data-testid": "gradviz-legend" });
  element.hidden = true;
  let folded = false;
  let last = "";
  const fold = h("button", { type: "button", class: "gradviz-legend-fold", "data-testid": "gradviz-legend-fold", title: "Fold / unfold the legend" });
  const syncFold = (): void => {
    setText(fold, folded ? "▸" : "▾");
    fold.setAttribute("aria-expanded", String(!folded));
    element.classList.toggle("gradviz-legend-folded", folded);
  };
  fold.addEventListener("click", () => {
    folded = !folded;
    syncFold();
    onChange();
  });
  syncFold();
  return {
    element,
    show(spec) {
      const sig = JSON.stringify(spec);
      if (sig === last) return;
      last = sig;
      if (!spec) {
        element.hidden = true;
        element.replaceChildren();
        onChange();
        return;
      }
      const parts: Node[] = [
        h("div", { class: "gradviz-legend-head" }, fold, h("span", { class: "gradviz-legend-title", "data-testid": "gradviz-legend-title" }, spec.title)),
      ];
      if (spec.ramp) {
        const ramp = h("div", { class: "gradviz-legend-ramp" }, ...HEAT.map((c) => {
          const s = h("span", {});
          s.style.background = c;
          return s;
        }));
        parts.push(
          h("div", { class: "gradviz-legend-row" }, h("span", { "data-testid": "gradviz-legend-min" }, spec.min), ramp, h("span", { "data-testid": "gradviz-legend-max" }, spec.max)),
        );
      } else if (spec.min || spec.max) {
        parts.push(h("div", { class: "gradviz-legend-row" }, h("span", { "data-testid": "gradviz-legend-min" }, spec.min), h("span", {}, " … "), h("span", { "data-testid": "gradviz-legend-max" }, spec.max)));
      }
      if (spec.scaleText) parts.push(h("div", { class: "gradviz-legend-scale" }, spec.scaleText));
      const items = h("div", { class: "gradviz-legend-items" });
      for (const { kind, text, border, fill } of spec.items) {
        const sw = h("span", { class: `gradviz-sw gradviz-sw-${kind}` });
        if (border) sw.style.borderColor = border;
        if (fill) sw.style.background = fill;
        items.append(h("span", { class: "gradviz-legend-item", "data-kind": kind }, sw, text));
      }
      if (spec.items.length) parts.push(items);
      element.replaceChildren(...parts);
      element.hidden = false;
      onChange();
    },
  };
}

export interface Tooltip {
  element: HTMLElement;
  show(text: string, client: { x: number; y: number }, host: HTMLElement): void;
  /** New text for a tooltip on screen (a click changed what it describes); hidden when `text` is empty. */
  update(text: string): void;
  hide(): void;
}

export function createTooltip(): Tooltip {
  const element = h("div", { class: "gradviz-tooltip", "data-testid": "gradviz-tooltip", role: "tooltip" });
  element.hidden = true;
  return {
    element,
    show(text, client, host) {
      if (!text) {
        element.hidden = true;
        return;
      }
      setText(element, text);
      const r = host.getBoundingClientRect();
      element.style.left = `${Math.max(0, client.x - r.left + 12)}px`;
      element.style.top = `${Math.max(0, client.y - r.top + 12)}px`;
      element.hidden = false;
    },
    update(text) {
      if (element.hidden) return;
      if (text) setText(element, text);
      else element.hidden = true;
    },
    hide() {
      element.hidden = true;
    },
  };
}

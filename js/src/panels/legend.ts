// Colour legend (bottom left of the canvas) and the hover tooltip. Text only, never HTML.
import { HEAT, HEAT_ZERO, MARK } from "../view/style";
import { h, setText } from "./dom";

export interface LegendSpec {
  title: string;
  /** "log scale" / "linear scale" / "size ∝ value". */
  scaleText: string;
  min: string;
  max: string;
  /** Draw the colour ramp (false for encoding "size"). */
  ramp: boolean;
  /** Extra keyed items: [swatch kind, text]. */
  items: [LegendSwatch, string][];
}

export type LegendSwatch = "zero" | "run" | "flow" | "neutral" | "no-grad" | "nan" | "flag";

export interface Legend {
  element: HTMLElement;
  show(spec: LegendSpec | null): void;
}

export function createLegend(): Legend {
  const element = h("div", { class: "gradviz-legend", "data-testid": "gradviz-legend" });
  element.hidden = true;
  return {
    element,
    show(spec) {
      if (!spec) {
        element.hidden = true;
        element.replaceChildren();
        return;
      }
      const parts: Node[] = [h("div", { class: "gradviz-legend-title", "data-testid": "gradviz-legend-title" }, spec.title)];
      if (spec.ramp) {
        const ramp = h("div", { class: "gradviz-legend-ramp" }, ...HEAT.map((c) => {
          const s = h("span", {});
          s.style.background = c;
          return s;
        }));
        parts.push(
          h("div", { class: "gradviz-legend-row" }, h("span", { "data-testid": "gradviz-legend-min" }, spec.min), ramp, h("span", { "data-testid": "gradviz-legend-max" }, spec.max)),
        );
      } else {
        parts.push(h("div", { class: "gradviz-legend-row" }, h("span", { "data-testid": "gradviz-legend-min" }, spec.min), h("span", {}, " … "), h("span", { "data-testid": "gradviz-legend-max" }, spec.max)));
      }
      if (spec.scaleText) parts.push(h("div", { class: "gradviz-legend-scale" }, spec.scaleText));
      const items = h("div", { class: "gradviz-legend-items" });
      for (const [kind, text] of spec.items) {
        const sw = h("span", { class: `gradviz-sw gradviz-sw-${kind}` });
        if (kind === "zero") sw.style.background = HEAT_ZERO;
        if (kind === "run") sw.style.borderColor = MARK.run;
        if (kind === "flow") sw.style.background = MARK.flow;
        if (kind === "nan") sw.style.borderColor = MARK.nan;
        if (kind === "flag") sw.style.borderColor = MARK.flag;
        items.append(h("span", { class: "gradviz-legend-item", "data-kind": kind }, sw, text));
      }
      if (spec.items.length) parts.push(items);
      element.replaceChildren(...parts);
      element.hidden = false;
    },
  };
}

export interface Tooltip {
  element: HTMLElement;
  show(text: string, client: { x: number; y: number }, host: HTMLElement): void;
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
    hide() {
      element.hidden = true;
    },
  };
}

// The key's DOM: a small "?" button for the toolbar and, when open, the list of entries with their
// swatches (inline SVG, so no font is needed) in the canvas's top-right corner, beside any side panel.
// Text only, never HTML.
import { h, setText } from "../../panels/dom";
import type { KeyEntry, Swatch } from "./entries";

const SVG = "http://www.w3.org/2000/svg";
const W = 40;
const H = 22;

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** The swatch as a 40x22 SVG; the element that carries the colours has `data-part="shape"`. */
export function drawSwatch(s: Swatch): SVGSVGElement {
  const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, "aria-hidden": "true", class: "gradviz-key-swatch" });
  if (s.shape === "edge") {
    const y = s.label ? 15 : H / 2;
    root.append(
      svg("line", { x1: 2, y1: y, x2: W - 8, y2: y, stroke: s.stroke, "stroke-width": s.strokeWidth, "data-part": "shape" }),
      svg("path", { d: `M${W - 9} ${y - 4}L${W - 2} ${y}L${W - 9} ${y + 4}Z`, fill: s.stroke }),
    );
    if (s.label) {
      const text = svg("text", { x: W / 2 - 3, y: 9, "text-anchor": "middle", "font-size": 9, fill: s.labelColor, "data-part": "label" });
      text.textContent = s.label;
      root.append(text);
    }
    return root;
  }
  const inset = s.double ? 4 : 3;
  const rect = (pad: number, attrs: Record<string, string | number>): SVGRectElement =>
    svg("rect", { x: pad, y: pad, width: W - 2 * pad, height: H - 2 * pad, rx: s.round ? 4 : 0, ...attrs });
  if (s.double) {
    // Cytoscape's "double" border: two thin lines, plus the faint outline 3 px out.
    root.append(rect(1, { fill: "none", stroke: s.stroke, "stroke-width": 1, "stroke-opacity": 0.55 }));
    root.append(rect(inset, { fill: s.fill, stroke: s.stroke, "stroke-width": 1.3, "data-part": "shape" }));
    root.append(rect(inset + 2.6, { fill: "none", stroke: s.stroke, "stroke-width": 1.3 }));
    return root;
  }
  const dash: Record<string, string> = s.dashed ? { "stroke-dasharray": "4 3" } : {};
  root.append(rect(inset, { fill: s.fill, stroke: s.stroke, "stroke-width": s.strokeWidth, "data-part": "shape", ...dash }));
  return root;
}

export interface KeyPanel {
  toggle: HTMLButtonElement;
  element: HTMLElement;
  isOpen(): boolean;
  setOpen(open: boolean): void;
  /** Redraw the entries (a new theme). */
  render(entries: KeyEntry[]): void;
}

export function createKeyPanel(): KeyPanel {
  const toggle = h("button", {
    type: "button", class: "gradviz-key-toggle", "data-testid": "gradviz-key-toggle",
    title: "Key: what the shapes, colours and edge labels mean (?)", "aria-expanded": "false", "aria-controls": "",
  }, "?");
  const close = h("button", { type: "button", class: "gradviz-key-close", "data-testid": "gradviz-key-close", title: "Close the key", "aria-label": "Close the key" }, "×");
  const list = h("ul", { class: "gradviz-key-list" });
  const element = h("div", { class: "gradviz-key", "data-testid": "gradviz-key", role: "region", "aria-label": "Key" },
    h("div", { class: "gradviz-key-head" }, h("span", { class: "gradviz-key-title" }, "Key"), close), list);
  element.hidden = true;
  const setOpen = (open: boolean): void => {
    element.hidden = !open;
    toggle.setAttribute("aria-expanded", String(open));
    toggle.classList.toggle("gradviz-key-on", open);
    setText(toggle, open ? "×" : "?");
  };
  toggle.addEventListener("click", () => setOpen(element.hidden));
  close.addEventListener("click", () => setOpen(false));
  return {
    toggle,
    element,
    isOpen: () => !element.hidden,
    setOpen,
    render(entries) {
      list.replaceChildren(...entries.map((e) =>
        h("li", { class: "gradviz-key-row", "data-kind": e.kind }, drawSwatch(e.swatch), h("span", {}, e.text))));
    },
  };
}

export const KEY_CSS = `
.gradviz-root .gradviz-toolbar button.gradviz-key-toggle {
  width: 22px; height: 22px; padding: 0; border-radius: 50%; color: var(--gv-fg2); font-weight: 700; line-height: 1;
}
.gradviz-root .gradviz-toolbar button.gradviz-key-toggle:hover, .gradviz-root .gradviz-toolbar button.gradviz-key-on {
  color: var(--gv-brand); border-color: var(--gv-brand);
}
.gradviz-root .gradviz-key {
  position: absolute; right: 8px; top: 8px; z-index: 4; width: 330px; max-width: calc(100% - 16px);
  max-height: calc(100% - 16px); overflow: auto; padding: 6px 8px; font-size: 11px; line-height: 1.3;
  background: var(--gv-panel); color: var(--gv-fg); border: 1px solid var(--gv-border); border-radius: 4px;
  box-shadow: 0 2px 8px rgba(0, 0, 0, 0.15);
}
.gradviz-root .gradviz-key[hidden] { display: none; }
.gradviz-root .gradviz-key-head { display: flex; align-items: center; justify-content: space-between; margin-bottom: 2px; }
.gradviz-root .gradviz-key-title { font-weight: 600; }
.gradviz-root .gradviz-key-close { border: none; background: none; color: var(--gv-fg2); cursor: pointer; font-size: 13px; padding: 0 2px; }
.gradviz-root .gradviz-key-list { list-style: none; margin: 0; padding: 0; }
.gradviz-root .gradviz-key-row { display: flex; align-items: center; gap: 6px; margin: 1px 0; }
.gradviz-root .gradviz-key-swatch { flex: none; }
/* Beside a side panel, never over it (styles.css moves the panels under the canvas when narrow). */
.gradviz-root .gradviz-with-details .gradviz-key { right: 308px; }
.gradviz-root .gradviz-with-side .gradviz-key { right: 348px; }
@container (max-width: 840px) { .gradviz-root .gradviz-with-side .gradviz-key { right: 8px; } }
@container (max-width: 800px) { .gradviz-root .gradviz-with-details .gradviz-key { right: 8px; } }
`;

// The one way this widget makes DOM: names from the payload only ever become text nodes.

type Child = Node | string;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) el.append(typeof c === "string" ? document.createTextNode(c) : c);
  return el;
}

export function setText(el: HTMLElement, text: string): void {
  el.textContent = text;
}

/** `text` cut after every "_" and every "." that is not a decimal point (between two digits). */
export function breakParts(text: string): string[] {
  const parts: string[] = [];
  let start = 0;
  for (let i = 0; i < text.length - 1; i++) {
    const c = text[i];
    const decimal = c === "." && /\d/.test(text[i - 1] ?? "") && /\d/.test(text[i + 1]);
    if ((c === "_" || c === ".") && !decimal) {
      parts.push(text.slice(start, i + 1));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts;
}

/** `text` as text nodes with a `<wbr>` between its `breakParts`: with `overflow-wrap: normal` a long
 *  name ("blocks.0.mlp.c_fc.weight") breaks only between its parts, never inside one. */
export function breakable(text: string): Node[] {
  return breakParts(text).flatMap((part, i) => (i ? [document.createElement("wbr"), document.createTextNode(part)] : [document.createTextNode(part)]));
}

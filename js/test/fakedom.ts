// Just enough DOM for the features' panels in node tests (h(), text, attributes, events, hidden):
// installed on globalThis only while a test asks for it. Not a browser: layout, styles and CSS
// selectors beyond ".class" are out of scope (the page tests cover those in Chromium).
export class FakeNode {
  parent: FakeElement | null = null;
  constructor(public text = "") {}
  get textContent(): string {
    return this.text;
  }
}

export class FakeElement extends FakeNode {
  attrs = new Map<string, string>();
  children: FakeNode[] = [];
  hidden = false;
  value = "";
  title = "";
  type = "";
  private listeners = new Map<string, ((e: unknown) => void)[]>();
  readonly classList = {
    toggle: (c: string, on?: boolean): void => {
      const set = new Set((this.attrs.get("class") ?? "").split(" ").filter(Boolean));
      if (on ?? !set.has(c)) set.add(c);
      else set.delete(c);
      this.attrs.set("class", [...set].join(" "));
    },
    add: (...cs: string[]): void => {
      for (const c of cs) this.classList.toggle(c, true);
    },
    contains: (c: string): boolean => (this.attrs.get("class") ?? "").split(" ").includes(c),
  };
  constructor(public tagName: string) {
    super();
  }
  get className(): string {
    return this.attrs.get("class") ?? "";
  }
  set className(c: string) {
    this.attrs.set("class", c);
  }
  setAttribute(k: string, v: string): void {
    this.attrs.set(k, v);
    if (k === "type") this.type = v;
  }
  getAttribute(k: string): string | null {
    return this.attrs.get(k) ?? null;
  }
  append(...nodes: FakeNode[]): void {
    for (const n of nodes) n.parent = this;
    this.children.push(...nodes);
  }
  replaceChildren(...nodes: FakeNode[]): void {
    this.children = [];
    this.append(...nodes);
  }
  override get textContent(): string {
    return this.children.map((c) => c.textContent).join("");
  }
  set textContent(t: string) {
    this.children = t ? [new FakeNode(t)] : [];
  }
  addEventListener(type: string, f: (e: unknown) => void): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), f]);
  }
  dispatch(type: string, init: Record<string, unknown> = {}): void {
    const e = { type, target: this, preventDefault() {}, stopPropagation() {}, ...init };
    for (const f of this.listeners.get(type) ?? []) f(e);
  }
  /** Descendants with a class (".name") or a data-testid ("[data-testid=x]"). */
  querySelectorAll(selector: string): FakeElement[] {
    const test = selector.startsWith(".")
      ? (el: FakeElement) => el.classList.contains(selector.slice(1))
      : (el: FakeElement) => `[data-testid=${el.getAttribute("data-testid")}]` === selector;
    const out: FakeElement[] = [];
    const walk = (el: FakeElement): void => {
      for (const c of el.children) {
        if (!(c instanceof FakeElement)) continue;
        if (test(c)) out.push(c);
        walk(c);
      }
    };
    walk(this);
    return out;
  }
  byTestId(id: string): FakeElement | undefined {
    return this.querySelectorAll(`[data-testid=${id}]`)[0];
  }
}

/** Fake `document` until the returned function restores what was there (for async tests). */
export function installFakeDom(): () => void {
  const g = globalThis as unknown as { document?: unknown };
  const before = g.document;
  g.document = {
    createElement: (tag: string) => new FakeElement(tag.toUpperCase()),
    createTextNode: (t: string) => new FakeNode(t),
  };
  return () => {
    g.document = before;
  };
}

/** Run `body` with `document` faked; restores what was there. */
export function withFakeDom<T>(body: () => T): T {
  const restore = installFakeDom();
  try {
    return body();
  } finally {
    restore();
  }
}

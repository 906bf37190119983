// The error box: what was wrong with the widget's data (the first few problems the guard found, per
// trait) or which part of the page failed, and what to do. Text only: names in the data are user input.
import type { Traits } from "../payload";
import { h, setText } from "../panels/dom";
import { problemText, type Problem } from "./validate";

/** Problems listed in the box (the rest are counted). */
export const SHOWN_PROBLEMS = 5;

export const ERROR_BOX_CSS = `
.gradviz-error {
  margin: 0; padding: 8px 10px 8px 12px; font-size: 12px; line-height: 1.45; color: var(--gv-fg, #222);
  background: rgba(211, 47, 47, 0.10); border-left: 4px solid #d32f2f; border-bottom: 1px solid var(--gv-border, #bdbdbd);
  overflow-wrap: anywhere; white-space: normal; position: relative;
}
.gradviz-error[hidden] { display: none; }
.gradviz-error-title { font-weight: 600; margin: 0 24px 4px 0; }
.gradviz-error ul { margin: 2px 0 6px; padding-left: 18px; }
.gradviz-error li { margin: 1px 0; font-family: var(--jp-code-font-family, ui-monospace, SFMono-Regular, Menlo, monospace); font-size: 11.5px; white-space: pre-wrap; }
.gradviz-error-todo { margin: 0; }
.gradviz-error-close {
  position: absolute; top: 4px; right: 6px; font: inherit; font-size: 14px; line-height: 1; padding: 2px 6px;
  color: var(--gv-fg, #222); background: transparent; border: 1px solid transparent; border-radius: 3px; cursor: pointer;
}
.gradviz-error-close:hover { border-color: var(--gv-border, #bdbdbd); }
`;

export interface ErrorBox {
  element: HTMLElement;
  refused(trait: keyof Traits, problems: Problem[], total: number): void;
  accepted(trait: keyof Traits): void;
  crashed(where: string, err: unknown): void;
  /** True while the graph itself (graph_data) is refused. */
  readonly graphRefused: boolean;
}

const errorText = (err: unknown): string => (err instanceof Error ? `${err.name}: ${err.message}` : String(err));

/** `onChange` runs after the box changed (shown, hidden, or other text): the layout around it moved. */
export function createErrorBox(onChange: () => void = () => {}): ErrorBox {
  const title = h("p", { class: "gradviz-error-title", "data-testid": "gradviz-error-title" });
  const list = h("ul", { "data-testid": "gradviz-error-problems" });
  const todo = h("p", { class: "gradviz-error-todo", "data-testid": "gradviz-error-todo" });
  const close = h("button", { type: "button", class: "gradviz-error-close", title: "hide this message", "aria-label": "hide this message" }, "×");
  const element = h("div", { class: "gradviz-error", "data-testid": "gradviz-error", role: "alert" }, close, title, list, todo);
  element.hidden = true;
  // Trait name -> its refused value's problems; crashes in the order they came (the latest few).
  const refusals = new Map<keyof Traits, { problems: Problem[]; total: number }>();
  const crashes: string[] = [];
  let dismissed = false;

  function draw(): void {
    const wasHidden = element.hidden;
    const graph = refusals.get("graph_data");
    const lines: string[] = [];
    let total = 0;
    // The graph's problems first, then the other traits', then the crashes.
    for (const [, r] of [...refusals].sort(([a], [b]) => Number(b === "graph_data") - Number(a === "graph_data"))) {
      for (const p of r.problems) if (lines.length < SHOWN_PROBLEMS) lines.push(problemText(p));
      total += r.total;
    }
    for (const c of crashes) if (lines.length < SHOWN_PROBLEMS) lines.push(c);
    total += crashes.length;
    element.hidden = dismissed || total === 0;
    if (total === 0) {
      list.replaceChildren();
      if (!wasHidden) onChange();
      return;
    }
    const traits = [...refusals.keys()].filter((t) => t !== "graph_data");
    const parts: string[] = [];
    if (graph) parts.push("The graph could not be drawn: the widget's graph_data is malformed.");
    if (traits.length) {
      const names = traits.join(", ");
      parts.push(`The new value of ${names} was refused${graph ? "" : "; the view shows the last good data"}.`);
    }
    if (crashes.length) parts.push("Part of the page failed; the view may be out of date.");
    setText(title, parts.join(" "));
    list.replaceChildren(...lines.map((l) => h("li", {}, l)));
    if (total > lines.length) list.append(h("li", {}, `… and ${total - lines.length} more problem${total - lines.length === 1 ? "" : "s"}`));
    const todos: string[] = [];
    if (refusals.size) {
      todos.push(
        "What to do: these values come from Python (the widget's synced traits). If you set them yourself " +
          "(w.graph_data = …, w.overlay = …), give them the fields and types listed above; otherwise build the " +
          "widget again from its source (GraphWidget(gv.trace(loss)), GraphWidget(recording), …) and report this " +
          "message as a bug. A good value redraws the view.",
      );
    }
    if (crashes.length) todos.push("Run the cell again; if this comes back, report this message (and the browser console) as a bug.");
    setText(todo, todos.join(" "));
    element.dataset.traits = [...refusals.keys()].join(" ");
    if (wasHidden !== element.hidden || !element.hidden) onChange();
  }

  close.addEventListener("click", () => {
    dismissed = true;
    crashes.length = 0;
    draw();
  });

  return {
    element,
    refused(trait, problems, total) {
      refusals.set(trait, { problems, total });
      dismissed = false;
      draw();
    },
    accepted(trait) {
      const had = refusals.delete(trait);
      // A new graph starts clean: what failed before belonged to the old one.
      const cleared = trait === "graph_data" && crashes.length > 0;
      if (cleared) crashes.length = 0;
      if (had || cleared) draw();
    },
    crashed(where, err) {
      crashes.push(`while handling ${where}: ${errorText(err)}`);
      if (crashes.length > SHOWN_PROBLEMS) crashes.shift();
      dismissed = false;
      draw();
    },
    get graphRefused() {
      return refusals.has("graph_data");
    },
  };
}

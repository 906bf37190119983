// The doctor's findings beside the graph: one row per finding (kind, target, what is wrong, and where it
// applies when it has no node); a click reveals its node or box on the graph and unfolds the evidence
// and the fix under the row.
import type { DoctorFinding } from "../../payload";
import { breakable, h, setText } from "../../panels/dom";
import { appliesText } from "./state";

export interface FindingsPanel {
  element: HTMLElement;
  /** An empty list hides the panel. */
  show(findings: DoctorFinding[]): void;
}

export function createFindingsPanel(pick: (node: string) => void): FindingsPanel {
  const head = h("div", { class: "gradviz-findings-head", "data-testid": "gradviz-findings-head" });
  const list = h("ol", { class: "gradviz-findings-list" });
  const element = h("div", { class: "gradviz-findings", "data-testid": "gradviz-findings" }, head, list);
  element.hidden = true;
  let rows: HTMLElement[] = [];

  function row(f: DoctorFinding, i: number): HTMLElement {
    const kind = h("span", { class: `gradviz-finding-kind gradviz-kind-${f.kind}` });
    const target = h("code", { class: "gradviz-finding-target" });
    const message = h("span", { class: "gradviz-finding-message" });
    const evidence = h("div", { class: "gradviz-finding-evidence" });
    const fix = h("div", { class: "gradviz-finding-fix" });
    setText(kind, f.kind);
    setText(target, f.target);
    message.replaceChildren(...breakable(f.message));
    // Paths and names in the evidence break between their parts, not mid-word.
    evidence.replaceChildren(...breakable(`seen: ${f.evidence}`));
    fix.replaceChildren(...breakable(`fix: ${f.fix}`));
    const more = h("div", { class: "gradviz-finding-more" }, evidence, fix);
    more.hidden = true;
    const where = appliesText(f);
    const applies = h("span", { class: "gradviz-finding-applies", "data-testid": `gradviz-finding-applies-${i}` }, where);
    applies.hidden = !where;
    const button = h("button", { type: "button", class: "gradviz-finding", "data-testid": `gradviz-finding-${i}` },
      kind, target, message, applies);
    button.title = f.node ? "show it on the graph" : `${where}: see the evidence`;
    button.addEventListener("click", () => {
      for (const r of rows) r.classList.toggle("gradviz-finding-active", r === item);
      for (const m of list.querySelectorAll<HTMLElement>(".gradviz-finding-more")) m.hidden = m !== more;
      if (f.node) pick(f.node);
    });
    const item = h("li", {}, button, more);
    return item;
  }

  return {
    element,
    show(findings) {
      element.hidden = findings.length === 0;
      setText(head, `Doctor: ${findings.length} finding${findings.length === 1 ? "" : "s"} (click one to see it)`);
      rows = findings.map(row);
      list.replaceChildren(...rows);
    },
  };
}

// Values on demand: when a leaf is selected, ask Python once for its value and .grad summaries
// ({kind: "values", body: {node}}), show "loading…" until the reply, then the numbers; replies are cached
// per payload. An exported page answers from summaries saved within its budget, or says it has none.
import type { Core, FeatureFactory } from "../../core/context";
import type { Feature } from "../../core/feature";
import { showSelection } from "../../core/selection";
import type { PageReply, ValuesReplyBody } from "../../payload";
import { carried, valueRows } from "./state";

export interface ValuesHooks {
  /** The cached answer for a leaf: the reply body, an error text, "waiting", or null (never asked). */
  valuesOf(nodeId: string): ValuesReplyBody | string | null;
}

export const details: FeatureFactory<ValuesHooks> = (core: Core): Feature<ValuesHooks> => {
  const answers = new Map<string, ValuesReplyBody | string | undefined>();
  let generation = 0;

  function ask(node: string): void {
    answers.set(node, undefined);
    const asked = generation;
    core.messenger.request("values", { node }, (reply: PageReply) => {
      if (asked !== generation) return; // a new payload came meanwhile
      const body = reply.body as ValuesReplyBody | undefined;
      answers.set(node, reply.ok && body && "missing" in body ? body : `not read: ${reply.error ?? "no answer"}`);
      if (core.model.get("selected") === node) showSelection(core);
    });
  }

  return {
    name: "details",
    loaded() {
      generation++;
      answers.clear();
    },
    details(node) {
      if (node.kind !== "leaf" || carried(node)) return [];
      if (!answers.has(node.id)) ask(node.id);
      return valueRows(node, answers.get(node.id));
    },
    hooks: {
      valuesOf(nodeId) {
        if (!answers.has(nodeId)) return null;
        return answers.get(nodeId) ?? "waiting";
      },
    },
  };
};

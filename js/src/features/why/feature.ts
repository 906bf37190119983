// "Why?" on a leaf: a row in the details panel whose button asks Python once ({kind: "why", body:
// {node}}, answered by gradviz_nb/widgets/page/why.py with gradviz_nb.doctor.why), shows "asking…",
// then the answer; answers are cached per payload. An exported page answers from replies saved ahead.
import type { Core, FeatureFactory } from "../../core/context";
import type { Feature } from "../../core/feature";
import { reveal } from "../../core/reveal";
import { nodeById, showSelection } from "../../core/selection";
import type { PageReply, WhyReplyBody } from "../../payload";
import { readReply, whyRows, type WhyState } from "./state";

export interface WhyHooks {
  /** The cached answer for a leaf: the reply body, an error text, "waiting", or null (never asked). */
  whyOf(nodeId: string): WhyReplyBody | string | null;
  /** Ask as the button does (tests). */
  askWhy(nodeId: string): void;
}

export const why: FeatureFactory<WhyHooks> = (core: Core): Feature<WhyHooks> => {
  const answers = new Map<string, WhyState>();
  let generation = 0;

  function ask(node: string): void {
    if (answers.has(node)) return;
    answers.set(node, undefined);
    const asked = generation;
    core.messenger.request("why", { node }, (reply: PageReply) => {
      if (asked !== generation) return; // a new payload came meanwhile
      answers.set(node, readReply(node, reply.ok, reply.body, reply.error));
      if (core.model.get("selected") === node) showSelection(core);
    });
    if (core.model.get("selected") === node) showSelection(core);
  }

  return {
    name: "why",
    loaded() {
      generation++;
      answers.clear();
    },
    // First in the panel, above the leaf's facts; once answered the facts fold away under it, so cause and
    // fix are what a narrow details column shows.
    leadDetails(node) {
      if (node.kind !== "leaf") return null;
      const state = answers.get(node.id);
      const rows = whyRows(answers.has(node.id), state, () => ask(node.id), (id) => void reveal(core, id), (id) => placeText(core, id));
      return { rows, collapse: typeof state === "object" && state !== null && !!state.answer };
    },
    hooks: {
      whyOf: (nodeId) => (answers.has(nodeId) ? (answers.get(nodeId) ?? "waiting") : null),
      askWhy: ask,
    },
  };
};

/** Where a cause sits, in the user's words (never the node id): its op and module, or the leaf's name. */
function placeText(core: Core, id: string): string {
  const n = nodeById(core, id);
  if (!n) return "the node the cause points at";
  if (n.kind === "leaf") return n.names[0] || n.label || "a leaf";
  const op = n.op || n.label || "an op";
  return n.module ? `${op} in ${n.module}` : op;
}

// gv.doctor's findings (the `findings` trait) listed beside the graph; a click reveals the finding's
// node or box (opening the boxes around it), selects it and frames it, and the first view shows the
// first finding that is on the graph.
import type { Core, FeatureFactory } from "../../core/context";
import type { Feature } from "../../core/feature";
import { reveal } from "../../core/reveal";
import { graphIndex } from "../../state/graphindex";
import { callKey, nodeKey } from "../../state/quotient";
import { createFindingsPanel } from "./panel";
import { findingTarget } from "./state";

export const findings: FeatureFactory = (core: Core, slots): Feature => {
  const panel = createFindingsPanel((node) => void reveal(core, findingTarget(node)));
  slots.side.append(panel.element);
  const show = (): void => panel.show(core.model.get("findings") || []);
  return {
    name: "findings",
    traits: { findings: show },
    loaded: show,
    subject() {
      const first = (core.model.get("findings") || []).find((f) => f.node);
      if (!first) return null;
      const id = findingTarget(first.node);
      const key = graphIndex(core.payload).pos.has(id) ? nodeKey(id) : callKey(id);
      return { keys: [key], withLoss: true, name: first.node };
    },
  };
};

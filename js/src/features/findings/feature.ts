// gv.doctor's findings (the `findings` trait) listed beside the graph; a click reveals the finding's
// node or box.
import type { Core, FeatureFactory } from "../../core/context";
import type { Feature } from "../../core/feature";
import { reveal } from "../../core/reveal";
import { createFindingsPanel } from "./panel";

export const findings: FeatureFactory = (core: Core, slots): Feature => {
  const panel = createFindingsPanel((node) => void reveal(core, node));
  slots.side.append(panel.element);
  const show = (): void => panel.show(core.model.get("findings") || []);
  return { name: "findings", traits: { findings: show }, loaded: show };
};

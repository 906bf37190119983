// Repeated-block stacks drawn folded ("48 × Block"): a click unfolds one. The fold state itself is
// part of what is open (the core's disclosure), since it decides what is laid out.
import type { Core, FeatureFactory } from "../../core/context";
import { unfoldGroup } from "../../core/disclosure";
import type { Feature } from "../../core/feature";
import { foldedGroups, foldKey } from "../../state/fold";

export interface FoldingHooks {
  /** Unfold a fold group (as a click on its stacked box), resolves after the layout. */
  unfold(groupId: string): Promise<void>;
  /** Fold group ids currently drawn folded. */
  folded(): string[];
}

export const folding: FeatureFactory<FoldingHooks> = (core: Core): Feature<FoldingHooks> => ({
  name: "folding",
  // A folded stack is never a toggle or a step target: a click unfolds it.
  click(key, kind) {
    if (kind !== "folded") return false;
    void unfoldGroup(core, key.slice(2));
    return true;
  },
  // The stacks are the bulk of the model: framed (with the loss when both fit) when nothing else is.
  subject() {
    const keys = foldedGroups(core.folded).map(foldKey);
    return keys.length ? { keys, withLoss: true, name: "the folded stacks", weak: true } : null;
  },
  hooks: {
    async unfold(groupId) {
      await unfoldGroup(core, groupId);
      await core.pending;
    },
    folded: () => foldedGroups(core.folded),
  },
});

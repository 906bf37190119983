// The search box (toolbar) and its ranked results: a pick reveals the node or box; in a graph too big
// to draw, the pick's neighbourhood is what is drawn until the search is cleared.
import type { Core, FeatureFactory } from "../../core/context";
import { relayout } from "../../core/drawing";
import type { Feature } from "../../core/feature";
import { reveal } from "../../core/reveal";
import { createSearch } from "./panel";
import { search as find } from "./state";

export interface SearchHooks {
  /** The search box's ranked hits for `q` (at most 50). */
  search(q: string): { key: string; label: string }[];
}

export const search: FeatureFactory<SearchHooks> = (core: Core, slots): Feature<SearchHooks> => {
  const box = createSearch({
    query(q) {
      const { hits, total } = find(core.payload, q);
      box.show(hits, total);
    },
    pick: (hit) => void reveal(core, hit.id, hit.label),
    clear() {
      if (core.focus === null) return;
      core.focus = null;
      void relayout(core, { fit: true });
    },
  });
  slots.tools.append(box.input);
  slots.body.append(box.results);
  return {
    name: "search",
    hooks: { search: (q) => find(core.payload, q).hits.map((h) => ({ key: h.key, label: h.label })) },
    dispose: () => box.dispose(),
  };
};

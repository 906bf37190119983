// The key: what the basic encoding means (blue leaves, grey ops, the bold root, dashed closed boxes,
// double-bordered folded stacks, dashed grey ghosts, "×2" edges). Collapsed by default, always there:
// a "?" in the toolbar (no panel can cover it), or the ? key; a click on the canvas closes it (the
// click still selects what it hit). Swatches use the live theme's colours.
import type { Core, FeatureFactory } from "../../core/context";
import type { Feature } from "../../core/feature";
import type { Theme } from "../../view/theme";
import { keyEntries } from "./entries";
import { createKeyPanel, KEY_CSS } from "./panel";

export interface KeyHooks {
  /** Open or close the key (as a click on its "?"); returns whether it is open now. */
  setKeyOpen(open: boolean): boolean;
}

export const key: FeatureFactory<KeyHooks> = (core: Core, slots): Feature<KeyHooks> => {
  const panel = createKeyPanel();
  slots.tools.append(panel.toggle);
  slots.body.append(panel.element);
  // Any tap on the canvas (background, node, edge): the key gives the graph back.
  const close = (): void => {
    if (panel.isOpen()) panel.setOpen(false);
  };
  core.view.cy.on("tap", close);
  return {
    name: "key",
    css: KEY_CSS,
    dispose: () => void core.view.cy.off("tap", close),
    // Called with the theme at start and on every theme change: redraw the swatches in it.
    styles(t: Theme) {
      panel.render(keyEntries(t));
      return [];
    },
    key(e) {
      const tag = (e.target as HTMLElement | null)?.tagName ?? "";
      // A "?" typed into the search box (or any field) is text, not a shortcut.
      if (e.key !== "?" || e.ctrlKey || e.metaKey || e.altKey || ["INPUT", "SELECT", "TEXTAREA"].includes(tag)) return false;
      panel.setOpen(!panel.isOpen());
      return true;
    },
    hooks: {
      setKeyOpen(open) {
        panel.setOpen(open);
        return panel.isOpen();
      },
    },
  };
};

// The overview's colours for decorated elements (what-if lost and pruned, diff added, heat, the stepper's
// running node, NaN, ...): asked of Cytoscape itself, a headless instance holding the view's stylesheet,
// once per element kind and class set. Any feature's rule shows zoomed out as it does mounted, with no
// table of colours to keep in step with style.ts.
import cytoscape from "cytoscape";
import type { Core, StylesheetJson } from "cytoscape";

/** How the overview draws one decorated element. `far`: the colour of a node a few pixels wide (its
 *  border colour when the decoration is a border, else its fill). */
export interface Paint {
  fill: string;
  line: string;
  far: string;
  alpha: number;
}

export class DecorationColours {
  private probe: Core | null = null;
  private known = new Map<string, Paint>();

  constructor(private sheet: StylesheetJson) {}

  setSheet(sheet: StylesheetJson): void {
    this.sheet = sheet;
    this.known.clear();
    this.probe?.destroy();
    this.probe = null;
  }

  private core(): Core {
    this.probe ??= cytoscape({ headless: true, styleEnabled: true, style: this.sheet });
    return this.probe;
  }

  /** A node of `kind` with `classes` (its own and a feature's), as Cytoscape would draw it. */
  node(kind: string, classes: string): Paint {
    const key = `n\n${kind}\n${classes}`;
    let p = this.known.get(key);
    if (p) return p;
    const cy = this.core();
    const ele = cy.add({ group: "nodes", data: { id: "probe", kind, label: "", w: 10, h: 10, z: 0 }, classes });
    const fill = String(ele.style("background-color"));
    const line = String(ele.style("border-color"));
    const alpha = Number(ele.style("opacity"));
    ele.remove();
    const plain = classes === "" ? null : this.node(kind, "");
    p = { fill, line, far: plain && plain.fill === fill ? line : fill, alpha: Number.isFinite(alpha) ? alpha : 1 };
    this.known.set(key, p);
    return p;
  }

  /** An edge with `classes`: its line colour (fill and far alike). Only the classes that colour an edge
   *  are asked about (a routed or pinned edge's geometry comes from data the probe does not have). */
  edge(classes: string): Paint {
    classes = classes.split(" ").filter((c) => c && c !== "routed" && c !== "pinned").join(" ");
    const key = `e\n${classes}`;
    let p = this.known.get(key);
    if (p) return p;
    const cy = this.core();
    const ends = cy.add([
      { group: "nodes", data: { id: "probe-s", kind: "op", label: "", w: 10, h: 10, z: 0 } },
      { group: "nodes", data: { id: "probe-t", kind: "op", label: "", w: 10, h: 10, z: 0 } },
    ]);
    const data = { id: "probe-e", source: "probe-s", target: "probe-t", count: 1, countLabel: "", flowLabel: "", cutLabel: "" };
    const ele = cy.add({ group: "edges", data, classes });
    const line = String(ele.style("line-color"));
    const alpha = Number(ele.style("opacity"));
    ends.remove();
    p = { fill: line, line, far: line, alpha: Number.isFinite(alpha) ? alpha : 1 };
    this.known.set(key, p);
    return p;
  }

  dispose(): void {
    this.probe?.destroy();
    this.probe = null;
  }
}

/** Same drawing as `b`: one bucket of the overview. */
export function samePaint(a: Paint, b: Paint): boolean {
  return a.fill === b.fill && a.line === b.line && a.alpha === b.alpha;
}

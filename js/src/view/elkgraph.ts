// The layout types every engine speaks (Layout, Size, Point, BOX_PADDING), and the ELK graph for a
// visible quotient graph with ELK's answer turned into absolute positions and edge routes. ELK is not
// shipped (the page uses layered/): elkjs is a dev dependency, the reference the tests and
// benchmarks/bench_layout.* measure the layered layout against. Pure (no worker, no DOM).
import type { ElkExtendedEdge, ElkNode } from "elkjs/lib/elk-api";
import type { VisibleGraph } from "../state/quotient";

export interface Size {
  width: number;
  height: number;
}

/** Space a layout keeps inside an expanded box; the top is larger to hold the header label. */
export const BOX_PADDING = { top: 34, side: 12 };

export interface Point {
  x: number;
  y: number;
}

export interface Layout {
  /** Centre positions of every item (open boxes included). */
  positions: Map<string, Point>;
  /** Open boxes: their size as laid out (header padding included). */
  boxes: Map<string, Size>;
  /** Edge key -> its orthogonal route in absolute coordinates: start, bends, end. */
  routes: Map<string, Point[]>;
}

const ROOT_OPTIONS: Record<string, string> = {
  "elk.algorithm": "layered",
  "elk.direction": "DOWN",
  "elk.hierarchyHandling": "INCLUDE_CHILDREN",
  "elk.layered.spacing.nodeNodeBetweenLayers": "36",
  "elk.spacing.nodeNode": "22",
  "elk.layered.spacing.edgeNodeBetweenLayers": "14",
  "elk.spacing.componentComponent": "40",
  "elk.layered.nodePlacement.strategy": "LINEAR_SEGMENTS",
  "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
  "elk.edgeRouting": "ORTHOGONAL",
  // Absolute edge coordinates, whatever box an edge was declared in.
  "elk.json.edgeCoords": "ROOT",
};

/** An open box is at least as wide as its header (`size.width`, measured; absent: no minimum). Layered
 *  lays hierarchical graphs out sideways and turns them DOWN afterwards, so the minimum is given as
 *  (height, width): js/test/elkgraph.test.ts checks the box really comes out that wide. */
function minimumWidth(size: Size | undefined): Record<string, string> {
  if (!size || !(size.width > 0)) return {};
  return { "elk.nodeSize.constraints": "MINIMUM_SIZE", "elk.nodeSize.minimum": `(0,${Math.ceil(size.width)})` };
}

/** ELK's graph wrapping: a long layered graph is cut into columns side by side, aiming at this
 *  width / height (for pictures on slides and pages, not a tall strip). */
const wrapOptions = (aspect: number): Record<string, string> => ({
  "elk.layered.wrapping.strategy": "MULTI_EDGE",
  "elk.aspectRatio": String(aspect),
});

/** The ELK graph: expanded boxes nest their members; each edge lives in its endpoints' common box.
 *  `aspect` (width / height) wraps the layers into columns. */
export function toElk(graph: VisibleGraph, sizeOf: (key: string) => Size | undefined, aspect: number | null = null): ElkNode {
  const root: ElkNode = { id: "__root__", layoutOptions: { ...ROOT_OPTIONS, ...(aspect ? wrapOptions(aspect) : {}) }, children: [], edges: [] };
  const elkOf = new Map<string, ElkNode>([["__root__", root]]);
  const parentOf = new Map<string, string>();
  for (const item of graph.items) {
    const node: ElkNode =
      item.type === "expanded"
        ? {
            id: item.key,
            children: [],
            edges: [],
            layoutOptions: {
              "elk.padding": `[top=${BOX_PADDING.top},left=${BOX_PADDING.side},bottom=${BOX_PADDING.side},right=${BOX_PADDING.side}]`,
              ...minimumWidth(sizeOf(item.key)),
            },
          }
        : { id: item.key, ...sizeOf(item.key) };
    elkOf.set(item.key, node);
    parentOf.set(item.key, item.parent ?? "__root__");
  }
  // Items come parents first, so each parent exists by the time its children are attached.
  for (const item of graph.items) {
    const parent = elkOf.get(item.parent ?? "__root__") ?? root;
    parent.children!.push(elkOf.get(item.key)!);
  }
  const ancestors = (key: string): string[] => {
    const out: string[] = [];
    for (let k = parentOf.get(key); k !== undefined; k = parentOf.get(k)) out.push(k);
    return out;
  };
  for (const e of graph.edges) {
    const up = new Set(ancestors(e.source));
    const common = ancestors(e.target).find((k) => up.has(k)) ?? "__root__";
    const edge: ElkExtendedEdge = { id: e.key, sources: [e.source], targets: [e.target] };
    (elkOf.get(common) ?? root).edges!.push(edge);
  }
  return root;
}

/** ELK positions are relative to the parent box and top-left based; Cytoscape wants absolute centres.
 *  Open boxes come out as plain rectangles (centre + size): the view draws them behind their members
 *  instead of as Cytoscape compounds, whose restyles cascade through every ancestor. */
export function fromElk(root: ElkNode): Layout {
  const out = new Map<string, Point>();
  const boxes = new Map<string, Size>();
  const routes = new Map<string, Point[]>();
  const walk = (node: ElkNode, dx: number, dy: number): void => {
    for (const edge of node.edges ?? []) {
      const section = edge.sections?.[0];
      if (section) routes.set(edge.id, [section.startPoint, ...(section.bendPoints ?? []), section.endPoint]);
    }
    for (const child of node.children ?? []) {
      const x = dx + (child.x ?? 0);
      const y = dy + (child.y ?? 0);
      out.set(child.id, { x: x + (child.width ?? 0) / 2, y: y + (child.height ?? 0) / 2 });
      if (child.children && child.children.length > 0) {
        boxes.set(child.id, { width: child.width ?? 0, height: child.height ?? 0 });
        walk(child, x, y);
      }
    }
  };
  walk(root, 0, 0);
  return { positions: out, boxes, routes };
}

// Layered layout (ELK) in a Web Worker, so laying out a big graph never blocks the notebook.
// The worker's source is inlined as text and started from a Blob URL: this works from one ESM
// file, inside JupyterLab / VS Code, and from an exported file:// page alike.
import ELK from "elkjs/lib/elk-api.js";
import type { ElkExtendedEdge, ElkNode } from "elkjs/lib/elk-api";
import workerSource from "elkjs/lib/elk-worker.min.js?raw";
import type { VisibleGraph } from "../state/quotient";

export interface Size {
  width: number;
  height: number;
}

/** Space ELK keeps inside an expanded box; the top is larger to hold the header label. */
export const BOX_PADDING = { top: 34, side: 12 };

/** Centre positions of the non-compound items (compound boxes follow their children). */
export type Positions = Map<string, { x: number; y: number }>;

export class LayoutEngine {
  private elk: InstanceType<typeof ELK>;
  private worker: Worker;
  private url: string;

  constructor() {
    this.url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
    this.worker = new Worker(this.url);
    this.elk = new ELK({ workerFactory: () => this.worker });
  }

  async layout(graph: VisibleGraph, sizeOf: (key: string) => Size): Promise<Positions> {
    const result = await this.elk.layout(toElk(graph, sizeOf));
    return fromElk(result);
  }

  dispose(): void {
    this.worker.terminate();
    URL.revokeObjectURL(this.url);
  }
}

const ROOT_OPTIONS: Record<string, string> = {
  "elk.algorithm": "layered",
  "elk.direction": "DOWN",
  "elk.hierarchyHandling": "INCLUDE_CHILDREN",
  "elk.layered.spacing.nodeNodeBetweenLayers": "36",
  "elk.spacing.nodeNode": "22",
  "elk.layered.spacing.edgeNodeBetweenLayers": "14",
  "elk.spacing.componentComponent": "40",
  "elk.layered.nodePlacement.strategy": "NETWORK_SIMPLEX",
  "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
};

/** The ELK graph: expanded boxes nest their members; each edge lives in its endpoints' common box. */
export function toElk(graph: VisibleGraph, sizeOf: (key: string) => Size): ElkNode {
  const root: ElkNode = { id: "__root__", layoutOptions: ROOT_OPTIONS, children: [], edges: [] };
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

/** ELK positions are relative to the parent box and top-left based; Cytoscape wants absolute centres. */
export function fromElk(root: ElkNode): Positions {
  const out: Positions = new Map();
  const walk = (node: ElkNode, dx: number, dy: number): void => {
    for (const child of node.children ?? []) {
      const x = dx + (child.x ?? 0);
      const y = dy + (child.y ?? 0);
      if (child.children && child.children.length > 0) walk(child, x, y);
      else out.set(child.id, { x: x + (child.width ?? 0) / 2, y: y + (child.height ?? 0) / 2 });
    }
  };
  walk(root, 0, 0);
  return out;
}

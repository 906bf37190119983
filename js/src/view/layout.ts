// Layered layout (ELK) in a Web Worker, so laying out a big graph never blocks the notebook.
// The worker's source is inlined as text and started from a Blob URL: this works from one ESM
// file, inside JupyterLab / VS Code, and from an exported file:// page alike.
import ELK from "elkjs/lib/elk-api.js";
import workerSource from "elkjs/lib/elk-worker.min.js?raw";
import type { VisibleGraph } from "../state/quotient";
import { fromElk, toElk, type Layout, type Size } from "./elkgraph";
import { simpleLayout } from "./simplelayout";

/** Above this many visible items ELK is skipped: measured, a 5,000-node chain overflows the worker's
 *  stack and takes ~19 s with a big stack; the plain layered layout takes milliseconds. */
export const ELK_LIMIT = 2500;

export type { Layout, Point, Size } from "./elkgraph";

export class LayoutEngine {
  private elk: InstanceType<typeof ELK>;
  private worker: Worker;
  private url: string;

  constructor() {
    this.url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
    this.worker = new Worker(this.url);
    this.elk = new ELK({ workerFactory: () => this.worker });
  }

  /** True when the last layout was the plain fallback (the graph was too big for ELK). */
  simple = false;

  async layout(graph: VisibleGraph, sizeOf: (key: string) => Size): Promise<Layout> {
    this.simple = graph.items.length > ELK_LIMIT;
    if (this.simple) return simpleLayout(graph, sizeOf);
    try {
      return fromElk(await this.elk.layout(toElk(graph, sizeOf)));
    } catch {
      // ELK's recursion can overflow the worker's stack on long chains: still draw the graph.
      this.simple = true;
      return simpleLayout(graph, sizeOf);
    }
  }

  dispose(): void {
    this.worker.terminate();
    URL.revokeObjectURL(this.url);
  }
}


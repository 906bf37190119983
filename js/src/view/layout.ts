// Layered layout (ELK) in a Web Worker, so laying out a big graph never blocks the notebook.
// The worker's source is inlined as text and started from a Blob URL: this works from one ESM
// file, inside JupyterLab / VS Code, and from an exported file:// page alike.
import ELK from "elkjs/lib/elk-api.js";
import workerSource from "elkjs/lib/elk-worker.min.js?raw";
import type { VisibleGraph } from "../state/quotient";
import { fromElk, toElk, type Layout, type Size } from "./elkgraph";

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

  async layout(graph: VisibleGraph, sizeOf: (key: string) => Size): Promise<Layout> {
    const result = await this.elk.layout(toElk(graph, sizeOf));
    return fromElk(result);
  }

  dispose(): void {
    this.worker.terminate();
    URL.revokeObjectURL(this.url);
  }
}


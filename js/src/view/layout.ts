// Layered layout (ELK) in a Web Worker, so laying out a big graph never blocks the notebook.
// The worker's source is inlined as text and started from a Blob URL: this works from one ESM
// file, inside JupyterLab / VS Code, and from an exported file:// page alike. The plain fallback for
// graphs too big for ELK runs in a second Blob-URL worker (its code is one self-contained function).
import ELK from "elkjs/lib/elk-api.js";
import workerSource from "elkjs/lib/elk-worker.min.js?raw";
import type { VisibleGraph } from "../state/quotient";
import { fromElk, toElk, type Layout, type Size } from "./elkgraph";
import { decodePlain, encodePlain, plainCoreSource, plainLayoutCore, type PlainInput, type PlainOutput } from "./simplelayout";

/** Above this many visible items ELK is skipped: measured, a 5,000-node chain overflows the worker's
 *  stack and takes ~19 s with a big stack; the plain layered layout takes milliseconds. */
export const ELK_LIMIT = 2500;

export type { Layout, Point, Size } from "./elkgraph";

/** The plain layout's worker: runs `plainLayoutCore` (shipped as source text, with its parts) on typed arrays. */
function plainWorkerSource(): string {
  return (
    `"use strict";const core=${plainCoreSource()};` +
    "self.onmessage=(e)=>{const o=core(e.data.input);" +
    "self.postMessage({id:e.data.id,out:o},[o.x.buffer,o.y.buffer,o.width.buffer,o.height.buffer]);};"
  );
}

class PlainWorker {
  private worker: Worker | null = null;
  private url = "";
  private next = 0;
  private waiting = new Map<number, { resolve(out: PlainOutput): void; reject(err: Error): void }>();

  run(input: PlainInput): Promise<PlainOutput> {
    if (!this.worker) {
      this.url = URL.createObjectURL(new Blob([plainWorkerSource()], { type: "text/javascript" }));
      this.worker = new Worker(this.url);
      this.worker.onmessage = (e: MessageEvent<{ id: number; out: PlainOutput }>) => {
        const job = this.waiting.get(e.data.id);
        this.waiting.delete(e.data.id);
        job?.resolve(e.data.out);
      };
      this.worker.onerror = (e) => {
        const err = new Error(e.message || "plain layout worker failed");
        for (const job of this.waiting.values()) job.reject(err);
        this.dispose();
      };
    }
    const worker = this.worker;
    const id = this.next++;
    return new Promise<PlainOutput>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      const buffers = [input.open, input.parent, input.width, input.height, input.source, input.target, input.gaps].map((a) => a.buffer);
      worker.postMessage({ id, input }, buffers as ArrayBuffer[]);
    });
  }

  dispose(): void {
    this.worker?.terminate();
    if (this.url) URL.revokeObjectURL(this.url);
    this.worker = null;
    this.url = "";
    this.waiting.clear();
  }
}

export class LayoutEngine {
  private elk: InstanceType<typeof ELK>;
  private worker: Worker;
  private url: string;
  private plain = new PlainWorker();

  constructor() {
    this.url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
    this.worker = new Worker(this.url);
    this.elk = new ELK({ workerFactory: () => this.worker });
  }

  /** True when the last layout was the plain fallback (the graph was too big for ELK). */
  simple = false;

  /** Width / height to wrap long graphs into (null: one tall column, the default). */
  aspect: number | null = null;

  async layout(graph: VisibleGraph, sizeOf: (key: string) => Size): Promise<Layout> {
    this.simple = graph.items.length > ELK_LIMIT;
    if (this.simple) return this.simpleLayout(graph, sizeOf);
    try {
      return fromElk(await this.elk.layout(toElk(graph, sizeOf, this.aspect)));
    } catch {
      // ELK's recursion can overflow the worker's stack on long chains: still draw the graph.
      this.simple = true;
      return this.simpleLayout(graph, sizeOf);
    }
  }

  /** The plain layout off the main thread (on it only if a worker cannot be started). */
  private async simpleLayout(graph: VisibleGraph, sizeOf: (key: string) => Size): Promise<Layout> {
    let out: PlainOutput;
    try {
      out = await this.plain.run(encodePlain(graph, sizeOf));
    } catch {
      out = plainLayoutCore(encodePlain(graph, sizeOf));
    }
    return decodePlain(graph, out);
  }

  dispose(): void {
    this.worker.terminate();
    URL.revokeObjectURL(this.url);
    this.plain.dispose();
  }
}

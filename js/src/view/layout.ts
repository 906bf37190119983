// Layered layout (our own, layered/) in a Web Worker, so laying out a big graph never blocks the
// notebook. The worker's source is bundled on its own and inlined as text, started from a Blob URL: this
// works from one ESM file, inside JupyterLab / VS Code, and from an exported file:// page alike. The
// plain fallback for the biggest graphs runs in a second Blob-URL worker (its code is one self-contained
// function). Chosen over elkjs by measurement (benchmarks/bench_layout.mjs): the same checks pass (no
// edge through a box, boxes as wide as their header), 10-50x faster, and 1.6 MB less to ship.
import type { VisibleGraph } from "../state/quotient";
import type { Layout, Size } from "./elkgraph";
import { layeredLayout, slim } from "./layered/compound";
import layeredSource from "./layered/worker.ts?worker";
import { decodePlain, encodePlain, plainCoreSource, plainLayoutCore, type PlainInput, type PlainOutput } from "./simplelayout";

/** Above this many visible items the layered layout is skipped for the plain one (straight edges, boxes
 *  may overlap): measured, a 2,000-node chain takes the layered layout 0.2-0.5 s, ELK 3-9 s. */
export const LAYERED_LIMIT = 2500;

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

/** The layered layout's worker: one job at a time per request id; Maps survive the structured clone. */
class LayeredWorker {
  private worker: Worker | null = null;
  private url = "";
  private next = 0;
  private waiting = new Map<number, { resolve(out: Layout): void; reject(err: Error): void }>();

  run(graph: VisibleGraph, sizes: Map<string, Size>, aspect: number | null): Promise<Layout> {
    if (!this.worker) {
      this.url = URL.createObjectURL(new Blob([layeredSource], { type: "text/javascript" }));
      this.worker = new Worker(this.url);
      this.worker.onmessage = (e: MessageEvent<{ id: number; layout?: Layout; error?: string }>) => {
        const job = this.waiting.get(e.data.id);
        this.waiting.delete(e.data.id);
        if (e.data.layout) job?.resolve(e.data.layout);
        else job?.reject(new Error(e.data.error ?? "layout failed"));
      };
      this.worker.onerror = (e) => {
        const err = new Error(e.message || "layout worker failed");
        for (const job of this.waiting.values()) job.reject(err);
        this.dispose();
      };
    }
    const worker = this.worker;
    const id = this.next++;
    return new Promise<Layout>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      worker.postMessage({ id, graph: slim(graph), sizes, aspect });
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
  private layered = new LayeredWorker();
  private plain = new PlainWorker();

  /** True when the last layout was the plain fallback (the graph was too big for the layered one). */
  simple = false;

  /** Width / height to wrap long graphs into (null: one tall column, the default). */
  aspect: number | null = null;

  async layout(graph: VisibleGraph, sizeOf: (key: string) => Size): Promise<Layout> {
    this.simple = graph.items.length > LAYERED_LIMIT;
    if (this.simple) return this.simpleLayout(graph, sizeOf);
    const sizes = new Map<string, Size>();
    for (const item of graph.items) sizes.set(item.key, sizeOf(item.key));
    try {
      return await this.layered.run(graph, sizes, this.aspect);
    } catch {
      // No worker (or it failed): the same layout on this thread.
      return layeredLayout(graph, (k) => sizes.get(k), this.aspect);
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
    this.layered.dispose();
    this.plain.dispose();
  }
}

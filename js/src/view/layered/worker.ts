// The layered layout's Web Worker: build.mjs bundles this file on its own and inlines it as text
// (`import source from "./layered/worker.ts?worker"`), started from a Blob URL like the plain one.
import { layeredLayout, type LayeredGraph } from "./compound";
import type { Size } from "../elkgraph";

interface Job {
  id: number;
  graph: LayeredGraph;
  sizes: Map<string, Size>;
  aspect: number | null;
}

const scope = self as unknown as { onmessage: ((e: MessageEvent<Job>) => void) | null; postMessage(m: unknown): void };
scope.onmessage = (e) => {
  const { id, graph, sizes, aspect } = e.data;
  try {
    scope.postMessage({ id, layout: layeredLayout(graph, (k) => sizes.get(k), aspect) });
  } catch (err) {
    scope.postMessage({ id, error: String(err) });
  }
};

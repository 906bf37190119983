// The layout benchmark's body (bundled and run by bench_layout.mjs): every graph laid out by ELK
// (elkjs's in-process build) and by our layered layout, timed, and measured by the same checks
// (js/test/layoutquality.ts: edges through boxes, boxes narrower than their header, members outside
// their box, overlaps, crossings, area). Sizes come from the page's own fallback measure (no canvas).
import { readFileSync, readdirSync, existsSync } from "node:fs";
import path from "node:path";
import ELK from "elkjs/lib/elk.bundled.js";
import type { GraphPayload } from "../js/src/payload";
import { expandAll } from "../js/src/state/expansion";
import { foldedCalls, indexFolds, unfoldForExpanded } from "../js/src/state/fold";
import { labelOf } from "../js/src/view/elements";
import { BOX_PADDING, fromElk, toElk, type Layout, type Size } from "../js/src/view/elkgraph";
import { layeredLayout } from "../js/src/view/layered/compound";
import { indexCalls, visibleGraph, type VisibleGraph } from "../js/src/state/quotient";
import { quality } from "../js/test/layoutquality";

// Bundled into build/bench_layout/: the repository is two levels up.
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..", "..");

function sizes(graph: VisibleGraph): Map<string, Size> {
  const out = new Map<string, Size>();
  for (const item of graph.items) {
    const lines = labelOf(item).split("\n");
    const boxy = item.type === "collapsed" || item.type === "folded";
    const bold = boxy || item.type === "expanded" || (item.type === "node" && item.node.kind === "root");
    const width = Math.max(...lines.map((l) => l.length)) * 11 * 0.62;
    if (item.type === "expanded") out.set(item.key, { width: width + 2 * BOX_PADDING.side, height: 0 });
    else out.set(item.key, { width: Math.ceil(Math.max(48, width + 20 + (bold ? 4 : 0))), height: lines.length * 14 + 2 * (boxy ? 11 : 7) });
  }
  return out;
}

function cases(): [string, VisibleGraph][] {
  const out: [string, VisibleGraph][] = [];
  const load = (file: string): GraphPayload => JSON.parse(readFileSync(file, "utf8"));
  const add = (name: string, p: GraphPayload, expanded: Set<string>): void => {
    const index = indexCalls(p);
    const folds = indexFolds(p, index);
    const folded = foldedCalls(folds, expanded, unfoldForExpanded(new Set(), expanded, folds, index));
    out.push([name, visibleGraph(p, expanded, index, folded)]);
  };
  const fixtures = path.join(ROOT, "tests", "fixtures");
  for (const f of readdirSync(fixtures).filter((f) => f.endsWith(".json")).sort()) {
    // A fixture is a payload, or holds some under "graph" (a recording, a diff's sides).
    const raw = load(path.join(fixtures, f)) as unknown as Record<string, { graph?: GraphPayload }>;
    const found: [string, GraphPayload][] = Array.isArray((raw as unknown as GraphPayload).nodes)
      ? [[f.replace(".json", ""), raw as unknown as GraphPayload]]
      : Object.entries(raw).filter(([k, v]) => k === "graph" ? Array.isArray((v as unknown as GraphPayload).nodes) : Array.isArray(v?.graph?.nodes))
          .map(([k, v]) => [`${f.replace(".json", "")}.${k}`, k === "graph" ? (v as unknown as GraphPayload) : v.graph!]);
    for (const [name, p] of found) {
      add(`${name} closed`, p, new Set());
      add(`${name} open`, p, expandAll(indexCalls(p)));
    }
  }
  const built = path.join(ROOT, "build", "bench_layout");
  const mlp = path.join(built, "mlp.json");
  if (existsSync(mlp)) {
    const p = load(mlp);
    add("mlp closed", p, new Set());
    add("mlp open", p, expandAll(indexCalls(p)));
  }
  const gpt = path.join(built, "gpt2.json");
  if (existsSync(gpt)) {
    const p = load(gpt);
    const index = indexCalls(p);
    add("gpt2 top", p, new Set());
    add("gpt2 blocks 0-2 open", p, new Set(["blocks", "blocks.0", "blocks.1", "blocks.2"].filter((c) => index.calls.has(c))));
    const inside = [...expandAll(index)].filter((c) => c === "blocks" || c.startsWith("blocks.0") || c.startsWith("blocks.11"));
    add("gpt2 blocks 0,11 all open", p, new Set(inside));
  }
  const chain = path.join(built, "chain2000.json");
  if (existsSync(chain)) add("chain 2000", load(chain), new Set());
  return out;
}

async function timed<T>(run: () => Promise<T> | T, repeat: number): Promise<{ out: T; ms: number }> {
  let out = await run();
  const times: number[] = [];
  for (let i = 0; i < repeat; i++) {
    const t0 = performance.now();
    out = await run();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return { out, ms: times[Math.floor(times.length / 2)] };
}

export async function main(): Promise<void> {
  const elk = new ELK();
  const rows: string[] = [];
  const head = "| graph | items | edges | engine | ms | through boxes | through headers | narrow boxes | outside / overlaps | crossings | area (k units²) | unrouted |";
  rows.push(head, head.replace(/[^|]+/g, "---"));
  let failures = 0;
  for (const [name, graph] of cases()) {
    const s = sizes(graph);
    const sizeOf = (k: string): Size => s.get(k)!;
    const header = (k: string): number => s.get(k)?.width ?? 0;
    const engines: [string, () => Promise<Layout> | Layout][] = [
      ["elk", async () => fromElk(await elk.layout(toElk(graph, sizeOf)))],
      ["layered", () => layeredLayout(graph, sizeOf)],
    ];
    for (const [engine, run] of engines) {
      let r: { out: Layout; ms: number };
      try {
        r = await timed(run, graph.items.length > 1000 ? 1 : 3);
      } catch (err) {
        rows.push(`| ${name} | ${graph.items.length} | ${graph.edges.length} | ${engine} | failed: ${String(err).slice(0, 60)} |`);
        continue;
      }
      const q = quality(graph, r.out, sizeOf, header);
      if (engine === "layered" && (q.through.length || q.headers.length || q.narrow.length || q.outside.length || q.overlaps)) {
        failures++;
        console.error(name, engine, JSON.stringify({ through: q.through.slice(0, 5), headers: q.headers.slice(0, 5), narrow: q.narrow.slice(0, 5), outside: q.outside.slice(0, 5), overlaps: q.overlaps }));
      }
      rows.push(
        `| ${name} | ${graph.items.length} | ${graph.edges.length} | ${engine} | ${r.ms.toFixed(1)} | ${q.through.length} | ${q.headers.length} | ${q.narrow.length} | ` +
          `${q.outside.length} / ${q.overlaps} | ${q.crossings} | ${((q.width * q.height) / 1000).toFixed(0)} (${q.width.toFixed(0)} x ${q.height.toFixed(0)}) | ${q.unrouted} |`,
      );
    }
  }
  console.log(rows.join("\n"));
  if (failures) process.exitCode = 1;
}

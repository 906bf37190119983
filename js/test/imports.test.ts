// The front end's layering, checked on the real import statements (parsed by the TypeScript compiler,
// type-only imports included): no cycle between files, the core (src/core, src/state, src/view,
// src/panels) imports no feature, and no feature imports another feature.
import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import ts from "typescript";

const SRC = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../src");

function sources(): string[] {
  return readdirSync(SRC, { recursive: true })
    .map(String)
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts") && !f.endsWith(".test.ts") && !f.endsWith("_cli.ts"));
}

/** File (relative to src) -> the src files it imports. */
export function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sources()) {
    const info = ts.preProcessFile(readFileSync(path.join(SRC, file), "utf8"), true, true);
    const deps = info.importedFiles
      .map((i) => i.fileName)
      .filter((spec) => spec.startsWith("."))
      .map((spec) => path.normalize(path.join(path.dirname(file), spec)))
      .map((p) => (p.endsWith(".css") ? p : p + ".ts"))
      .map((p) => (graph.has(p) || sources().includes(p) ? p : p.replace(/\.ts$/, "/index.ts")));
    graph.set(file, deps);
  }
  return graph;
}

/** Every cycle's files (empty: none), by depth-first search. */
export function cycles(graph: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 1 | 2>();
  const stack: string[] = [];
  const visit = (f: string): void => {
    state.set(f, 1);
    stack.push(f);
    for (const d of graph.get(f) ?? []) {
      if (state.get(d) === 1) found.push([...stack.slice(stack.indexOf(d)), d]);
      else if (!state.has(d)) visit(d);
    }
    stack.pop();
    state.set(f, 2);
  };
  for (const f of graph.keys()) if (!state.has(f)) visit(f);
  return found;
}

const featureOf = (f: string): string | null => (f.startsWith("features/") && f.split("/").length > 2 ? f.split("/")[1] : null);

test("imports: no cycle between front-end files", () => {
  assert.deepEqual(cycles(importGraph()), []);
});

test("imports: the core knows no feature, and no feature imports another", () => {
  const wrong: string[] = [];
  for (const [file, deps] of importGraph()) {
    const mine = featureOf(file);
    for (const d of deps) {
      const theirs = featureOf(d);
      if (!theirs) continue;
      if (mine === null && file !== "features/index.ts") wrong.push(`${file} (core) imports ${d}`);
      else if (mine !== null && mine !== theirs) wrong.push(`${file} imports another feature: ${d}`);
    }
  }
  assert.deepEqual(wrong, []);
});

test("imports: the checks see a cycle and a core-to-feature import when there is one", () => {
  const graph = new Map([
    ["core/a.ts", ["core/b.ts"]],
    ["core/b.ts", ["core/a.ts", "features/x/feature.ts"]],
    ["features/x/feature.ts", []],
  ]);
  assert.deepEqual(cycles(graph), [["core/a.ts", "core/b.ts", "core/a.ts"]]);
  assert.equal(featureOf("features/x/feature.ts"), "x");
  assert.equal(featureOf("features/index.ts"), null);
  assert.ok(importGraph().size > 40, "the real source tree was read");
});

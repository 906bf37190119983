// Small files and functions, measured on the real sources by the TypeScript compiler: no source file
// under src/ over MAX_FILE_LINES lines, no function (declaration, method, arrow, function expression,
// constructor, accessor) over MAX_FUNCTION_LINES lines. A long feature closure is split into state
// functions (node-testable) and a thin feature object instead.
import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import ts from "typescript";

const SRC = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../src");
export const MAX_FILE_LINES = 600;
export const MAX_FUNCTION_LINES = 120;

/** Every function-like node of `text` over `limit` lines: "file:line name (N lines)". */
export function longFunctions(file: string, text: string, limit: number): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const lineOf = (pos: number): number => source.getLineAndCharacterOfPosition(pos).line + 1;
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && "body" in node && node.body) {
      const first = lineOf(node.getStart(source));
      const lines = lineOf(node.getEnd()) - first + 1;
      if (lines > limit) found.push(`${file}:${first} ${nameOf(node, source)} (${lines} lines)`);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

function nameOf(node: ts.Node, source: ts.SourceFile): string {
  const named = node as { name?: ts.Node };
  if (named.name) return named.name.getText(source);
  const parent = node.parent;
  if (parent && (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent))) return parent.name.getText(source);
  return "(anonymous)";
}

function sources(): string[] {
  return readdirSync(SRC, { recursive: true })
    .map(String)
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))
    .sort();
}

test("no source file is over 600 lines", () => {
  const long = sources()
    .map((f) => [f, readFileSync(path.join(SRC, f), "utf8").split("\n").length - 1] as const)
    .filter(([, n]) => n > MAX_FILE_LINES)
    .map(([f, n]) => `${f} (${n} lines)`);
  assert.deepEqual(long, []);
});

test("no function is over 120 lines", () => {
  const long = sources().flatMap((f) => longFunctions(f, readFileSync(path.join(SRC, f), "utf8"), MAX_FUNCTION_LINES));
  assert.deepEqual(long, []);
});

test("the measure finds a long function of each kind and nothing in a short one", () => {
  const body = (n: number): string => Array.from({ length: n - 2 }, (_, i) => `  const v${i} = ${i};`).join("\n");
  const text = [
    `export function declared() {\n${body(121)}\n}`,
    `const arrow = () => {\n${body(121)}\n};`,
    `class K {\n  method() {\n${body(121)}\n  }\n}`,
    `const fine = function () {\n${body(120)}\n};`,
  ].join("\n");
  const found = longFunctions("x.ts", text, MAX_FUNCTION_LINES);
  assert.deepEqual(found.map((f) => f.split(" ")[1]), ["declared", "arrow", "method"]);
  assert.match(found[0], /^x\.ts:1 declared \(121 lines\)$/);
});

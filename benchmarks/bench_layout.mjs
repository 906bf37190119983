// Layout engines side by side: ELK (elkjs) and our own layered layout, on the same graphs, timed and
// checked (edges through boxes, labels inside boxes, crossings, area). Run by hand from the repo root:
//   .venv/bin/python benchmarks/bench_layout.py   # payloads of the MLP, GPT-2 124M, a 2,000-node chain
//   node benchmarks/bench_layout.mjs              # prints a Markdown table; exit 1 if ours fails a check
// Needs js/node_modules (npm --prefix js ci) with elkjs (a dev dependency once elkjs left the bundle).
import * as esbuild from "../js/node_modules/esbuild/lib/main.js";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.join(here, "..", "build", "bench_layout", "bench.mjs");
await esbuild.build({
  entryPoints: [path.join(here, "bench_layout.ts")],
  outfile: out,
  bundle: true,
  format: "esm",
  platform: "node",
  nodePaths: [path.join(here, "..", "js", "node_modules")],
  logLevel: "warning",
});
const { main } = await import(pathToFileURL(out).href);
await main();

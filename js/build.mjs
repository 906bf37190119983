// Bundles the two shipped files, each ONE self-contained ESM file, into ../gradviz_nb/static/:
//   widget.js  src/index.ts, the canvas: the layout worker's source and the CSS are inlined as text, so
//              nothing else is fetched at run time (exported pages embed it; the kernel's one
//              GradvizRuntime model holds it for every widget);
//   loader.js  src/loader.ts, each GraphWidget's `_esm`: finds the runtime model, imports the canvas once.
//   node build.mjs                 -> ../gradviz_nb/static/{widget,loader}.js
//   node build.mjs --outdir=X      -> X/{widget,loader}.js (used by the determinism test)
//   node build.mjs --watch         -> rebuild on change (pair with ANYWIDGET_HMR=1)
//   node build.mjs --tests         -> bundle test/*.test.ts into .test-build/ for `node --test`
import * as esbuild from "esbuild";
import { readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const flag = (name) => args.find((a) => a === name || a.startsWith(name + "="));
const outdirArg = flag("--outdir");
const outdir = outdirArg ? path.resolve(outdirArg.split("=")[1]) : path.join(here, "..", "gradviz_nb", "static");
// Every shipped file: output name -> entry (tests/page/test_frontend_bundle.py rebuilds each).
const shipped = { widget: "src/index.ts", loader: "src/loader.ts" };

// `import text from "some/file.js?raw"` -> the file's contents as a string.
const rawPlugin = {
  name: "raw",
  setup(build) {
    build.onResolve({ filter: /\?raw$/ }, async (a) => {
      const r = await build.resolve(a.path.slice(0, -4), { kind: a.kind, resolveDir: a.resolveDir });
      if (r.errors.length) return { errors: r.errors };
      return { path: r.path, namespace: "raw" };
    });
    build.onLoad({ filter: /.*/, namespace: "raw" }, async (a) => {
      const { readFile } = await import("node:fs/promises");
      return { contents: await readFile(a.path, "utf8"), loader: "text" };
    });
  },
};

// `import source from "./file.ts?worker"` -> that file bundled on its own (an IIFE script, minified
// like the shipped files) as a string, to start as a Blob-URL Web Worker.
const workerPlugin = {
  name: "worker",
  setup(build) {
    build.onResolve({ filter: /\?worker$/ }, async (a) => {
      const r = await build.resolve(a.path.slice(0, -7), { kind: a.kind, resolveDir: a.resolveDir });
      if (r.errors.length) return { errors: r.errors };
      return { path: r.path, namespace: "worker" };
    });
    build.onLoad({ filter: /.*/, namespace: "worker" }, async (a) => {
      const out = await esbuild.build({ entryPoints: [a.path], bundle: true, write: false, metafile: true, format: "iife", minify: true, target: "es2020", legalComments: "none", charset: "utf8", logLevel: "warning" });
      return { contents: out.outputFiles[0].text, loader: "text", watchFiles: Object.keys(out.metafile?.inputs ?? {}) };
    });
  },
};

const common = {
  absWorkingDir: here,
  bundle: true,
  format: "esm",
  logLevel: "info",
  plugins: [rawPlugin, workerPlugin],
  loader: { ".css": "text" },
  legalComments: "none",
  charset: "utf8",
};

if (flag("--tests")) {
  const dir = path.join(here, "test");
  // Tests live in test/ (core) and next to their feature (src/features/<name>/*.test.ts); every one is
  // bundled flat into .test-build/, so fixture paths resolve the same from each.
  const featureDir = path.join(here, "src", "features");
  const groups = [
    readdirSync(dir).filter((f) => f.endsWith(".test.ts")).map((f) => path.join(dir, f)),
    readdirSync(featureDir, { recursive: true }).map(String).filter((f) => f.endsWith(".test.ts")).map((f) => path.join(featureDir, f)),
  ];
  for (const entryPoints of groups) {
    await esbuild.build({ ...common, entryPoints, outdir: path.join(here, ".test-build"), outbase: path.dirname(entryPoints[0]), platform: "node", external: ["typescript"], outExtension: { ".js": ".mjs" }, logLevel: "warning", entryNames: "[name]" });
  }
} else {
  const entryPoints = Object.entries(shipped).map(([out, src]) => ({ out, in: path.join(here, src) }));
  const options = { ...common, entryPoints, outdir, minify: true, target: "es2020", platform: "browser" };
  if (flag("--watch")) {
    const ctx = await esbuild.context(options);
    await ctx.watch();
  } else {
    await esbuild.build(options);
  }
}

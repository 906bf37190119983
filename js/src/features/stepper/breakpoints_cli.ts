// The page's "Run to" rules as a command line tool, for tests/unit/test_breakpoints.py: reads
// {"payload": GraphPayload, "recording": Recording, "queries": [rule, target, threshold][]} on stdin
// (non-finite numbers as finite_json sends them), prints {"stops": RunStop[], "ms": number[]}.
// Built on demand by the pytest with esbuild (platform node), like the what-if CLI.
import { readFileSync } from "node:fs";
import type { GraphPayload, Recording } from "../../payload";
import { reviveRecording } from "../../state/finite";
import { runTo, type RunRule, type RunSource } from "./breakpoints";

const input = JSON.parse(readFileSync(0, "utf8")) as { payload: GraphPayload; recording: Recording; queries: [RunRule, string, number][] };
const rec = reviveRecording(input.recording);
const src: RunSource = {
  steps: rec.steps,
  nodes: new Map(input.payload.nodes.map((n) => [n.id, n] as const)),
  calls: input.payload.calls,
  passes: rec.passes,
  forward: rec.forward,
};
const ms: number[] = [];
const stops = input.queries.map(([rule, target, threshold]) => {
  const started = performance.now();
  const stop = runTo(src, rule, target, threshold);
  ms.push(performance.now() - started);
  return stop;
});
process.stdout.write(JSON.stringify({ stops, ms }));

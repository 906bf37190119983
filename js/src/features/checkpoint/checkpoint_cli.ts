// The page's checkpointing rule as a command line tool, for tests/unit/test_checkpointing_agreement.py:
// reads {"payload": GraphPayload, "table": CheckpointTable, "marks": Marks[]} on stdin, prints
// {"answers": CheckpointAnswer[], "ms": number}. Built on demand by the pytest with esbuild (platform node).
import { readFileSync } from "node:fs";
import type { CheckpointTable, GraphPayload } from "../../payload";
import { evaluate, type Marks } from "./state";

const input = JSON.parse(readFileSync(0, "utf8")) as { payload: GraphPayload; table: CheckpointTable; marks: Marks[] };
const started = performance.now();
const answers = input.marks.map((m) => evaluate(input.table, input.payload, m));
const ms = performance.now() - started;
process.stdout.write(JSON.stringify({ answers, ms }));

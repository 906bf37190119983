// The page's what-if rule as a command line tool, for tests/test_what_if_agreement.py:
// reads {"payload": GraphPayload, "toggles": Toggles[]} on stdin, prints {"answers": WhatIfAnswer[]}.
// Built on demand by the pytest with esbuild (platform node), like the unit tests.
import { readFileSync } from "node:fs";
import type { GraphPayload, Toggles } from "../../payload";
import { whatIf } from "./state";

const input = JSON.parse(readFileSync(0, "utf8")) as { payload: GraphPayload; toggles: Toggles[] };
const started = performance.now();
const answers = input.toggles.map((t) => whatIf(input.payload, t));
const ms = performance.now() - started;
process.stdout.write(JSON.stringify({ answers, ms }));

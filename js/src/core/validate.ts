// Every synced trait the page reads, checked against its type in `payload.ts` before any code uses it:
// the clean value (optional fields filled with their defaults, the records copied) or the problems,
// each with a path ("graph_data.edges[3].target"), what was expected and what was found. Pure (no DOM):
// the guard (`guard.ts`) refuses a malformed trait and the error box (`errorbox.ts`) says why.
// References INSIDE the graph payload are checked too (edges to known nodes, calls' parents known and
// free of cycles, unique ids), since a bad one breaks the drawing; references from other traits into
// the graph (`expanded`, `selected`, overlay keys, ...) are not: traits arrive one at a time, so they
// may name the next graph's ids for a moment, and the page ignores ids it does not know.
import type { DoctorFinding, GraphPayload, Traits } from "../payload";

export interface Problem {
  /** Where, from the trait name down: "graph_data.nodes[2].id". */
  path: string;
  expected: string;
  /** What was there, in a few words ("null", "the string \"x\"", "a list of 3 items"). */
  found: string;
}

export type Checked<T> = { ok: true; value: T } | { ok: false; problems: Problem[]; total: number };

/** Problems kept per trait (the rest are counted). */
export const MAX_PROBLEMS = 50;

/** An empty graph (the `graph_data` default `{}` means this). */
export const EMPTY_GRAPH: GraphPayload = {
  version: 1,
  nodes: [],
  edges: [],
  calls: [],
  ghosts: [],
  meta: { torch_version: "", captured: false, notes: [], num_nodes: 0, num_edges: 0 },
};

/** Each trait's value when Python sent none (`undefined` or `null`). */
export const DEFAULTS: { [K in keyof Traits]: () => Traits[K] } = {
  graph_data: () => EMPTY_GRAPH,
  expanded: () => [],
  unfolded: () => [],
  selected: () => "",
  height: () => 600,
  toggles: () => ({ detach: [], freeze: [] }),
  verified: () => ({}),
  can_verify: () => false,
  overlay: () => ({}),
  recording: () => ({}),
  step: () => -1,
  diff: () => ({}),
  findings: () => [],
  checkpoints: () => ({}),
  checkpoint_table: () => ({}),
  checkpoint_verified: () => ({}),
};

const TRAIT_NAMES = Object.keys(DEFAULTS) as (keyof Traits)[];

export function isTrait(name: string): name is keyof Traits {
  return (TRAIT_NAMES as string[]).includes(name);
}

/** `value` in a few words, never its whole text (it may be huge or deeply nested). */
export function describe(value: unknown): string {
  if (value === undefined) return "nothing (the key is missing)";
  if (value === null) return "null";
  if (typeof value === "string") return `the string ${JSON.stringify(value.length > 40 ? value.slice(0, 40) + "…" : value)}`;
  if (typeof value === "number") return `the number ${String(value)}`;
  if (typeof value === "boolean") return String(value);
  if (Array.isArray(value)) return `a list of ${value.length} item${value.length === 1 ? "" : "s"}`;
  if (typeof value === "object") {
    const keys = Object.keys(value);
    if (!keys.length) return "an empty object";
    const shown = keys.slice(0, 4).map((k) => (k.length > 20 ? k.slice(0, 20) + "…" : k));
    return `an object with keys ${shown.join(", ")}${keys.length > 4 ? ", …" : ""}`;
  }
  return `a ${typeof value}`;
}

class Checker {
  problems: Problem[] = [];
  total = 0;
  add(path: string, expected: string, value: unknown): typeof BAD {
    return this.addText(path, expected, describe(value));
  }
  /** A problem whose finding is already words ("a cycle a → b → a"). */
  addText(path: string, expected: string, found: string): typeof BAD {
    this.total++;
    if (this.problems.length < MAX_PROBLEMS) this.problems.push({ path, expected, found });
    return BAD;
  }
}

const BAD: unique symbol = Symbol("bad");
type Bad = typeof BAD;
type Check<T> = (c: Checker, path: string, v: unknown) => T | Bad;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const NAMED_NUMBERS = ["NaN", "Infinity", "-Infinity"];

const str: Check<string> = (c, p, v) => (typeof v === "string" ? v : c.add(p, "a string", v));
const bool: Check<boolean> = (c, p, v) => (typeof v === "boolean" ? v : c.add(p, "true or false", v));

function int(min: number, max = Number.MAX_SAFE_INTEGER, what = `an integer ≥ ${min}`): Check<number> {
  return (c, p, v) => (typeof v === "number" && Number.isInteger(v) && v >= min && v <= max ? v : c.add(p, what, v));
}
const count = int(0);

/** A number, NaN and ±Infinity included (a NaN gradient is what the stepper shows), or "NaN" /
 * "Infinity" / "-Infinity" (how JSON carries them before `state/finite.ts` revives them). */
const numeric: Check<number> = (c, p, v) =>
  typeof v === "number" || (typeof v === "string" && NAMED_NUMBERS.includes(v))
    ? (v as number)
    : c.add(p, 'a number (or "NaN", "Infinity", "-Infinity")', v);

function oneOf<T extends string>(...options: T[]): Check<T> {
  const what = `one of ${options.map((o) => JSON.stringify(o)).join(", ")}`;
  return (c, p, v) => (options.includes(v as T) ? (v as T) : c.add(p, what, v));
}

function nullable<T>(check: Check<T>): Check<T | null> {
  return (c, p, v) => (v === null ? null : check(c, p, v));
}

function listOf<T>(item: Check<T>, what = "a list"): Check<T[]> {
  return (c, p, v) => {
    if (!Array.isArray(v)) return c.add(p, what, v);
    let ok = true;
    const out: T[] = new Array<T>(v.length);
    for (let i = 0; i < v.length; i++) {
      const r = item(c, `${p}[${i}]`, v[i]);
      if (r === BAD) ok = false;
      else out[i] = r;
    }
    return ok ? out : BAD;
  };
}
const strings = listOf(str, "a list of strings");
const shape = nullable(listOf(count, "a list of sizes (integers ≥ 0) or null"));

function recordOf<T>(item: Check<T>, what = "an object"): Check<Record<string, T>> {
  return (c, p, v) => {
    if (!isObject(v)) return c.add(p, what, v);
    let ok = true;
    const out: Record<string, T> = {};
    for (const [k, x] of Object.entries(v)) {
      const r = item(c, `${p}[${JSON.stringify(k)}]`, x);
      if (r === BAD) ok = false;
      else out[k] = r;
    }
    return ok ? out : BAD;
  };
}

/** A fixed-length list (a tuple). */
function tuple<T extends unknown[]>(what: string, ...items: { [I in keyof T]: Check<T[I]> }): Check<T> {
  return (c, p, v) => {
    if (!Array.isArray(v) || v.length !== items.length) return c.add(p, what, v);
    let ok = true;
    const out = items.map((item, i) => {
      const r = item(c, `${p}[${i}]`, v[i]);
      if (r === BAD) ok = false;
      return r;
    });
    return ok ? (out as T) : BAD;
  };
}

interface Field {
  check: Check<unknown>;
  /** Absent: the field is required. */
  fallback?: () => unknown;
}
const req = (check: Check<unknown>): Field => ({ check });
const opt = (check: Check<unknown>, fallback: () => unknown): Field => ({ check, fallback });
/** Optional, and left absent when absent. */
const maybe = (check: Check<unknown>): Field => ({ check, fallback: () => undefined });

/** An object with these fields (a copy, defaults filled; other keys are kept as they are). */
function record<T>(fields: Record<string, Field>, what = "an object"): Check<T> {
  return (c, p, v) => {
    if (!isObject(v)) return c.add(p, what, v);
    const out: Record<string, unknown> = { ...v };
    let ok = true;
    for (const [k, f] of Object.entries(fields)) {
      const x = v[k];
      if (x === undefined) {
        if (!f.fallback) {
          c.add(`${p}.${k}`, "a value (the field is required)", x);
          ok = false;
        } else {
          const d = f.fallback();
          if (d !== undefined) out[k] = d;
        }
        continue;
      }
      const r = f.check(c, `${p}.${k}`, x);
      if (r === BAD) ok = false;
      else out[k] = r;
    }
    return ok ? (out as T) : BAD;
  };
}

const summary = nullable(
  record({
    numel: opt(count, () => 0),
    head: opt(listOf(numeric, "a list of numbers"), () => []),
    norm: opt(nullable(numeric), () => null),
    mean: opt(nullable(numeric), () => null),
    std: opt(nullable(numeric), () => null),
    min: opt(nullable(numeric), () => null),
    max: opt(nullable(numeric), () => null),
    nonfinite: opt(nullable(count), () => null),
    skipped: opt(str, () => ""),
  }),
);

const node = record({
  id: req(str),
  kind: req(oneOf("op", "leaf", "root")),
  op: opt(str, () => ""),
  label: opt(str, () => ""),
  module: opt(str, () => ""),
  call: opt(str, () => ""),
  names: opt(strings, () => []),
  shape: opt(shape, () => null),
  dtype: opt(str, () => ""),
  requires_grad: opt(bool, () => true),
  saved: opt(listOf(record({ name: opt(str, () => ""), shape: opt(shape, () => null), dtype: opt(str, () => "") })), () => []),
  value: opt(nullable(listOf(numeric, "a list of numbers or null")), () => null),
  stats: maybe(summary),
  grad: maybe(summary),
});

const edge = record({
  source: req(str),
  target: req(str),
  output_nr: opt(count, () => 0),
  input_nr: opt(count, () => 0),
  shape: opt(shape, () => null),
});

const call = record({
  id: req(str),
  path: opt(str, () => ""),
  type: opt(str, () => ""),
  parent: opt(str, () => ""),
  index: opt(count, () => 1),
  size: opt(count, () => 0),
});

const ghost = record({
  id: req(str),
  kind: req(oneOf("detached", "frozen")),
  label: opt(str, () => ""),
  names: opt(strings, () => []),
  shape: opt(shape, () => null),
  source: opt(nullable(str), () => null),
  output_nr: opt(count, () => 0),
  targets: opt(strings, () => []),
  call: opt(str, () => ""),
  where: opt(str, () => ""),
  line: opt(str, () => ""),
  cut: opt(strings, () => []),
});

const meta = record({
  torch_version: opt(str, () => ""),
  captured: opt(bool, () => false),
  notes: opt(strings, () => []),
  num_nodes: opt(count, () => 0),
  num_edges: opt(count, () => 0),
  prefix: opt(str, () => ""),
});

const wiring = record({
  ids: req(strings),
  kinds: req(str),
  calls: req(listOf(int(-1), "a list of integers ≥ -1")),
  ops: req(strings),
  op: req(listOf(count, "a list of integers ≥ 0")),
  labels: req(strings),
  names: opt(recordOf(strings), () => ({})),
  edges: req(listOf(count, "a list of integers ≥ 0")),
});

const graphShape = record<GraphPayload>(
  {
    version: opt((c, p, v) => (v === 1 ? v : c.add(p, "1 (the payload version this page reads)", v)), () => 1),
    nodes: req(listOf(node)),
    edges: req(listOf(edge)),
    calls: opt(listOf(call), () => []),
    ghosts: opt(listOf(ghost), () => []),
    meta: opt(meta, () => ({ ...EMPTY_GRAPH.meta, notes: [] })),
    wiring: maybe(wiring),
    loaded: maybe(strings),
    edge_shapes: maybe(listOf(tuple<[number, number[] | null]>("a pair [edge slot, shape]", count, shape))),
    folds: maybe(listOf(record({ id: req(str), calls: req(strings), parent: opt(str, () => ""), type: opt(str, () => "") }))),
  },
  "a graph payload object (nodes, edges, calls, meta), or {} for none",
);

/** Ids and references inside one well-typed payload: unique ids, edges between known nodes, calls'
 *  parents known and free of cycles, the lazy wiring's indices in range. */
function checkReferences(c: Checker, g: GraphPayload): void {
  const p = "graph_data";
  const firstAt = <T extends { id: string }>(items: T[], where: string, what: string): Map<string, number> => {
    const at = new Map<string, number>();
    items.forEach((x, i) => {
      const seen = at.get(x.id);
      if (seen === undefined) at.set(x.id, i);
      else c.add(`${p}.${where}[${i}].id`, `an id no other ${what} has (${where}[${seen}] has it)`, x.id);
    });
    return at;
  };
  const calls = firstAt(g.calls, "calls", "call");
  const knownCall = (id: string): boolean => id === "" || calls.has(id);
  g.calls.forEach((k, i) => {
    if (!knownCall(k.parent)) c.add(`${p}.calls[${i}].parent`, '"" (top level) or the id of a call in graph_data.calls', k.parent);
  });
  // Parent cycles: follow each chain; a chain that comes back to a call on it is a cycle (reported once).
  const done = new Set<string>();
  for (const k of g.calls) {
    const path: string[] = [];
    const on = new Set<string>();
    let id = k.id;
    while (id && calls.has(id) && !done.has(id) && !on.has(id)) {
      on.add(id);
      path.push(id);
      id = g.calls[calls.get(id) as number].parent;
    }
    if (id && on.has(id)) {
      const loop = path.slice(path.indexOf(id));
      c.addText(`${p}.calls[${calls.get(id)}].parent`, "a chain of parents that ends at the top level", `a cycle ${[...loop, id].map((x) => JSON.stringify(x)).join(" → ")}`);
    }
    for (const x of path) done.add(x);
  }
  const w = g.wiring;
  let nodeIds: Set<string>;
  if (w) {
    const n = w.ids.length;
    nodeIds = new Set(w.ids);
    if (nodeIds.size !== n) c.addText(`${p}.wiring.ids`, "unique node ids", `${n - nodeIds.size} repeated`);
    if (w.kinds.length !== n || /[^olr]/.test(w.kinds)) c.add(`${p}.wiring.kinds`, `${n} characters, each "o", "l" or "r"`, w.kinds);
    const sameLength = (name: "calls" | "op" | "labels", a: unknown[]): void => {
      if (a.length !== n) c.add(`${p}.wiring.${name}`, `one entry per node (${n})`, a);
    };
    sameLength("calls", w.calls);
    sameLength("op", w.op);
    sameLength("labels", w.labels);
    const badCall = w.calls.findIndex((x) => x >= g.calls.length);
    if (badCall >= 0) c.add(`${p}.wiring.calls[${badCall}]`, `-1 or an index into graph_data.calls (< ${g.calls.length})`, w.calls[badCall]);
    const badOp = w.op.findIndex((x) => x >= w.ops.length);
    if (badOp >= 0) c.add(`${p}.wiring.op[${badOp}]`, `an index into wiring.ops (< ${w.ops.length})`, w.op[badOp]);
    if (w.edges.length % 4) c.add(`${p}.wiring.edges`, "4 numbers per edge slot", w.edges);
    for (let k = 0; k + 3 < w.edges.length; k += 4) {
      for (const j of [k, k + 1]) if (w.edges[j] >= n) c.add(`${p}.wiring.edges[${j}]`, `a node index (< ${n})`, w.edges[j]);
    }
    g.nodes.forEach((x, i) => {
      if (!nodeIds.has(x.id)) c.add(`${p}.nodes[${i}].id`, "the id of a node in graph_data.wiring.ids", x.id);
    });
    firstAt(g.nodes, "nodes", "node");
  } else {
    nodeIds = new Set(firstAt(g.nodes, "nodes", "node").keys());
  }
  g.nodes.forEach((x, i) => {
    if (!knownCall(x.call)) c.add(`${p}.nodes[${i}].call`, '"" (top level) or the id of a call in graph_data.calls', x.call);
  });
  g.edges.forEach((e, i) => {
    for (const end of ["source", "target"] as const) {
      if (!nodeIds.has(e[end])) c.add(`${p}.edges[${i}].${end}`, "the id of a node in graph_data.nodes", e[end]);
    }
  });
  firstAt(g.ghosts, "ghosts", "ghost");
  g.ghosts.forEach((x, i) => {
    if (x.source !== null && !nodeIds.has(x.source)) c.add(`${p}.ghosts[${i}].source`, "null or the id of a node in graph_data.nodes", x.source);
    x.targets.forEach((t, j) => {
      if (!nodeIds.has(t)) c.add(`${p}.ghosts[${i}].targets[${j}]`, "the id of a node in graph_data.nodes", t);
    });
    if (!knownCall(x.call)) c.add(`${p}.ghosts[${i}].call`, '"" (top level) or the id of a call in graph_data.calls', x.call);
  });
  (g.folds ?? []).forEach((f, i) => {
    f.calls.forEach((k, j) => {
      if (!calls.has(k)) c.add(`${p}.folds[${i}].calls[${j}]`, "the id of a call in graph_data.calls", k);
    });
  });
}

function graphData(c: Checker, v: unknown): GraphPayload | Bad {
  if (isObject(v) && Object.keys(v).length === 0) return EMPTY_GRAPH; // the trait's default: no graph yet
  const g = graphShape(c, "graph_data", v);
  if (g === BAD) return BAD;
  const before = c.total;
  checkReferences(c, g);
  return c.total > before ? BAD : g;
}

const toggles = record<Traits["toggles"]>({ detach: opt(strings, () => []), freeze: opt(strings, () => []) });

const verified = record<Traits["verified"]>({
  toggles: maybe(toggles),
  predicted_lost: maybe(strings),
  checked_lost: maybe(strings),
  actual_lost: maybe(strings),
  agree: maybe(bool),
  complete: maybe(bool),
  unverifiable: maybe(strings),
  error: maybe(str),
});

const overlay = record<Traits["overlay"]>({
  title: maybe(str),
  values: maybe(recordOf(numeric, "an object: node id or \"call:<id>\" -> number")),
  scale: maybe(oneOf("log", "linear")),
  encoding: maybe(oneOf("color", "size")),
  marks: maybe(recordOf(oneOf("no-grad", "nan", "flag"), "an object: node id -> mark")),
  unit: maybe(str),
  detail: maybe(recordOf(listOf(tuple<[string, string]>("a [label, text] pair", str, str), "a list of [label, text] rows"), "an object: node id or \"call:<id>\" -> rows")),
});

const grad = nullable(
  record({
    shape: opt(listOf(count, "a list of sizes (integers ≥ 0)"), () => []),
    norm: opt(numeric, () => 0),
    mean: opt(numeric, () => 0),
    max_abs: opt(numeric, () => 0),
    nonfinite: opt(bool, () => false),
    value: opt(nullable(listOf(numeric, "a list of numbers or null")), () => null),
  }),
);

const step = record({
  node: req(str),
  op: opt(str, () => ""),
  pass: opt(count, () => 0),
  received: opt(listOf(grad), () => []),
  sent: opt(listOf(grad), () => []),
  deliveries: opt(listOf(tuple<[string, number, number]>("a triple [target node id, output_nr, input_nr]", str, count, count)), () => []),
  leaf_before: opt(grad, () => null),
  leaf_after: opt(grad, () => null),
  explain: opt(strings, () => []),
});

function recording(c: Checker, v: unknown): Traits["recording"] | Bad {
  const r = record<Traits["recording"]>({
    passes: maybe(count),
    steps: maybe(listOf(step)),
    values: maybe(recordOf(listOf(numeric, "a list of numbers"), "an object: node id -> list of numbers")),
  })(c, "recording", v);
  if (r === BAD) return BAD;
  // The page keeps per-pass tables: a pass number is at most the number of steps.
  const most = Math.max(1, r.steps?.length ?? 0);
  if (r.passes !== undefined && r.passes > most) return c.add("recording.passes", `an integer from 0 to ${most} (one pass has at least one step)`, r.passes);
  const bad = (r.steps ?? []).findIndex((s) => s.pass >= most);
  if (bad >= 0) return c.add(`recording.steps[${bad}].pass`, `an integer from 0 to ${most - 1}`, r.steps?.[bad].pass);
  return r;
}

const diff = record<Traits["diff"]>({
  status: maybe(recordOf(oneOf("added", "removed", "changed", "same"), "an object: node id -> status")),
  why: maybe(recordOf(str, "an object: node id -> text")),
  added_leaves: maybe(strings),
  removed_leaves: maybe(strings),
  gained: maybe(strings),
  lost: maybe(strings),
  hidden: maybe(strings),
  memory: maybe(recordOf(tuple<[number, number]>("a pair [bytes before, bytes after]", numeric, numeric), "an object: node id -> [before, after]")),
  memory_total: maybe(tuple<[number, number]>("a pair [bytes before, bytes after]", numeric, numeric)),
  summary: maybe(str),
});

const findings = listOf(
  record<DoctorFinding>({
    kind: opt(str, () => ""),
    target: opt(str, () => ""),
    message: opt(str, () => ""),
    evidence: opt(str, () => ""),
    fix: opt(str, () => ""),
    step: opt(int(-1), () => -1),
    node: opt(str, () => ""),
    scope: opt(str, () => ""),
  }),
  "a list of findings (objects with kind, target, message, evidence, fix, step, node, scope)",
);

// The checkpointing what-if's table and re-run (gradviz_nb/analysis/checkpointing.py, probes/rerun/checkpoint.py).
const numbers = listOf(numeric, "a list of numbers");
const checkpointTable = record<Traits["checkpoint_table"]>({
  rng_bytes: maybe(numeric),
  storages: maybe(numbers),
  ops: maybe(listOf(record({ id: req(str), call: req(str), seq: req(numeric), flops: req(numeric), saved: req(numbers), packs: req(bool), saves_output: req(bool) }), "a list of ops")),
  inputs: maybe(listOf(record({ call: req(str), storages: req(numbers), producers: req(strings) }), "a list of call inputs")),
});
const checkpointVerified = record<Traits["checkpoint_verified"]>({
  agree: maybe(bool),
  error: maybe(str),
  checked: maybe(strings),
  unchecked: maybe(strings),
  predicted_lost: maybe(strings),
  actual_lost: maybe(strings),
});

const CHECKS: { [K in keyof Traits]: (c: Checker, v: unknown) => Traits[K] | Bad } = {
  graph_data: graphData,
  expanded: (c, v) => strings(c, "expanded", v),
  unfolded: (c, v) => strings(c, "unfolded", v),
  selected: (c, v) => str(c, "selected", v),
  height: (c, v) => (typeof v === "number" && Number.isFinite(v) && v > 0 ? v : c.add("height", "a number of pixels > 0", v)),
  toggles: (c, v) => toggles(c, "toggles", v),
  verified: (c, v) => verified(c, "verified", v),
  can_verify: (c, v) => bool(c, "can_verify", v),
  overlay: (c, v) => overlay(c, "overlay", v),
  recording,
  step: (c, v) => int(-1)(c, "step", v),
  diff: (c, v) => diff(c, "diff", v),
  findings: (c, v) => findings(c, "findings", v),
  checkpoints: (c, v) => recordOf(oneOf("non_reentrant", "reentrant"), "an object: call id -> mode")(c, "checkpoints", v),
  checkpoint_table: (c, v) => checkpointTable(c, "checkpoint_table", v),
  checkpoint_verified: (c, v) => checkpointVerified(c, "checkpoint_verified", v),
};

/** Check one trait's value: the clean value (its default for `undefined` / `null`) or the problems. */
export function validateTrait<K extends keyof Traits>(name: K, value: unknown): Checked<Traits[K]> {
  if (value === undefined || value === null) return { ok: true, value: DEFAULTS[name]() };
  const c = new Checker();
  let out: Traits[K] | Bad;
  try {
    out = CHECKS[name](c, value);
  } catch (err) {
    // Nothing above should throw; if it does (a stack overflow on absurd data), it is a problem too.
    c.addText(name, "data the page can read", `${describe(value)} (${err instanceof Error ? err.message : String(err)})`);
    out = BAD;
  }
  if (out === BAD || c.total) return { ok: false, problems: c.problems, total: Math.max(c.total, 1) };
  return { ok: true, value: out };
}

/** One problem as a line of text. */
export function problemText(p: Problem): string {
  return `${p.path}: expected ${p.expected}, found ${p.found}`;
}

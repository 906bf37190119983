// The stepper's "Run to" rules: pure functions over the page Recording that mirror Python's
// gradviz_nb/probes/backward/breakpoints.py rule for rule and text for text (tests/unit/test_breakpoints.py feeds
// the same recording to both and compares the stops). No DOM.
import type { GraphNode, ModuleCall, RecordedGrad, RecordedStep } from "../../payload";

export const RUN_RULES = ["nonfinite", "zero", "above", "jump", "module", "leaf"] as const;
export type RunRule = (typeof RUN_RULES)[number];

/** Where a rule stopped: `index` (-1 when it never fired), the node to frame, the rule's text with
 *  its numbers, the last step of a module box or leaf, the healed steps of "nonfinite", and every
 *  step that delivered into a leaf ("leaf": one per use of a tied or reused parameter). */
export interface RunStop {
  rule: RunRule;
  index: number;
  node: string;
  text: string;
  last: number;
  healed: number[];
  each: number[];
}

/** What the rules read: the steps, the graph's nodes and module calls, the number of passes. */
export interface RunSource {
  steps: RecordedStep[];
  nodes: Map<string, GraphNode>;
  calls: ModuleCall[];
  passes: number;
  /** The loss was already NaN/Inf: where the forward pass made it (`Recording.forward`). */
  forward?: string;
}

/** Python's `format(x, ".4g")`. */
export function g4(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  // An exact tie (1234.5): JavaScript rounds away from zero, Python to even; truncate to the even digit.
  const [digits, exp100] = Math.abs(x).toPrecision(100).replace(".", "").split("e");
  const d = digits.replace(/^0+/, "");
  if (d[4] === "5" && /^0*$/.test(d.slice(5)) && Number(d[3]) % 2 === 0) {
    const lead = Math.floor(Math.log10(Math.abs(x)));
    const e10 = exp100 !== undefined ? Number(exp100) : lead;
    return g4(Math.sign(x) * Number(`${d[0]}.${d.slice(1, 4)}e${Number.isFinite(e10) ? e10 : lead}`));
  }
  const [mant, expText] = x.toExponential(3).split("e");
  const e = Number(expText);
  const strip = (s: string): string => (s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s);
  if (e < -4 || e >= 4) return `${strip(mant)}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  return strip(x.toFixed(3 - e));
}

const bad = (gs: (RecordedGrad | null)[]): number[] => gs.flatMap((g, k) => (g && g.nonfinite ? [k] : []));

/** The norm of all of a step's gradients together (sqrt of the sum of squares), in Python's order. */
function norm(gs: (RecordedGrad | null)[]): number {
  let sq = 0;
  for (const g of gs) if (g) sq += g.norm ** 2;
  return Math.sqrt(sq);
}

function where(src: RunSource, i: number, names: Map<string, string> = new Map()): string {
  const s = src.steps[i];
  const d = src.nodes.get(s.node);
  const name = names.get(s.node) || (d?.kind === "leaf" ? (d.names?.[0] ?? "") : "");
  const inside = d?.call ? ` in ${d.call}` : "";
  const passed = src.passes > 1 ? `, pass ${(s.pass ?? 0) + 1}` : "";
  // Numbered from 1 within its pass, as the stepper's header counts ("step 2 of 19"); Python's _Where does the same.
  let start = i;
  while (start > 0 && (src.steps[start - 1].pass ?? 0) === (s.pass ?? 0)) start--;
  return `step ${i - start + 1} (${name || s.op}${inside}${passed})`;
}

const stop = (rule: RunRule, index: number, src: RunSource, text: string, last = -1, healed: number[] = [], each: number[] = []): RunStop => ({
  rule,
  index,
  node: index >= 0 ? src.steps[index].node : "",
  text,
  last,
  healed,
  each,
});

export function firstNonfiniteStop(src: RunSource): RunStop {
  let first = -1;
  const healed: number[] = [];
  src.steps.forEach((s, i) => {
    const got = bad(s.received ?? []);
    const sent = bad(s.sent ?? []);
    if (first < 0 && (got.length || sent.length)) first = i;
    if (got.length && !sent.length && (s.sent ?? []).some((g) => g !== null)) healed.push(i);
  });
  if (first < 0) return stop("nonfinite", -1, src, `never hit: all ${src.steps.length} recorded steps received and sent only finite gradients`);
  const f = src.steps[first];
  let text: string;
  if (src.forward) {
    text = `made in the forward pass: ${src.forward}; backward first carried it at ${where(src, first)}`;
  } else if (!bad(f.received ?? []).length) {
    text = `born at ${where(src, first)}: it received finite gradients (norm ${g4(norm(f.received ?? []))}) and sent NaN/Inf to input ${bad(f.sent ?? []).join(", ")}`;
  } else {
    text = `${where(src, first)} already received a NaN/Inf gradient: the loss's gradient is not finite, so the NaN/Inf was made in the forward pass (gv.find_nonfinite names the op that made it)`;
  }
  if (healed.length) {
    text += `; healed ${healed.length} time${healed.length !== 1 ? "s" : ""} later (received NaN/Inf, sent finite values), first at ${where(src, healed[0])}`;
  }
  return stop("nonfinite", first, src, text, -1, healed);
}

export function firstZeroStop(src: RunSource): RunStop {
  for (let i = 0; i < src.steps.length; i++) {
    const s = src.steps[i];
    const received = norm(s.received ?? []);
    if (!(received > 0) || !Number.isFinite(received)) continue;
    const zeros = (s.sent ?? []).flatMap((g, k) => (g && g.norm === 0 && g.max_abs === 0 ? [k] : []));
    if (zeros.length) {
      return stop("zero", i, src, `${where(src, i)} received a gradient of norm ${g4(received)} and sent exactly zero to input ${zeros.join(", ")}: its local derivative is zero there`);
    }
  }
  return stop("zero", -1, src, `never hit: no step of ${src.steps.length} turned a non-zero gradient into an exactly-zero one`);
}

export function firstAboveStop(src: RunSource, threshold: number): RunStop {
  for (let i = 0; i < src.steps.length; i++) {
    const s = src.steps[i];
    for (const [label, gs] of [["received", s.received ?? []], ["sent", s.sent ?? []]] as const) {
      const k = gs.findIndex((g) => !!g && g.norm > threshold);
      if (k >= 0) {
        const side = label === "received" ? "for output" : "to input";
        return stop("above", i, src, `${where(src, i)} ${label} a gradient of norm ${g4(gs[k]!.norm)} ${side} ${k}, above ${g4(threshold)}`);
      }
    }
  }
  return stop("above", -1, src, `never hit: every gradient of ${src.steps.length} steps has norm <= ${g4(threshold)}`);
}

export function largestJumpStop(src: RunSource): RunStop {
  let best: [number, number, number, number] | null = null;
  for (let i = 0; i < src.steps.length; i++) {
    const s = src.steps[i];
    const received = norm(s.received ?? []);
    const sent = norm(s.sent ?? []);
    if (!(received > 0 && sent > 0 && Number.isFinite(received) && Number.isFinite(sent))) continue;
    const size = Math.abs(Math.log10(sent / received));
    if (best === null || size > best[0]) best = [size, i, received, sent];
  }
  if (best === null) return stop("jump", -1, src, "never hit: no step both received and sent a finite, non-zero gradient");
  const [, i, received, sent] = best;
  return stop("jump", i, src, `largest change of norm at ${where(src, i)}: received ${g4(received)}, sent ${g4(sent)} (x${g4(sent / received)})`);
}

/** A module box's first and last backward step (`module`: call id or module path). */
export function moduleSpanStop(src: RunSource, module: string): RunStop {
  const chosen = new Set(src.calls.filter((c) => c.id === module || c.path === module).map((c) => c.id));
  if (!chosen.size) return stop("module", -1, src, `never hit: no module call named ${module} in this graph`);
  const parent = new Map(src.calls.map((c) => [c.id, c.parent || ""] as const));
  const inside = (call: string): boolean => {
    const seen = new Set<string>();
    for (let c = call; c && !seen.has(c); c = parent.get(c) ?? "") {
      if (chosen.has(c)) return true;
      seen.add(c);
    }
    return false;
  };
  const hits: number[] = [];
  src.steps.forEach((s, i) => {
    if (inside(src.nodes.get(s.node)?.call ?? "")) hits.push(i);
  });
  if (!hits.length) return stop("module", -1, src, `never hit: backward ran no step inside ${module}`);
  const [first, last] = [hits[0], hits[hits.length - 1]];
  return stop("module", first, src, `${module}: ${hits.length} backward steps, first ${where(src, first)}, last ${where(src, last)}`, last);
}

/** Every delivery into a leaf (`leaf`: its node id): the steps that sent into its buffer, first to last
 *  (one per use of a tied or reused parameter); `name` is how the text names it. */
export function leafSpanStop(src: RunSource, leaf: string, name = leaf): RunStop {
  if (src.nodes.get(leaf)?.kind !== "leaf") return stop("leaf", -1, src, `never hit: ${name} is not a leaf; select a parameter or input first`);
  let hits: number[] = [];
  src.steps.forEach((s, i) => {
    if ((s.deliveries ?? []).some((d) => d[0] === leaf)) hits.push(i);
  });
  if (!hits.length) {
    hits = [];
    src.steps.forEach((s, i) => {
      if (s.node === leaf) hits.push(i);
    });
  }
  if (!hits.length) return stop("leaf", -1, src, `never hit: no gradient was delivered to ${name} in the recorded passes`);
  const names = new Map([[leaf, name]]);
  const got = (i: number): string => {
    const s = src.steps[i];
    if (s.node === leaf) {
      const g = s.received?.[0];
      return g ? `norm ${g4(g.norm)}` : "no gradient";
    }
    const sent = (s.deliveries ?? []).filter((d) => d[0] === leaf && d[2] < (s.sent ?? []).length).map((d) => (s.sent ?? [])[d[2]]);
    return sent.some((g) => g) ? `norm ${g4(norm(sent))}` : "no gradient";
  };
  const [first, last] = [hits[0], hits[hits.length - 1]];
  let text = `${name}: first delivery at ${where(src, first, names)} (${got(first)})`;
  if (last !== first) text += `, last at ${where(src, last, names)} (${got(last)}), ${hits.length} in all`;
  return stop("leaf", first, src, text, last, [], hits);
}

/** Run one rule. `target`: the selected call id ("module") or leaf id ("leaf"); `threshold` for "above". */
export function runTo(src: RunSource, rule: RunRule, target = "", threshold = 0): RunStop {
  switch (rule) {
    case "nonfinite":
      return firstNonfiniteStop(src);
    case "zero":
      return firstZeroStop(src);
    case "above":
      return firstAboveStop(src, threshold);
    case "jump":
      return largestJumpStop(src);
    case "module":
      return moduleSpanStop(src, target);
    case "leaf":
      return leafSpanStop(src, target, src.nodes.get(target)?.names?.[0] || target);
  }
}

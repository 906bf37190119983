// Display text for nodes, boxes and the details panel. Plain strings only: the view puts them
// into the page with textContent / canvas text, never as HTML.
import type { GhostTensor, GraphNode, ModuleCall, TensorSummary } from "../payload";
import { num } from "./finite";
import { fmt, fmtHead, SHOWN_VALUES, thousands } from "./numbers";

export { SHOWN_VALUES, thousands };

/** "[3, 4]"; a 0-dimensional tensor is "scalar"; unknown is "". */
export function formatShape(shape: number[] | null | undefined): string {
  if (!shape) return "";
  return shape.length === 0 ? "scalar" : "[" + shape.join(", ") + "]";
}

/** A node's title: leaves by their (first) name, ops by label or grad_fn name. */
export function nodeTitle(n: GraphNode): string {
  if (n.kind === "leaf" && n.names.length > 0) {
    return n.names.length > 1 ? `${n.names[0]} (+${n.names.length - 1} tied)` : n.names[0];
  }
  return n.label || n.op || n.id;
}

/** `name` without the module prefix every name shares (`GraphMeta.prefix`, "" for none); a name that
 *  is the prefix itself, or lies outside it, stays whole. The details panel and tooltips keep full names. */
export function shortName(name: string, prefix = ""): string {
  return prefix && name.startsWith(prefix) && name.length > prefix.length ? name.slice(prefix.length) : name;
}

/** Two lines: title (a leaf's name without `prefix`), then shape (omitted when unknown). */
export function nodeLabel(n: GraphNode, prefix = ""): string {
  const shape = formatShape(n.shape);
  const title = n.kind === "leaf" ? shortName(nodeTitle(n), prefix) : nodeTitle(n);
  return shape ? title + "\n" + shape : title;
}

/** "1 node", "2 nodes", "16 closed boxes" (the last word gets "es" after s, x, z, ch, sh). */
export function plural(n: number, word: string): string {
  if (n === 1) return `${n} ${word}`;
  return `${n} ${word}${/(s|x|z|ch|sh)$/.test(word) ? "es" : "s"}`;
}

/** A ghost stub (a detached / frozen tensor, forward only), one short line beside what it feeds:
 *  "from ❄ h.0.ln_1.weight" or "from detach() in attn.c_attn"; the whole story is in `ghostText`. */
export function ghostLabel(g: GhostTensor, prefix = ""): string {
  if (g.kind === "frozen") return "from ❄ " + shortName(g.names[0] || g.label || "frozen", prefix);
  const what = g.label || "detach()";
  return g.where ? `from ${what} in ${shortName(g.where, prefix)}` : `from ${what}`;
}

/** A ghost stub's tooltip: the full source, its shape, where it left the graph, and what that means. */
export function ghostText(g: GhostTensor): string {
  const shape = formatShape(g.shape);
  const source =
    g.kind === "frozen"
      ? `frozen parameter ${g.names.join(", ") || g.label || "(unnamed)"}`
      : `${g.label || "detach()"} in ${g.where || "(top level)"}`;
  const at = g.line ? ` at ${g.line}` : "";
  return `${source}${shape ? " " + shape : ""}${at}: used here in the forward pass, no gradient flows back through it`;
}

/** Collapsed box: "blocks.0 (call 2)" (without `prefix`) then "Block · 42 nodes". */
export function collapsedLabel(call: ModuleCall, size: number, prefix = ""): string {
  return `▸ ${shortName(call.id || call.path, prefix)}\n${call.type} · ${plural(size, "node")}`;
}

/** Folded stack of repeated calls: "▸ 48 × Block", "blocks.0 … blocks.47", "1,234 nodes". */
export function foldedLabel(calls: readonly ModuleCall[], size: number, prefix = ""): string {
  const first = calls[0];
  const last = calls[calls.length - 1];
  const name = (c: ModuleCall): string => shortName(c.id || c.path, prefix);
  return `▸ ${calls.length} × ${first?.type ?? ""}\n${first ? name(first) : ""} … ${last ? name(last) : ""}\n${thousands(size)} ${size === 1 ? "node" : "nodes"}`;
}

/** Tooltip of a folded stack: what it holds and what a click does. */
export function foldedText(calls: readonly ModuleCall[], size: number): string {
  const first = calls[0];
  const last = calls[calls.length - 1];
  return `${calls.length} calls of ${first?.type ?? "?"} (${first?.id} … ${last?.id}), ${thousands(size)} nodes in all · click to unfold`;
}


/** Expanded box header, drawn above the box (its name without `prefix`). */
export function expandedLabel(call: ModuleCall, prefix = ""): string {
  return `▾ ${shortName(call.id || call.path, prefix)} · ${call.type}`;
}

/** Tooltip line of a drawn item whose label was shortened: its full name (empty when nothing was left out). */
export function fullNameText(name: string, prefix = ""): string {
  return shortName(name, prefix) === name ? "" : name;
}

/** Rows for the details panel, as [term, value] pairs. */
export function nodeDetails(n: GraphNode): [string, string][] {
  const rows: [string, string][] = [
    ["kind", n.kind],
    ["op", n.op || "—"],
    ["label", n.label || "—"],
    ["module", n.module || "(top level)"],
    ["call", n.call || "(top level)"],
    ["output", [formatShape(n.shape) || "shape unknown", n.dtype].filter(Boolean).join(" ")],
    ["requires_grad", String(n.requires_grad)],
  ];
  rows.push(...tensorRows(n));
  if (n.kind === "leaf") rows.push(["names", n.names.length ? n.names.join(", ") : "(unnamed)"]);
  rows.push(["saved tensors", String(n.saved.length)]);
  for (const s of n.saved) {
    rows.push(["  " + s.name, [formatShape(s.shape) || "shape unknown", s.dtype].filter(Boolean).join(" ")]);
  }
  rows.push(["id", n.id]);
  return rows;
}


/** The summary of a whole small tensor (its every value is known): statistics as torch computes them
 *  (std unbiased), over the finite values. */
export function summarizeValues(values: readonly (number | string)[]): TensorSummary {
  const xs = values.map(num);
  const finite = xs.filter((x) => Number.isFinite(x));
  const n = finite.length;
  const mean = n ? finite.reduce((a, b) => a + b, 0) / n : null;
  const std = mean === null ? null : n > 1 ? Math.sqrt(finite.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1)) : 0;
  return {
    numel: xs.length,
    head: [...values],
    norm: n ? Math.sqrt(finite.reduce((a, b) => a + b * b, 0)) : null,
    mean,
    std,
    min: n ? Math.min(...finite) : null,
    max: n ? Math.max(...finite) : null,
    nonfinite: xs.length - n,
    skipped: "",
  };
}

/** "[0.1, -2, 3]", or "[0.1, -2, 3, … ] 4,096 values" when only the first ones are shown. */
export function formatHead(s: TensorSummary): string {
  return fmtHead(s.head.map(num), s.numel);
}

/** Rows for one tensor summary: its values, then norm, mean ± std, min … max (or why they are missing). */
export function summaryRows(term: string, s: TensorSummary): [string, string][] {
  const rows: [string, string][] = [[term, formatHead(s)]];
  if (s.numel <= 1) return rows;
  if (s.norm === null) {
    rows.push(["  stats", s.skipped || (s.nonfinite ? "no finite values" : "not computed")]);
    return rows;
  }
  const finiteOnly = s.nonfinite ? " (finite values)" : "";
  rows.push(["  norm", fmt(s.norm) + finiteOnly]);
  if (s.mean !== null && s.std !== null) rows.push(["  mean ± std", `${fmt(s.mean)} ± ${fmt(s.std)}`]);
  if (s.min !== null && s.max !== null) rows.push(["  min … max", `${fmt(s.min)} … ${fmt(s.max)}`]);
  if (s.nonfinite) rows.push(["  NaN / Inf", `${thousands(s.nonfinite)} of ${thousands(s.numel)}`]);
  return rows;
}

/** The node's forward value and, for leaves, its .grad, wherever the trace knew them. */
function tensorRows(n: GraphNode): [string, string][] {
  const rows: [string, string][] = [];
  if (Array.isArray(n.value) && n.value.length) rows.push(...summaryRows("value", summarizeValues(n.value)));
  else if (n.stats) rows.push(...summaryRows("value", n.stats));
  if (n.grad) rows.push(...summaryRows(".grad (traced)", n.grad));
  else if (n.grad === null) rows.push([".grad (traced)", "None"]);
  return rows;
}

export function callDetails(c: ModuleCall, size: number): [string, string][] {
  return [
    ["module", c.path || "(root module)"],
    ["type", c.type],
    ["call id", c.id],
    ["call number", String(c.index)],
    ["inside call", c.parent || "(top level)"],
    ["nodes inside", String(size)],
  ];
}

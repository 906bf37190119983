// Number formatting and the colour scale shared by the stepper and the overlay. Pure.

/** Bins of the sequential palette (view/style.ts draws class `heat-<bin>` for each). */
export const BINS = 9;

/** Short, readable number: "2", "0.5", "-1.368", "4.77e-7", "1.2e+5", "NaN", "inf". */
export function fmt(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return "0";
  const a = Math.abs(x);
  if (a >= 1e5 || a < 1e-3) return x.toExponential(2).replace(/\.?0+e/, "e");
  return String(Number(x.toPrecision(4)));
}

/** Values shown of a tensor: the first 8, then how many there are (details, stepper, hover: one rule). */
export const SHOWN_VALUES = 8;

/** 3412 -> "3,412" (fixed locale: tests and exported pages read the same text everywhere). */
export function thousands(n: number): string {
  return Math.round(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** The first values of a tensor of `numel` elements (`head` holds at least the first ones): one number for
 *  one element, "[a, b, c]" for a few, "[a, …, h, …] 64 values" past SHOWN_VALUES. */
export function fmtHead(head: readonly number[], numel = head.length): string {
  const shown = head.slice(0, SHOWN_VALUES).map(fmt);
  if (numel === 1 && shown.length === 1) return shown[0];
  return numel > shown.length ? `[${shown.join(", ")}, …] ${thousands(numel)} values` : `[${shown.join(", ")}]`;
}

/** One number for a 1-element tensor, else "[a, b, c]"; a long one is cut as details cut it
 *  ("[a, …, h, …] 64 values"). */
export function fmtVec(v: readonly number[]): string {
  return fmtHead(v);
}

/** A value with its unit: bytes in KiB / MiB / GiB, anything else as "<number> <unit>". */
export function withUnit(x: number, unit: string): string {
  if (unit === "B" && Number.isFinite(x)) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = Math.abs(x);
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return `${x < 0 ? "-" : ""}${i === 0 ? v : Number(v.toPrecision(3))} ${units[i]}`;
  }
  return unit ? `${fmt(x)} ${unit}` : fmt(x);
}

export interface Scale {
  kind: "log" | "linear";
  min: number;
  max: number;
}

/** The scale over some values: log uses the positive finite ones only. Null when nothing to scale. */
export function scaleOf(values: Iterable<number>, kind: "log" | "linear"): Scale | null {
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (!Number.isFinite(v) || (kind === "log" && v <= 0)) continue;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return min <= max ? { kind, min, max } : null;
}

/** Palette bin 0..BINS-1 of a value; -1 for a value off the scale (zero or negative on log, NaN). */
export function binOf(x: number, s: Scale): number {
  if (!Number.isFinite(x) || (s.kind === "log" && x <= 0)) return -1;
  let t: number;
  if (s.kind === "log") {
    const lo = Math.log10(s.min);
    const hi = Math.log10(s.max);
    t = hi > lo ? (Math.log10(x) - lo) / (hi - lo) : 0.5;
  } else {
    t = s.max > s.min ? (x - s.min) / (s.max - s.min) : 0.5;
  }
  return Math.max(0, Math.min(BINS - 1, Math.floor(t * BINS)));
}

/** Fraction 0..1 of a value along the scale (for size encoding). */
export function fractionOf(x: number, s: Scale): number {
  const b = binOf(x, s);
  if (b < 0) return 0;
  if (s.kind === "log") {
    const lo = Math.log10(s.min);
    const hi = Math.log10(s.max);
    return hi > lo ? Math.max(0, Math.min(1, (Math.log10(x) - lo) / (hi - lo))) : 0.5;
  }
  return s.max > s.min ? Math.max(0, Math.min(1, (x - s.min) / (s.max - s.min))) : 0.5;
}

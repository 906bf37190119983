// One box's layered layout: its members as fixed rectangles (leaves, and open boxes laid out before it),
// top to bottom. Iterative and array based (no recursion, so a 5,000-long chain is no harder than a
// short one): cycles broken by a topological order, layers by longest path to a sink (a parameter
// sits just above its consumer), one dummy per layer a long edge crosses, barycenter sweeps for the
// order (model order breaks ties), a coordinate pass that lines chains up (weighted isotonic regression
// per layer), then orthogonal routes: down out of the source's bottom, across in the gap between two
// layers on a track of its own, down the lane its dummies keep free, into the target's top. A back
// edge goes down out of its source too, up a lane beside the layers and into its target from above.
// Nothing but a route's own ends is ever in its way: layers keep their members apart, gaps are empty.
import type { Point } from "../elkgraph";
import { assignTracks, type Piece } from "./tracks";

export interface LevelUnit {
  w: number;
  h: number;
  /** 0: a member; 1: where an edge enters the box (top layer); 2: where one leaves it (bottom layer). */
  term: 0 | 1 | 2;
}

/** An edge between two units; `sOff` / `tOff` fix where it leaves / enters (from the unit's left),
 *  NaN: spread over the unit's bottom / top. */
export interface LevelEdge {
  s: number;
  t: number;
  sOff: number;
  tOff: number;
}

export interface LevelResult {
  /** Top-left corner of each unit. */
  x: Float64Array;
  y: Float64Array;
  width: number;
  height: number;
  /** Each edge's route, source bottom to target top, in the level's coordinates. */
  routes: Point[][];
}

export const GAPS = { layer: 36, node: 22, dummy: 10, track: 8, terminal: 14, sweeps: 6, passes: 8 };

/** Units and edges as layers of slots: slot i < n is unit i, slots after it are dummies. */
interface Slots {
  layer: Int32Array;
  width: Float64Array;
  count: number;
  /** Per edge: its slots top to bottom as walked (source, dummies, target) and the gap each step crosses. */
  chain: Int32Array[];
  channel: Int32Array[];
  layers: number;
}

/** Position of each unit in a topological order (Kahn, model order first; a cycle is cut at its
 *  first unit in model order). Terminals are left out: they are fixed to the top and bottom. */
function topoPosition(units: readonly LevelUnit[], edges: readonly LevelEdge[]): Int32Array {
  const n = units.length;
  const indeg = new Int32Array(n);
  const succ: number[][] = units.map(() => []);
  for (const e of edges) {
    if (units[e.s].term || units[e.t].term || e.s === e.t) continue;
    succ[e.s].push(e.t);
    indeg[e.t]++;
  }
  const pos = new Int32Array(n).fill(-1);
  const queued = new Uint8Array(n);
  const queue: number[] = [];
  const push = (i: number): void => {
    queued[i] = 1;
    queue.push(i);
  };
  for (let i = 0; i < n; i++) if (indeg[i] === 0) push(i);
  let head = 0;
  let next = 0;
  let scan = 0;
  while (next < n) {
    if (head === queue.length) {
      while (queued[scan]) scan++;
      push(scan);
    }
    const u = queue[head++];
    pos[u] = next++;
    for (const v of succ[u]) if (--indeg[v] === 0 && !queued[v]) push(v);
  }
  return pos;
}

/** Layers: longest path to a sink along the order's forward direction; entry terminals above all,
 *  exit terminals below all. Returns the layer of each unit and the number of layers. */
function assignLayers(units: readonly LevelUnit[], edges: readonly LevelEdge[], pos: Int32Array): { layer: Int32Array; layers: number } {
  const n = units.length;
  const down: number[][] = units.map(() => []);
  for (const e of edges) {
    if (units[e.s].term || units[e.t].term || e.s === e.t) continue;
    const [a, b] = pos[e.s] < pos[e.t] ? [e.s, e.t] : [e.t, e.s];
    down[a].push(b);
  }
  const byPos = new Int32Array(n);
  for (let i = 0; i < n; i++) byPos[pos[i]] = i;
  const height = new Int32Array(n);
  let top = 0;
  for (let k = n - 1; k >= 0; k--) {
    const u = byPos[k];
    if (units[u].term) continue;
    let h = 0;
    for (const v of down[u]) h = Math.max(h, height[v] + 1);
    height[u] = h;
    top = Math.max(top, h);
  }
  const entries = units.some((u) => u.term === 1) ? 1 : 0;
  const exits = units.some((u) => u.term === 2) ? 1 : 0;
  const layer = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    layer[i] = units[i].term === 1 ? 0 : units[i].term === 2 ? entries + top + 1 : entries + top - height[i];
  }
  return { layer, layers: entries + top + 1 + exits };
}

/** Dummies along each edge. A forward edge from layer a to b: one per layer between, steps through the
 *  gaps a+1..b. A back edge (target above): down into gap a+1, then up a lane of dummies in layers
 *  a..b (beside source and target), into gap b and down into the target. */
function buildSlots(units: readonly LevelUnit[], edges: readonly LevelEdge[], layer: Int32Array, layers: number): Slots {
  const layerOf: number[] = Array.from(layer);
  const widthOf: number[] = units.map((u) => u.w);
  const chain: Int32Array[] = [];
  const channel: Int32Array[] = [];
  for (const e of edges) {
    const a = layer[e.s];
    const b = layer[e.t];
    const slots = [e.s];
    const gaps: number[] = [];
    const dummy = (l: number): void => {
      slots.push(layerOf.length);
      layerOf.push(l);
      widthOf.push(0);
    };
    if (a < b) {
      for (let l = a + 1; l < b; l++) dummy(l);
      for (let l = a + 1; l <= b; l++) gaps.push(l);
    } else {
      for (let l = a; l >= b; l--) dummy(l);
      gaps.push(a + 1);
      for (let l = a; l >= b; l--) gaps.push(l);
    }
    slots.push(e.t);
    chain.push(Int32Array.from(slots));
    channel.push(Int32Array.from(gaps));
  }
  return { layer: Int32Array.from(layerOf), width: Float64Array.from(widthOf), count: layerOf.length, chain, channel, layers };
}

/** Neighbours of each slot in the layer above and below (steps of a chain between adjacent layers). */
function neighbours(slots: Slots): { up: number[][]; down: number[][] } {
  const up: number[][] = Array.from({ length: slots.count }, () => []);
  const down: number[][] = Array.from({ length: slots.count }, () => []);
  for (const c of slots.chain) {
    for (let i = 0; i + 1 < c.length; i++) {
      const [p, q] = [c[i], c[i + 1]];
      if (slots.layer[q] === slots.layer[p] + 1) {
        down[p].push(q);
        up[q].push(p);
      } else if (slots.layer[q] === slots.layer[p] - 1) {
        down[q].push(p);
        up[p].push(q);
      }
    }
  }
  return { up, down };
}

/** Crossings between two adjacent layers (inversions of the lower ends, counted with a Fenwick tree). */
function crossingsBetween(upper: readonly number[], lowerSize: number, down: readonly number[][], index: Int32Array): number {
  const ends: number[] = [];
  for (const p of upper) {
    const qs = down[p].map((q) => index[q]).sort((x, y) => x - y);
    for (const q of qs) ends.push(q);
  }
  const tree = new Int32Array(lowerSize + 1);
  let crossings = 0;
  for (let i = ends.length - 1; i >= 0; i--) {
    for (let k = ends[i]; k > 0; k -= k & -k) crossings += tree[k];
    for (let k = ends[i] + 1; k <= lowerSize; k += k & -k) tree[k]++;
  }
  return crossings;
}

function countCrossings(order: readonly number[][], down: readonly number[][], index: Int32Array): number {
  let total = 0;
  for (let l = 0; l + 1 < order.length; l++) total += crossingsBetween(order[l], order[l + 1].length, down, index);
  return total;
}

/** Order within each layer: model order first, then barycenter sweeps down and up; the order with the
 *  fewest crossings is kept. */
function orderLayers(slots: Slots, adj: { up: number[][]; down: number[][] }): number[][] {
  const order: number[][] = Array.from({ length: slots.layers }, () => []);
  for (let i = 0; i < slots.count; i++) order[slots.layer[i]].push(i);
  const index = new Int32Array(slots.count);
  const reindex = (): void => order.forEach((layer) => layer.forEach((k, i) => (index[k] = i)));
  // Dummies start beside their chain's source: a first down sweep sorts them from there.
  reindex();
  let best = order.map((l) => l.slice());
  let fewest = countCrossings(order, adj.down, index);
  const bary = new Float64Array(slots.count);
  const sweep = (l: number, from: number[][]): void => {
    const layer = order[l];
    for (const k of layer) {
      const ns = from[k];
      let sum = 0;
      for (const q of ns) sum += index[q];
      bary[k] = ns.length ? sum / ns.length : index[k];
    }
    layer.sort((a, b) => bary[a] - bary[b] || index[a] - index[b]);
    layer.forEach((k, i) => (index[k] = i));
  };
  for (let it = 0; it < GAPS.sweeps && fewest > 0; it++) {
    for (let l = 1; l < slots.layers; l++) sweep(l, adj.up);
    for (let l = slots.layers - 2; l >= 0; l--) sweep(l, adj.down);
    const c = countCrossings(order, adj.down, index);
    if (c < fewest) {
      fewest = c;
      best = order.map((l) => l.slice());
    }
  }
  return best;
}

/** Where each edge leaves its source and enters its target (offset from the unit's left): fixed ones
 *  as given, the others spread over the side in the order of the slots they lead to. */
function portOffsets(units: readonly LevelUnit[], edges: readonly LevelEdge[], slots: Slots, index: Int32Array): { s: Float64Array; t: Float64Array } {
  const s = new Float64Array(edges.length);
  const t = new Float64Array(edges.length);
  const outs: number[][] = units.map(() => []);
  const ins: number[][] = units.map(() => []);
  edges.forEach((e, i) => {
    s[i] = e.sOff;
    t[i] = e.tOff;
    if (Number.isNaN(e.sOff)) outs[e.s].push(i);
    if (Number.isNaN(e.tOff)) ins[e.t].push(i);
  });
  const spread = (u: number, list: number[], out: Float64Array, key: (i: number) => number): void => {
    const w = units[u].w;
    list.sort((a, b) => key(a) - key(b) || a - b);
    const step = list.length > 1 ? Math.min(10, (w * 0.7) / (list.length - 1)) : 0;
    list.forEach((i, k) => (out[i] = w / 2 + (k - (list.length - 1) / 2) * step));
  };
  units.forEach((_, u) => {
    spread(u, outs[u], s, (i) => index[slots.chain[i][1]]);
    spread(u, ins[u], t, (i) => index[slots.chain[i][slots.chain[i].length - 2]]);
  });
  return { s, t };
}

/** Weighted least squares with order constraints (x[i+1] - x[i] >= sep[i]), by pooling adjacent
 *  violators: the closest positions to the wished ones that keep the layer's order and gaps. */
export function placeRow(want: Float64Array, weight: Float64Array, sep: Float64Array, n = want.length, out = new Float64Array(n)): Float64Array {
  const shift = out;
  if (n) shift[0] = 0;
  for (let i = 1; i < n; i++) shift[i] = shift[i - 1] + sep[i - 1];
  const blockW: number[] = [];
  const blockM: number[] = [];
  const blockN: number[] = [];
  for (let i = 0; i < n; i++) {
    let w = weight[i];
    let m = want[i] - shift[i];
    let c = 1;
    while (blockM.length && blockM[blockM.length - 1] > m) {
      const pw = blockW.pop()!;
      const pm = blockM.pop()!;
      c += blockN.pop()!;
      m = (pm * pw + m * w) / (pw + w);
      w += pw;
    }
    blockW.push(w);
    blockM.push(m);
    blockN.push(c);
  }
  // `out` held the shifts: each slot's position is its block's mean plus its own shift.
  let i = 0;
  blockM.forEach((m, b) => {
    for (let k = 0; k < blockN[b]; k++, i++) out[i] += m;
  });
  return out;
}

/** Centre x of every slot: each layer packed, then passes that pull every slot towards the slots it is
 *  chained to (a dummy pulls hardest, so long edges run straight) without changing the order. */
function placeX(slots: Slots, order: number[][], offsets: { s: Float64Array; t: Float64Array }, units: readonly LevelUnit[]): Float64Array {
  const n = units.length;
  const cx = new Float64Array(slots.count);
  // Pulls per slot: [other slot, own offset, other's offset, weight], from above and from below.
  const pulls: [number[], number[]] [] = Array.from({ length: slots.count }, () => [[], []]);
  const offsetIn = (c: Int32Array, j: number, e: number): number =>
    c[j] >= n ? 0 : j === 0 ? offsets.s[e] - units[c[j]].w / 2 : offsets.t[e] - units[c[j]].w / 2;
  slots.chain.forEach((c, e) => {
    for (let j = 0; j + 1 < c.length; j++) {
      const [p, q] = [c[j], c[j + 1]];
      const dl = slots.layer[q] - slots.layer[p];
      if (Math.abs(dl) !== 1) continue;
      // Real neighbours pull harder than one dummy (a chain of ops stays straight beside a skip lane),
      // two dummies hardest (a long edge runs straight down).
      const w = p >= n && q >= n ? 8 : p >= n || q >= n ? 2 : 4;
      const [op, oq] = [offsetIn(c, j, e), offsetIn(c, j + 1, e)];
      // pulls[k][0]: from the layer above, pulls[k][1]: from below.
      pulls[p][dl > 0 ? 1 : 0].push(q, op, oq, w);
      pulls[q][dl > 0 ? 0 : 1].push(p, oq, op, w);
    }
  });
  const isGap = (k: number): boolean => k >= n || units[k].term !== 0;
  const seps = order.map((layer) => {
    const sep = new Float64Array(Math.max(0, layer.length - 1));
    for (let i = 0; i + 1 < layer.length; i++) {
      const [a, b] = [layer[i], layer[i + 1]];
      sep[i] = (slots.width[a] + slots.width[b]) / 2 + (isGap(a) || isGap(b) ? GAPS.dummy : GAPS.node);
    }
    return sep;
  });
  order.forEach((layer, l) => {
    let x = 0;
    layer.forEach((k, i) => {
      cx[k] = x;
      x += seps[l][i] ?? 0;
    });
    for (const k of layer) cx[k] -= x / 2;
  });
  const widest = Math.max(0, ...order.map((l) => l.length));
  const [want, weight, row] = [new Float64Array(widest), new Float64Array(widest), new Float64Array(widest)];
  for (let pass = 0; pass < GAPS.passes; pass++) {
    const sides = pass >= GAPS.passes - 2 ? [0, 1] : [pass % 2];
    const ls = pass % 2 === 0 ? order.map((_, l) => l) : order.map((_, l) => order.length - 1 - l);
    for (const l of ls) {
      const layer = order[l];
      layer.forEach((k, i) => {
        let sum = 0;
        let wsum = 0;
        for (const side of sides) {
          const p = pulls[k][side];
          for (let j = 0; j < p.length; j += 4) {
            sum += (cx[p[j]] + p[j + 2] - p[j + 1]) * p[j + 3];
            wsum += p[j + 3];
          }
        }
        want[i] = wsum ? sum / wsum : cx[k];
        weight[i] = wsum || 1e-3;
      });
      placeRow(want, weight, seps[l], layer.length, row);
      for (let i = 0; i < layer.length; i++) cx[layer[i]] = row[i];
    }
  }
  return cx;
}

/** Vertical placement and the routes, once every x is known. */
function placeY(units: readonly LevelUnit[], slots: Slots, cx: Float64Array, offsets: { s: Float64Array; t: Float64Array }): LevelResult {
  const n = units.length;
  const L = slots.layers;
  // x of every element of every chain (ports on units, the lane on dummies).
  const xs = slots.chain.map((c, e) =>
    Array.from(c, (k, j) => (k >= n ? cx[k] : cx[k] - units[k].w / 2 + (j === 0 ? offsets.s[e] : offsets.t[e]))),
  );
  const pieces: Piece[][] = Array.from({ length: L + 1 }, () => []);
  const who: [number, number][][] = Array.from({ length: L + 1 }, () => []);
  slots.channel.forEach((gaps, e) =>
    gaps.forEach((g, j) => {
      const [a, b] = [xs[e][j], xs[e][j + 1]];
      if (Math.abs(a - b) < 1e-6) return;
      // A slot in a layer above the gap is reached going up from the track.
      const c = slots.chain[e];
      pieces[g].push({ a, aUp: slots.layer[c[j]] < g, b, bUp: slots.layer[c[j + 1]] < g });
      who[g].push([e, j]);
    }),
  );
  const tracks = pieces.map((p) => assignTracks(p));
  const layerH = new Float64Array(L);
  for (let k = 0; k < n; k++) layerH[slots.layer[k]] = Math.max(layerH[slots.layer[k]], units[k].h);
  const terminals = new Uint8Array(L);
  for (let k = 0; k < n; k++) if (units[k].term) terminals[slots.layer[k]] = 1;
  const terminalLayer = (l: number): boolean => l >= 0 && l < L && terminals[l] === 1;
  const gapTop = new Float64Array(L + 1);
  const gapH = new Float64Array(L + 1);
  const layerTop = new Float64Array(L);
  let y = 0;
  for (let g = 0; g <= L; g++) {
    const need = tracks[g].count ? (tracks[g].count + 1) * GAPS.track : 0;
    const floor = g === 0 || g === L ? 0 : terminalLayer(g - 1) || terminalLayer(g) ? GAPS.terminal : GAPS.layer;
    gapTop[g] = y;
    gapH[g] = Math.max(need, floor);
    y += gapH[g];
    if (g < L) {
      layerTop[g] = y;
      y += layerH[g];
    }
  }
  const trackY = slots.chain.map((c) => new Float64Array(c.length).fill(Number.NaN));
  who.forEach((list, g) =>
    list.forEach(([e, j], i) => (trackY[e][j] = gapTop[g] + ((tracks[g].track[i] + 1) * gapH[g]) / (tracks[g].count + 1))),
  );
  const top = (k: number): number => layerTop[slots.layer[k]] + (layerH[slots.layer[k]] - units[k].h) / 2;
  const routes = slots.chain.map((c, e) => {
    const s = c[0];
    const t = c[c.length - 1];
    const pts: Point[] = [{ x: xs[e][0], y: top(s) + units[s].h }];
    for (let j = 0; j + 1 < c.length; j++) {
      const ty = trackY[e][j];
      if (Number.isNaN(ty)) continue;
      pts.push({ x: xs[e][j], y: ty }, { x: xs[e][j + 1], y: ty });
    }
    pts.push({ x: xs[e][c.length - 1], y: top(t) });
    return pts;
  });
  const x = new Float64Array(n);
  const yTop = new Float64Array(n);
  for (let k = 0; k < n; k++) {
    x[k] = cx[k] - units[k].w / 2;
    yTop[k] = top(k);
  }
  return { x, y: yTop, width: 0, height: y, routes };
}

/** Moves everything so the leftmost thing drawn is at x = 0, and measures the width. */
function normalise(result: LevelResult, units: readonly LevelUnit[], cx: Float64Array): LevelResult {
  let min = Infinity;
  let max = -Infinity;
  for (let k = 0; k < cx.length; k++) {
    const w = k < units.length ? units[k].w : 0;
    min = Math.min(min, cx[k] - w / 2);
    max = Math.max(max, cx[k] + w / 2);
  }
  if (!Number.isFinite(min)) return { ...result, width: 0 };
  for (let k = 0; k < units.length; k++) result.x[k] -= min;
  for (const r of result.routes) for (const p of r) p.x -= min;
  result.routes = result.routes.map(simplify);
  return { ...result, width: max - min };
}

/** Drops repeated points and the middle of three on one line. */
export function simplify(route: Point[]): Point[] {
  const out: Point[] = [];
  for (const p of route) {
    const last = out[out.length - 1];
    if (last && Math.abs(last.x - p.x) < 1e-6 && Math.abs(last.y - p.y) < 1e-6) continue;
    const prev = out[out.length - 2];
    if (prev && last) {
      // The middle of three on one line going one way (a turn back keeps its point).
      const vertical = Math.abs(prev.x - last.x) < 1e-6 && Math.abs(last.x - p.x) < 1e-6 && (last.y - prev.y) * (p.y - last.y) > 0;
      const horizontal = Math.abs(prev.y - last.y) < 1e-6 && Math.abs(last.y - p.y) < 1e-6 && (last.x - prev.x) * (p.x - last.x) > 0;
      if (vertical || horizontal) out.pop();
    }
    out.push(p);
  }
  return out;
}

/** The layout of one box's members (see the top of this file). */
export function layoutLevel(units: readonly LevelUnit[], edges: readonly LevelEdge[]): LevelResult {
  const pos = topoPosition(units, edges);
  const { layer, layers } = assignLayers(units, edges, pos);
  const slots = buildSlots(units, edges, layer, layers);
  const adj = neighbours(slots);
  const order = orderLayers(slots, adj);
  const index = new Int32Array(slots.count);
  order.forEach((l) => l.forEach((k, i) => (index[k] = i)));
  const offsets = portOffsets(units, edges, slots, index);
  const cx = placeX(slots, order, offsets, units);
  return normalise(placeY(units, slots, cx, offsets), units, cx);
}

// Tracks in the gap between two layers: each horizontal piece of a route gets a height of its own
// there, so two routes never run along each other, stacked in the order that crosses least.

/** One horizontal piece: from x `a` to x `b`; `aUp` / `bUp`: whether the route at that end goes up
 *  (to the layer above the gap) or down (to the layer below). */
export interface Piece {
  a: number;
  aUp: boolean;
  b: number;
  bUp: boolean;
}

const inside = (x: number, p: Piece): boolean => x > Math.min(p.a, p.b) + 1e-6 && x < Math.max(p.a, p.b) - 1e-6;

/** Crossings when `p` runs above `q`: p's downward ends cut through q, q's upward ends through p. */
export function crossingsAbove(p: Piece, q: Piece): number {
  let c = 0;
  if (!p.aUp && inside(p.a, q)) c++;
  if (!p.bUp && inside(p.b, q)) c++;
  if (q.aUp && inside(q.a, p)) c++;
  if (q.bUp && inside(q.b, p)) c++;
  return c;
}

/** Track of each piece (0 = top) and how many tracks. Pieces are ranked greedily, the one that costs
 *  least when put above all the others first; then each takes the first track below every earlier
 *  piece it overlaps (pieces apart by `clear` or more may share a track). */
export function assignTracks(pieces: readonly Piece[], clear = 6): { track: Int32Array; count: number } {
  const n = pieces.length;
  const lo = pieces.map((p) => Math.min(p.a, p.b));
  const hi = pieces.map((p) => Math.max(p.a, p.b));
  const overlaps = (i: number, j: number): boolean => lo[i] < hi[j] + clear && lo[j] < hi[i] + clear;
  const gain = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) if (i !== j && overlaps(i, j)) gain[i] += crossingsAbove(pieces[j], pieces[i]) - crossingsAbove(pieces[i], pieces[j]);
  }
  const done = new Uint8Array(n);
  const track = new Int32Array(n);
  const placed: number[] = [];
  let count = 0;
  for (let k = 0; k < n; k++) {
    let best = -1;
    for (let i = 0; i < n; i++) if (!done[i] && (best < 0 || gain[i] > gain[best] || (gain[i] === gain[best] && lo[i] < lo[best]))) best = i;
    done[best] = 1;
    // What is left no longer has `best` below it.
    for (let i = 0; i < n; i++) if (!done[i] && overlaps(i, best)) gain[i] -= crossingsAbove(pieces[best], pieces[i]) - crossingsAbove(pieces[i], pieces[best]);
    let t = 0;
    for (const j of placed) if (overlaps(best, j)) t = Math.max(t, track[j] + 1);
    track[best] = t;
    placed.push(best);
    count = Math.max(count, t + 1);
  }
  return { track, count };
}

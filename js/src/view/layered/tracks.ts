// Tracks in the gap between two layers: each horizontal piece of a route gets a height of its own
// there, so two routes never run along each other (interval partitioning, fewest tracks).

/** Track of each interval [lo[i], hi[i]] (0 = top) such that intervals on one track keep `clear` apart;
 *  returns the tracks and how many there are. */
export function assignTracks(lo: readonly number[], hi: readonly number[], clear = 6): { track: Int32Array; count: number } {
  const n = lo.length;
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => lo[a] - lo[b] || hi[a] - hi[b]);
  const track = new Int32Array(n);
  const ends: number[] = [];
  for (const i of order) {
    let k = ends.findIndex((end) => end + clear <= lo[i]);
    if (k < 0) {
      k = ends.length;
      ends.push(hi[i]);
    } else ends[k] = hi[i];
    track[i] = k;
  }
  return { track, count: ends.length };
}

// Graph wrapping for pictures: a laid-out tall graph cut into columns side by side, aiming at a
// width / height. Cuts go through empty horizontal bands of the top level only (no box is ever cut);
// an edge that crosses a cut runs down below its column, across the gap to the next column on a lane
// of its own, up above that column and down into it again, so it still passes through no box.
import type { Layout, Point, Size } from "../elkgraph";

const COLUMN_GAP = 40;
const LANE = 6;

interface Band {
  top: number;
  bottom: number;
}

/** Free heights of the top level: where a cut can go (between the merged extents of top-level items). */
function cutPlaces(tops: Band[]): number[] {
  const sorted = tops.slice().sort((a, b) => a.top - b.top);
  const cuts: number[] = [];
  let reach = -Infinity;
  for (const b of sorted) {
    if (reach > -Infinity && b.top > reach + 2) cuts.push(reach + 1);
    reach = Math.max(reach, b.bottom);
  }
  return cuts;
}

/** Cut heights for `k` columns: the free places nearest to equal shares of the height. */
function chooseCuts(places: number[], top: number, bottom: number, k: number): number[] {
  const out: number[] = [];
  for (let j = 1; j < k; j++) {
    const aim = top + ((bottom - top) * j) / k;
    let best = NaN;
    for (const p of places) if (p > (out[out.length - 1] ?? -Infinity) && (Number.isNaN(best) || Math.abs(p - aim) < Math.abs(best - aim))) best = p;
    if (!Number.isNaN(best)) out.push(best);
  }
  return out;
}

/** Wraps `layout` in place into columns aiming at `aspect` (width / height). `top` lists the top-level
 *  items, `members` every item's top-level ancestor (itself at the top level). */
export function wrapColumns(layout: Layout, sizeOf: (key: string) => Size | undefined, top: readonly string[], ancestor: ReadonlyMap<string, string>, aspect: number): void {
  const ext = new Map<string, Band & { left: number; right: number }>();
  for (const key of top) {
    const p = layout.positions.get(key);
    const s = layout.boxes.get(key) ?? sizeOf(key);
    if (p && s) ext.set(key, { top: p.y - s.height / 2, bottom: p.y + s.height / 2, left: p.x - s.width / 2, right: p.x + s.width / 2 });
  }
  const all = [...ext.values()];
  if (all.length < 2) return;
  const [y1, y2] = [Math.min(...all.map((b) => b.top)), Math.max(...all.map((b) => b.bottom))];
  const [x1, x2] = [Math.min(...all.map((b) => b.left)), Math.max(...all.map((b) => b.right))];
  const [W, H] = [x2 - x1 + COLUMN_GAP, y2 - y1];
  const k = Math.max(1, Math.round(Math.sqrt((aspect * H) / W)));
  const cuts = chooseCuts(cutPlaces(all), y1, y2, k);
  if (!cuts.length) return;
  const bandOf = (y: number): number => cuts.filter((c) => y > c).length;
  const starts = [y1, ...cuts];
  const ends = [...cuts, y2];
  const lanes = new Array(cuts.length + 1).fill(0);
  const shift = (band: number): Point => ({ x: band * W, y: -(starts[band] - y1) });
  const move = (p: Point, band: number): Point => ({ x: p.x + shift(band).x, y: p.y + shift(band).y });
  for (const [key, p] of layout.positions) {
    const b = ext.get(ancestor.get(key) ?? key);
    if (b) layout.positions.set(key, move(p, bandOf((b.top + b.bottom) / 2)));
  }
  for (const [key, route] of layout.routes) {
    const out: Point[] = [];
    route.forEach((p, i) => {
      if (i > 0) {
        const q = route[i - 1];
        for (const c of cuts) {
          if ((q.y - c) * (p.y - c) >= 0) continue;
          const [from, to] = q.y < c ? [bandOf(c - 0.5), bandOf(c + 0.5)] : [bandOf(c + 0.5), bandOf(c - 0.5)];
          const lane = LANE * ++lanes[Math.min(from, to)];
          const downAt = ends[from] - starts[from] + y1 + lane;
          const upAt = y1 - lane;
          const gapX = x2 + Math.min(from, to) * W + COLUMN_GAP / 2 + (lane % (COLUMN_GAP / 2)) - COLUMN_GAP / 4;
          const x = q.x;
          out.push({ x: x + from * W, y: q.y < c ? downAt : upAt }, { x: gapX, y: q.y < c ? downAt : upAt }, { x: gapX, y: q.y < c ? upAt : downAt }, { x: x + to * W, y: q.y < c ? upAt : downAt });
        }
      }
      out.push(move(p, bandOf(p.y)));
    });
    layout.routes.set(key, out);
  }
}

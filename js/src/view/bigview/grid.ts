// A uniform-grid spatial index over rectangles in typed arrays: what the big view asks every frame
// ("which items touch this viewport?") costs what is found, not the size of the graph. Pure: no DOM,
// no Cytoscape, so node tests reach it.

/** Rectangles as four parallel arrays (model units): item i spans [x1[i], x2[i]] x [y1[i], y2[i]]. */
export interface Rects {
  x1: Float64Array;
  y1: Float64Array;
  x2: Float64Array;
  y2: Float64Array;
}

/** An item covering more cells than this is kept in one list checked by every query (open boxes,
 *  long edges), so the grid stays about as big as the item count. */
const WIDE_CELLS = 64;

export class GridIndex {
  readonly rects: Rects;
  readonly count: number;
  private ox = 0;
  private oy = 0;
  private cell = 1;
  private cols = 1;
  private rows = 1;
  private start: Int32Array;
  private items: Int32Array;
  private wide: Int32Array;
  /** Per item: the query that last reported it (a query sees each item once). */
  private stamp: Uint32Array;
  private query = 0;

  constructor(rects: Rects) {
    this.rects = rects;
    const n = (this.count = rects.x1.length);
    this.stamp = new Uint32Array(n);
    let x1 = Infinity;
    let y1 = Infinity;
    let x2 = -Infinity;
    let y2 = -Infinity;
    for (let i = 0; i < n; i++) {
      x1 = Math.min(x1, rects.x1[i]);
      y1 = Math.min(y1, rects.y1[i]);
      x2 = Math.max(x2, rects.x2[i]);
      y2 = Math.max(y2, rects.y2[i]);
    }
    if (!(x1 <= x2)) [x1, y1, x2, y2] = [0, 0, 1, 1];
    const w = Math.max(1, x2 - x1);
    const h = Math.max(1, y2 - y1);
    // About two items per cell on average, never more cells than 4n + 64.
    let cell = Math.max(16, Math.sqrt((w * h) / Math.max(1, n / 2)));
    while (Math.ceil(w / cell) * Math.ceil(h / cell) > 4 * n + 64) cell *= 1.5;
    this.ox = x1;
    this.oy = y1;
    this.cell = cell;
    this.cols = Math.max(1, Math.ceil(w / cell));
    this.rows = Math.max(1, Math.ceil(h / cell));
    const cells = this.cols * this.rows;
    const counts = new Int32Array(cells + 1);
    const wide: number[] = [];
    const span = new Int32Array(4 * n);
    for (let i = 0; i < n; i++) {
      const c1 = this.col(rects.x1[i]);
      const c2 = this.col(rects.x2[i]);
      const r1 = this.row(rects.y1[i]);
      const r2 = this.row(rects.y2[i]);
      span.set([c1, c2, r1, r2], 4 * i);
      if ((c2 - c1 + 1) * (r2 - r1 + 1) > WIDE_CELLS) {
        wide.push(i);
        continue;
      }
      for (let r = r1; r <= r2; r++) for (let c = c1; c <= c2; c++) counts[r * this.cols + c + 1]++;
    }
    for (let k = 0; k < cells; k++) counts[k + 1] += counts[k];
    this.start = counts;
    this.items = new Int32Array(counts[cells]);
    const fill = counts.slice(0, cells);
    for (let i = 0; i < n; i++) {
      const [c1, c2, r1, r2] = span.subarray(4 * i, 4 * i + 4);
      if ((c2 - c1 + 1) * (r2 - r1 + 1) > WIDE_CELLS) continue;
      for (let r = r1; r <= r2; r++) for (let c = c1; c <= c2; c++) this.items[fill[r * this.cols + c]++] = i;
    }
    this.wide = Int32Array.from(wide);
  }

  private col(x: number): number {
    return Math.min(this.cols - 1, Math.max(0, Math.floor((x - this.ox) / this.cell)));
  }

  private row(y: number): number {
    return Math.min(this.rows - 1, Math.max(0, Math.floor((y - this.oy) / this.cell)));
  }

  /** Calls `visit(i)` once for every item whose rectangle meets [x1, x2] x [y1, y2]; stops early and
   *  returns false when `visit` returns false. */
  each(x1: number, y1: number, x2: number, y2: number, visit: (i: number) => boolean | void): boolean {
    const q = ++this.query;
    const { rects, stamp } = this;
    const meets = (i: number): boolean => rects.x1[i] <= x2 && rects.x2[i] >= x1 && rects.y1[i] <= y2 && rects.y2[i] >= y1;
    for (let k = 0; k < this.wide.length; k++) {
      const i = this.wide[k];
      if (meets(i) && visit(i) === false) return false;
    }
    if (x2 < this.ox || y2 < this.oy || x1 > this.ox + this.cols * this.cell || y1 > this.oy + this.rows * this.cell) return true;
    const c1 = this.col(x1);
    const c2 = this.col(x2);
    const r1 = this.row(y1);
    const r2 = this.row(y2);
    for (let r = r1; r <= r2; r++) {
      for (let c = c1; c <= c2; c++) {
        const cell = r * this.cols + c;
        for (let k = this.start[cell]; k < this.start[cell + 1]; k++) {
          const i = this.items[k];
          if (stamp[i] === q) continue;
          stamp[i] = q;
          if (meets(i) && visit(i) === false) return false;
        }
      }
    }
    return true;
  }

  /** Items meeting the rectangle, up to `limit` (then null: too many to list). */
  within(x1: number, y1: number, x2: number, y2: number, limit = Infinity): number[] | null {
    const found: number[] = [];
    const complete = this.each(x1, y1, x2, y2, (i) => {
      if (found.length >= limit) return false;
      found.push(i);
    });
    return complete ? found : null;
  }
}
